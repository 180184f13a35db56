"""params.yaml is generated: it must always equal the composition of conf/ (what `dvc exp run` writes).
And the sections' schemas: what conf/ ships validates, and an unknown key or a wrong type is a one-line error
naming the full dotted key."""

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tokenmill.benchmarks import Benchmarks
from tokenmill.evaluate.params import Evaluate
from tokenmill.lineage.params import Lineage
from tokenmill.mixture.params import Mixture
from tokenmill.quality.params import Quality
from tokenmill.sample.params import Sample
from tokenmill.tokenize.params import Tokenize
from tokenmill.config import compose
from tokenmill.ingest import Source, load_sources
from tokenmill.section import ParamError

ROOT = Path(__file__).resolve().parents[1]


def test_params_yaml_is_the_composition_of_conf(tmp_path):
    out = tmp_path / "params.yaml"
    compose([], conf_dir=ROOT / "conf", output=out)
    assert yaml.safe_load(out.read_text()) == yaml.safe_load((ROOT / "params.yaml").read_text()), \
        "params.yaml is stale: run `make params`"


def test_every_source_preset_declares_valid_sources(tmp_path):
    for preset in sorted((ROOT / "conf" / "source").glob("*.yaml")):
        out = tmp_path / f"{preset.stem}.yaml"
        compose([f"source={preset.stem}"], conf_dir=ROOT / "conf", output=out)
        sources = load_sources(yaml.safe_load(out.read_text())["sources"])
        assert sources and all(isinstance(s, Source) for s in sources)


def test_tokenizer_sample_weights_are_the_default_mixtures_bulk_phase(tmp_path):
    """The tokenizer keeps its own sample weights (so mixture experiments share one vocabulary); they are
    stated as the default mixture's first phase folded onto document buckets, and must stay so."""
    from tokenmill.mixture import document_bucket_weights

    out = tmp_path / "params.yaml"
    compose([], conf_dir=ROOT / "conf", output=out)
    p = yaml.safe_load(out.read_text())
    assert p["mixture"]["name"] == "default"
    first = next(iter(p["mixture"]["phases"].values()))
    assert document_bucket_weights(first["weights"]) == p["tokenizer"]["sample_weights"]
    # A mixture experiment composes a different mixture but the same tokenizer parameters.
    other = tmp_path / "code_heavy.yaml"
    compose(["mixture=code_heavy"], conf_dir=ROOT / "conf", output=other)
    q = yaml.safe_load(other.read_text())
    assert q["mixture"] != p["mixture"] and q["tokenizer"] == p["tokenizer"]


# ---------------------------------------------------------------------------------------------------------
# Validated sections: quality, mixture, tokenize, sample, lineage, benchmarks, evaluate. Each has one schema, in
# its own package; a typo or a wrong type stops its stage before any work, naming the full dotted key.

REQUIRED = [k for k, f in Mixture.model_fields.items() if f.is_required()]  # a preset states them
SCHEMAS = {"quality": Quality, "mixture": Mixture, "tokenize": Tokenize, "lineage": Lineage, "sample": Sample,
           "benchmarks": Benchmarks, "evaluate": Evaluate}


def _resolved(section: str, given) -> dict:
    return SCHEMAS[section].resolve(given).model_dump()


def _conf(*parts: str) -> dict:
    return yaml.safe_load((ROOT / "conf").joinpath(*parts).read_text())


def test_code_defaults_are_the_shipped_conf():
    """Each default is stated once: the code's DEFAULTS are the shipped conf's values, where the reasons are."""
    assert Quality.defaults() == _conf("quality", "default.yaml")
    assert Tokenize.defaults() == _conf("tokenize", "default.yaml")
    assert Sample.defaults() == _conf("source", "sample.yaml")["sample"]  # the default source preset
    assert Lineage.defaults() == _conf("config.yaml")["lineage"]
    assert Benchmarks.defaults() == _conf("config.yaml")["benchmarks"]
    assert Evaluate.defaults() == _conf("evaluate", "default.yaml")
    # A mixture's name and phases have no default (every preset states them); the rest are the default preset's.
    shipped = _conf("mixture", "default.yaml")
    assert set(Mixture.defaults()) == set(shipped)
    assert {k: v for k, v in Mixture.defaults().items() if k not in REQUIRED} == \
        {k: v for k, v in shipped.items() if k not in REQUIRED}


@pytest.mark.parametrize("overrides, sections", [
    ([], ["quality", "mixture", "tokenize", "sample", "lineage", "benchmarks", "evaluate"]),
    *[([f"mixture={p.stem}"], ["mixture"]) for p in sorted((ROOT / "conf" / "mixture").glob("*.yaml"))],
    *[([f"quality={p.stem}"], ["quality"]) for p in sorted((ROOT / "conf" / "quality").glob("*.yaml"))],
    *[([f"tokenize={p.stem}"], ["tokenize"]) for p in sorted((ROOT / "conf" / "tokenize").glob("*.yaml"))],
    *[([f"source={p.stem}"], ["sample", "lineage"]) for p in sorted((ROOT / "conf" / "source").glob("*.yaml"))],
], ids=lambda v: ",".join(v) if isinstance(v, list) else None)
def test_every_shipped_preset_validates_unchanged(tmp_path, overrides, sections):
    out = tmp_path / "params.yaml"
    compose(overrides, conf_dir=ROOT / "conf", output=out)
    p = yaml.safe_load(out.read_text())
    for section in sections:
        assert _resolved(section, p[section]) == p[section], section  # every key stated, nothing added


def _with(section: str, key: str, value) -> dict:
    """The shipped section (params.yaml) with one dotted key below it set: every other value valid."""
    params = copy.deepcopy(yaml.safe_load((ROOT / "params.yaml").read_text())[section])
    node, *parents = params, *key.split(".")[:-1]
    for part in parents:
        node = node[part]
    node[key.split(".")[-1]] = value
    return params


UNKNOWN = [  # (section, misspelt dotted key below it)
    ("quality", "max_char"), ("quality", "model.epochs"), ("quality", "positives.refrence"),
    ("quality", "keep.top_fractoin"), ("mixture", "max_epoch"), ("mixture", "phases.bulk.fractoin"),
    ("tokenize", "quality_tier"), ("sample", "n_doc"), ("lineage", "groundtruth"),
    ("benchmarks", "max_item"), ("evaluate", "inloop_item"),
]


@pytest.mark.parametrize("section, key", UNKNOWN)
def test_an_unknown_key_is_an_error_naming_it(section, key):
    with pytest.raises(ParamError) as exc:
        _resolved(section, _with(section, key, 1))
    assert str(exc.value).startswith(f"{section}.{key}: unknown parameter (known: ")
    assert "\n" not in str(exc.value)


WRONG = [  # (section, dotted key below it, value, the whole message after "<section>.<key>: ")
    ("quality", "max_chars", "lots", "expected an integer, got 'lots'"),
    ("quality", "model.lr", "fast", "expected a number, got 'fast'"),
    ("quality", "model.folds", 1, "expected an integer >= 2, got 1"),
    ("quality", "positives.max_examples", 1.5, "expected an integer, got 1.5"),
    ("quality", "positives.reference", ["a"], "expected a string, got ['a']"),
    ("quality", "positives.paths", "x.parquet", "expected a list, got 'x.parquet'"),
    ("quality", "positives.paths", [3], None),  # named as positives.paths[0], below
    ("quality", "negatives.buckets", ["web", 2], None),
    ("quality", "keep.mode", "best", "expected top_fraction or threshold, got 'best'"),
    ("quality", "on_degenerate", "ignore", "expected auto, refuse or skip_cut, got 'ignore'"),
    ("mixture", "seed", "x", "expected an integer, got 'x'"),
    ("mixture", "name", 3, "expected a string, got 3"),
    ("mixture", "heldout_fraction", 1.5, "expected a number in [0, 1), got 1.5"),
    ("mixture", "max_epochs", 4, "expected a mapping, got 4"),
    ("mixture", "max_epochs.code", "many", "expected a number, got 'many'"),
    ("mixture", "max_epochs.default", 0, "expected a positive number, got 0"),
    ("mixture", "phases.bulk.weights.code", "x", "expected a number, got 'x'"),
    ("mixture", "phases.bulk.fraction", "most", "expected a number, got 'most'"),
    ("tokenize", "quality_tiers", ["web"], "expected a mapping, got ['web']"),
    ("tokenize", "quality_tiers.web", 0.5, "expected a mapping, got 0.5"),
    ("tokenize", "quality_tiers.web.high", "top", "expected a number, got 'top'"),
    ("tokenize", "quality_tiers.web.high", 1.5, "expected a number in [0, 1], got 1.5"),
    ("sample", "enabled", "yes", "expected true or false, got 'yes'"),
    ("sample", "n_docs", 1e3, "expected an integer, got 1000.0"),
    ("sample", "planted_eval_items", 500, None),
    ("lineage", "ground_truth", 3, "expected a string, got 3"),
    ("benchmarks", "max_items", 0, "expected a positive integer or null, got 0"),
    ("benchmarks", "seed", "x", "expected an integer, got 'x'"),
    ("evaluate", "limit", 0, "expected a positive integer or null, got 0"),
    ("evaluate", "inloop_items", -1, "expected a count (0 or more), got -1"),
    ("evaluate", "device", "tpu", "expected cpu or cuda, got 'tpu'"),
    ("evaluate", "batch_size", "big", "expected an integer, got 'big'"),
]


@pytest.mark.parametrize("section, key, value, message", WRONG)
def test_a_wrong_type_or_value_is_an_error_naming_the_key(section, key, value, message):
    with pytest.raises(ParamError) as exc:
        _resolved(section, _with(section, key, value))
    if isinstance(value, list) and message is None:  # a bad item: the key and its index
        index = next(i for i, v in enumerate(value) if not isinstance(v, str))
        assert str(exc.value).startswith(f"{section}.{key}[{index}]: expected a string, got ")
    elif message is None:
        assert str(exc.value).startswith(f"{section}.{key}: expected ")
    else:
        assert str(exc.value) == f"{section}.{key}: {message}"


def test_missing_mixture_name_or_phases_is_an_error():
    for key in REQUIRED:
        params = _with("mixture", "seed", 1)
        del params[key]
        with pytest.raises(ParamError, match=rf"^mixture\.{key}: missing"):
            _resolved("mixture", params)


def test_a_free_mapping_replaces_its_default_whole():
    """quality_tiers and max_epochs are keyed by buckets: a given tiers mapping replaces the default (`{}`
    or null turns tiers off); max_epochs keeps `default` for the buckets it does not name."""
    assert _resolved("tokenize", {"quality_tiers": {"code": {"top": 0.9, "rest": 0}}})["quality_tiers"] == \
        {"code": {"top": 0.9, "rest": 0}}
    assert _resolved("tokenize", {"quality_tiers": {}})["quality_tiers"] == {}
    assert _resolved("tokenize", {"quality_tiers": None})["quality_tiers"] == {}
    assert _resolved("tokenize", {}) == Tokenize.defaults()
    caps = _resolved("mixture", _with("mixture", "max_epochs", {"code": 2}))["max_epochs"]
    assert caps == {"default": Mixture.defaults()["max_epochs"]["default"], "code": 2}
    # null is "none" where the stage reads it so: no fallback reference corpus, no planted cases scored
    assert _resolved("quality", {"positives": {"reference": None}})["positives"]["reference"] is None
    assert _resolved("lineage", {"ground_truth": None}) == {"ground_truth": None}


@pytest.mark.parametrize("stage, args, section, key", [
    ("mixture.py", ["tokenize"], "mixture", "max_epoch"),
    ("sample.py", ["benchmarks"], "sample", "n_doc"),
    ("benchmarks.py", [], "benchmarks", "max_item"),
])
def test_a_stage_with_a_misspelt_key_stops_with_one_line(tmp_path, stage, args, section, key):
    """The stage script, as dvc runs it: exit code 2 and one line naming the key, no traceback, no output."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params[section][key] = params[section].pop(key + "s", 1)  # max_epochs -> max_epoch, or a new key
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    env = {k: v for k, v in os.environ.items() if k != "DVC_STAGE"}  # the script names itself
    run = subprocess.run([sys.executable, str(ROOT / "stages" / stage), *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert run.stderr.count("\n") == 1 and run.stderr.startswith(f"{stage[:-3]}: {section}.{key}: unknown parameter")
    assert not (tmp_path / "data").exists()  # stopped before any work


def test_tokenmill_is_a_regular_package():
    """A namespace package (no __init__.py) merges the `src` of every checkout on the path into one package,
    so a test could run another checkout's code (issue 11, item 4)."""
    import tokenmill

    assert tokenmill.__file__ == str(ROOT / "src" / "tokenmill" / "__init__.py")


def test_make_params_composes_without_installing(tmp_path):
    """`make params` with a virtualenv present recomposes params.yaml and installs nothing (issue 11, item 4)."""
    import shutil

    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    venv = Path(sys.executable).parents[1]
    proc = subprocess.run(["make", "params", f"VENV={venv}"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "pip" not in proc.stdout + proc.stderr and not (tmp_path / ".venv").exists()
    assert (tmp_path / "params.yaml").read_text() == (ROOT / "params.yaml").read_text()

