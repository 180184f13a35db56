"""params.yaml is generated: it must always equal the composition of conf/ (what `dvc exp run` writes)."""

from pathlib import Path

import yaml

from tokenmill.config import compose
from tokenmill.ingest import Source, load_sources

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
