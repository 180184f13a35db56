"""The one schema of params.yaml (tokenmill.params) and the check stage's names across sections.

Every shipped preset validates unchanged; each class of bad value a user writes — a wrong type, a value out
of range, a value not allowed, a misspelt key, a name that refers to nothing — is one line naming the dotted
key, what is allowed and the value, and all problems of a configuration are reported at once.
"""

import copy
from pathlib import Path

import pytest
import yaml

from tokenmill import params as P
from tokenmill.check import check_config
from tokenmill.config import compose

ROOT = Path(__file__).resolve().parents[1]
DVC = yaml.safe_load((ROOT / "dvc.yaml").read_text())
PRESETS = [f"{p.parent.name}={p.stem}" for group in ("scale", "mixture", "source", "scouts", "model")
           for p in sorted((ROOT / "conf" / group).glob("*.yaml"))]


def _composed(tmp_path: Path, *overrides: str) -> dict:
    compose(list(overrides), conf_dir=ROOT / "conf", output=tmp_path / "params.yaml")
    return yaml.safe_load((tmp_path / "params.yaml").read_text())


def _with(params: dict, key: str, value) -> dict:
    out = copy.deepcopy(params)
    node, *parts = out, *key.split(".")
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value
    return out


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> dict:
    return _composed(tmp_path_factory.mktemp("params"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_shipped_preset_is_valid(tmp_path, preset):
    assert P.problems(_composed(tmp_path, preset)) == []


def test_an_annealing_test_needs_the_decay_phase_it_branches_from(shipped):
    """The anneal stage branches the full run where WSD's decay phase begins: a mixture without that phase, or a
    cosine schedule, is a problem before ingest, not a failed anneal after the full run (the balanced preset had
    one phase, `all`, and `dvc exp run -S mixture=balanced` failed there)."""
    one_phase = _with(shipped, "mixture.phases", {"all": {**shipped["mixture"]["phases"]["bulk"], "fraction": 1.0}})
    assert P.problems(one_phase) == [
        "anneals: the mixture 'default' has no phase 'anneal' (train.schedule.decay_phase) for a test to anneal "
        "(its phases: all): give it one, or run no test (-S '~anneals.reference')"]
    assert P.problems(_with(one_phase, "anneals", {})) == []  # no test: a one-phase mixture is fine
    assert P.problems(_with(one_phase, "train.schedule.decay_phase", "all")) == [  # nothing stable before it
        "anneals: the decay phase 'all' is the mixture's first, so the full run has no stable phase before it to "
        "branch from: plan a phase before it, or run no test (-S '~anneals.reference')"]
    cosine = P.problems(_with(shipped, "train.schedule.kind", "cosine"))
    assert cosine == ["anneals: a test branches where WSD decays over train.schedule.decay_phase, but "
                      "train.schedule is 'cosine' with decay_phase 'anneal': set kind wsd and a decay phase, or run "
                      "no test (-S '~anneals.reference')"], cosine


def test_every_section_of_params_yaml_has_a_schema(shipped):
    beside_their_code = {"sources", "model", "train", "scouts", "forecast", "anneals"}
    assert set(shipped) <= set(P.SECTIONS) | beside_their_code
    assert P.problems({**shipped, "dedupe": {}}) == ["dedupe: unknown section (did you mean 'dedup'?)"]


BAD = [  # (dotted key, value, the whole line)
    # types
    ("train.global_batch", "sixteen", "train.global_batch: expected an integer, got 'sixteen'"),
    ("filter.gopher_quality.min_words", "fifty", "filter.gopher_quality.min_words: expected an integer, got 'fifty'"),
    ("pii.keep_private_ip", "maybe", "pii.keep_private_ip: expected true or false, got 'maybe'"),
    ("dedup.near.num_perm", 1.5, "dedup.near.num_perm: expected an integer, got 1.5"),
    # ranges
    ("dedup.near.threshold", 1.5, "dedup.near.threshold: expected a number in (0, 1], got 1.5"),
    ("train.global_batch", 0, "train.global_batch: expected a positive integer, got 0"),
    ("mixture.heldout_fraction", -0.1, "mixture.heldout_fraction: expected a number in [0, 1), got -0.1"),
    ("mixture.phases.bulk.weights.code", -0.5, "mixture.phases.bulk.weights.code: expected a number >= 0, got -0.5"),
    ("quality.keep.top_fraction", 1.2, "quality.keep.top_fraction: expected a number in (0, 1], got 1.2"),
    ("decontaminate.threshold", 2, "decontaminate.threshold: expected a number in (0, 1], got 2"),
    ("evaluate.limit", 0, "evaluate.limit: expected a positive integer or null, got 0"),
    ("tokenizer.vocab_size", 10, "tokenizer.vocab_size: expected more than 279 (256 byte pieces, 4 specials, "
                                 "16 reserved, 3 user symbols), got 10"),
    ("filter.gopher_quality.min_words", 10 ** 6,
     "filter.gopher_quality.min_words: expected at most max_words (100000), got 1000000"),
    ("scouts.s1.seeds", 0, "scouts.s1.seeds: expected a positive integer, got 0"),
    ("scouts.s1.lrs", [3.0e-3, 0.0], "scouts.s1.lrs[1]: expected a positive number, got 0.0"),
    ("forecast.interval", 2, "forecast.interval: expected a number in (0, 1), got 2"),
    ("execution.duckdb_memory_limit", "lots", "execution.duckdb_memory_limit: expected a size such as 512MB or "
                                              "2GB, got 'lots'"),
    # enumerations
    ("tokenizer.model_type", "bpee", "tokenizer.model_type: expected bpe or unigram, got 'bpee'"),
    ("pii.phone_validation", "sometimes", "pii.phone_validation: expected valid or possible, got 'sometimes'"),
    ("ingest.extractor", "lxml", "ingest.extractor: expected resiliparse, cascade or trafilatura, got 'lxml'"),
    ("filter.language.allowed", ["english"],
     "filter.language.allowed: ['english'] are not labels of the language model, which knows 176 ISO 639 codes "
     "such as en, de, fr, zh (filter.language.model: lid.176)"),
    ("pii.phone_regions", ["UK"], "pii.phone_regions: unknown regions ['UK'] (ISO 3166 alpha-2 codes, e.g. US, GB, DE)"),
    ("decontaminate.benchmarks", [{"name": "gsm", "format": "gsm8kk", "path": "x.jsonl"}],
     "decontaminate.benchmarks[0].format: expected one of olmes, gsm8k, humaneval, mmlu_csv, hellaswag, "
     "llm_foundry, tokenmill, got 'gsm8kk' (did you mean 'gsm8k'?)"),
    ("sources.sample_web.format", "warcs", "sources.sample_web.format: expected one of warc, wet, arc, jsonl, "
                                           "parquet, text, got 'warcs'"),
    # a mixture whose phases do not add up
    ("mixture.phases.bulk.fraction", 0.5,
     "mixture.phases: the fractions must sum to 1, got 0.6 (bulk 0.5, anneal 0.1)"),
]


@pytest.mark.parametrize("key, value, line", BAD, ids=[f"{k}={v!r}"[:60] for k, v, _ in BAD])
def test_a_bad_value_is_one_line_naming_key_allowed_and_value(shipped, key, value, line):
    assert P.problems(_with(shipped, key, value)) == [line]


def test_a_misspelt_key_names_the_known_ones_and_the_nearest(shipped):
    near = copy.deepcopy(shipped)
    near["dedup"]["near"]["treshold"] = 0.5
    [line] = P.problems(near)
    assert line.startswith("dedup.near.treshold: unknown parameter (known: bands, bucket_window, enabled, ")
    assert line.endswith("; did you mean 'threshold'?")
    switch = _with(shipped, "filter.buckets.code", {"langauge": False})
    assert P.problems(switch) == ["filter.buckets.code.langauge: unknown parameter (known: blocklists, c4, fineweb, "
                                  "gopher_quality, gopher_repetition, language, licences); did you mean 'language'?"]


def test_every_problem_at_once(shipped):
    bad = _with(_with(_with(shipped, "dedup.near.threshold", 1.5), "train.global_batch", "x"), "pii.enabled", 1)
    assert [line.split(":")[0] for line in P.problems(bad)] == ["pii.enabled", "dedup.near.threshold",
                                                                "train.global_batch"]


def test_resolve_fills_defaults_and_raises_one_line_per_problem():
    """A stage resolves its section through its own package's schema: defaults filled in, the typed model back,
    every problem at once on one line each."""
    from tokenmill.dedup.params import Dedup
    from tokenmill.section import ParamError

    assert Dedup.resolve({}).near.threshold == 0.8
    assert Dedup.resolve({"near": {"threshold": 0.5}}).near.model_dump() == {**Dedup.defaults()["near"], "threshold": 0.5}
    with pytest.raises(ParamError, match=r"^dedup\.near\.threshold: expected .*; dedup\.lines\.max_docs: expected"):
        Dedup.resolve({"near": {"threshold": 0}, "lines": {"max_docs": 0}})


def test_every_schema_is_its_own_packages_and_the_gatherer_only_gathers():
    """Each section's schema lives in the package whose stage reads it (tokenmill.<package>.params, or beside the
    code for train, scouts, forecast and benchmarks); tokenmill.params defines no schema of its own."""
    from pydantic import BaseModel

    for name, model in P.SECTIONS.items():
        assert model.__module__ != P.__name__ and model.section == name, (name, model.__module__)
    assert not [n for n, v in vars(P).items() if isinstance(v, type) and issubclass(v, BaseModel)
                and v.__module__ == P.__name__]


# ---------------------------------------------------------------------------------------------------------
# Names across sections: the check stage, which knows the sources


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for folder in ("web", "code", "reference", "licenses"):
        (root / "data" / "sample" / folder).mkdir(parents=True)
    (root / "data" / "sample" / "web" / "a.warc.gz").write_bytes(b"")
    (root / "data" / "sample" / "code" / "a.jsonl.zst").write_bytes(b"")
    (root / "data" / "sample" / "reference" / "a.parquet").write_bytes(b"")
    (root / "data" / "sample" / "licenses" / "a.txt").write_bytes(b"")
    return root


@pytest.mark.parametrize("key, value, line", [
    ("mixture.phases.anneal.weights", {"web/high": 0.3, "refrence": 0.5, "code": 0.2},
     "mixture.phases.anneal.weights.refrence: 'refrence' is not declared (known: code, legal, reference, web); "
     "did you mean 'reference'?"),
    ("mixture.phases.anneal.weights", {"web/hihg": 0.5, "code": 0.5},
     "mixture.phases.anneal.weights.web/hihg: bucket 'web' has the quality tiers high, low "
     "(tokenize.quality_tiers.web), not 'hihg'"),
    ("quality.cut_buckets", ["webb"],
     "quality.cut_buckets[0]: 'webb' is not declared (known: code, legal, reference, web); did you mean 'web'?"),
    ("quality.positives.sources", ["sample_refrence"],
     "quality.positives.sources[0]: 'sample_refrence' is not declared (known: sample_code, sample_licenses, "
     "sample_reference, sample_web); did you mean 'sample_reference'?"),
    ("dedup.lines.skip_buckets", ["cod"],
     "dedup.lines.skip_buckets[0]: 'cod' is not declared (known: code, legal, reference, web); did you mean 'code'?"),
])
def test_a_name_that_misses_what_it_refers_to_is_a_problem(tmp_path, shipped, key, value, line):
    result = check_config(_with(shipped, key, value), DVC, _project(tmp_path))
    assert line in result["problems"], result["problems"]


def test_a_misspelt_bucket_is_caught_where_no_source_fills_either(tmp_path):
    """On the crawl preset only `web` has documents; `reference` is weighted by the presets all the same (its
    weight is spread over web, one warning). `refrence` beside it is a typo of it, not one more missing bucket."""
    crawl = _composed(tmp_path, "source=crawl", "+mixture.phases.anneal.weights.refrence=0.5")
    root = tmp_path / "crawl"
    (root / "data" / "raw" / "warc").mkdir(parents=True)
    (root / "data" / "raw" / "warc" / "a.warc.gz").write_bytes(b"")
    problems = [p for p in check_config(crawl, DVC, root)["problems"] if "weights" in p]
    assert problems == ["mixture.phases.anneal.weights.refrence: 'refrence' is not declared (known: code, legal, "
                        "reference, web); did you mean 'reference'?"]


def test_a_crawl_file_no_glob_takes_is_named(tmp_path, shipped):
    """An uncompressed WARC beside the gzipped ones used to appear nowhere; the check names it."""
    root = _project(tmp_path)
    (root / "data" / "sample" / "web" / "b.warc").write_bytes(b"")
    (root / "data" / "sample" / "web" / "notes.md").write_bytes(b"")  # not a WARC: not named
    result = check_config(shipped, DVC, root)
    assert ("sources.sample_web.paths: 1 warc files under its folders match no glob and are not read: "
            "data/sample/web/b.warc; add a glob for them") in result["warnings"], result["warnings"]
    # the crawl preset's globs take gzipped and plain files alike
    crawl = _composed(tmp_path, "source=crawl")
    assert crawl["sources"]["crawl_warc"]["paths"] == ["data/raw/warc/**/*.warc*"]
