"""The one schema of params.yaml: every section's keys, types, ranges and allowed values, in one place.

Each section is a strict pydantic model (unknown keys and wrong types are errors; an int is accepted where a
number is expected, "3" is not an int, 1 is not true). Ranges, enumerations and the names a value must refer
to (a benchmark format the readers know, a language label lid.176 knows, a region phonenumbers knows) are
stated here and nowhere else: a stage resolves its section with `resolve(name, given)` and gets the values
with the defaults filled in, or a ParamError; the check stage runs `problems(params)` over the whole
composed configuration before any data stage does work and prints every problem at once, one line each:

    dedup.near.threshold: expected a number in (0, 1], got 1.5

The training sections (model, train) and the forecast's keep their schemas beside the code that reads them
(tokenmill.train.config, tokenmill.forecast); `problems` validates them through those. Names that depend on
more than one section (a mixture weight's bucket against the buckets the sources fill) are the check stage's
(tokenmill.check), which sees the files too.
"""

from __future__ import annotations

import difflib
import functools
import re
import types
import typing
from typing import Annotated, Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo

from tokenmill.runtime import ParamError


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


Fraction = Annotated[float, Field(ge=0, le=1)]  # probabilities, fractions of lines, characters, words
Count = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(gt=0)]


# ---------------------------------------------------------------------------------------------------------
# Embedded data: benchmarks, sample


class Benchmarks(_Section):
    max_items: Positive | None = 1000  # per benchmark, a seeded random sample (null: all)
    seed: int = 1234


class Sample(_Section):
    enabled: bool = True
    n_docs: Count = 12000
    seed: int = 1234
    eval_items: Count = 200
    planted_eval_items: Count = 24
    planted_benchmark_items: Count = 22

    @model_validator(mode="after")
    def _planted_among_eval(self) -> "Sample":
        # Only the embedded crawl plants items; a real crawl's run (enabled: false) ignores the count.
        if self.enabled and self.planted_eval_items > self.eval_items:
            raise ValueError(f"planted_eval_items: expected at most sample.eval_items ({self.eval_items}), got "
                             f"{self.planted_eval_items}: planted items are some of the eval items")
        return self


# ---------------------------------------------------------------------------------------------------------
# Sources and ingest


def _source_formats() -> tuple[str, ...]:
    from tokenmill.ingest import FORMATS
    return tuple(FORMATS)


class Source(_Section):
    format: str
    paths: list[str] | str
    bucket: str = Field(min_length=1)
    licence: str = Field(min_length=1)
    snapshot: str = ""
    root: str | None = None  # file names are recorded relative to this; default: the globs' common dir
    text_field: str = "text"
    url_field: str | None = "url"
    id_field: str | None = "id"
    date_field: str | None = None
    optional: bool = False  # a source whose globs may match nothing (a format the user may not have)

    @field_validator("format")
    @classmethod
    def _known_format(cls, v: str) -> str:
        if v not in _source_formats():
            raise ValueError(f"expected one of {', '.join(_source_formats())}, got {v!r}")
        return v

    @field_validator("paths")
    @classmethod
    def _some_paths(cls, v):
        if not v:
            raise ValueError("expected at least one glob")
        return v


class Ingest(_Section):
    # cascade: resiliparse, then the article container, trafilatura only for near-empty pages; the best F1 of
    # the extractors at more than 4x trafilatura's speed, on its tuning pages and on 181 held-out articles
    # (0.944 at 3.2 CPU-ms a page; resiliparse 0.916 at 1.3, trafilatura 0.960 at 17.4: RESULTS.md, "HTML
    # extraction on held-out articles").
    extractor: Literal["resiliparse", "cascade", "trafilatura"] = "cascade"
    max_payload_bytes: Positive = 10_000_000  # larger records are dropped as `oversized` without being read


# ---------------------------------------------------------------------------------------------------------
# filter


class Licences(_Section):
    enabled: bool = True
    allow: list[str] | None = None  # None: the licence gate is off


class Blocklists(_Section):
    enabled: bool = True
    domain_files: list[str] = []
    url_files: list[str] = []
    banned_url_words: list[str] = []
    banned_url_word_files: list[str] = []
    soft_banned_url_words: list[str] = []
    soft_banned_url_word_files: list[str] = []
    soft_banned_url_word_threshold: Positive = 2
    banned_url_subwords: list[str] = []
    banned_url_subword_files: list[str] = []


@functools.lru_cache(maxsize=4)
def language_labels(model: str | None) -> frozenset[str]:
    """The labels the language model predicts (lid.176: 176 ISO codes), read from the model itself."""
    from tokenmill.filters.langid import labels
    return frozenset(labels(model))


class Language(_Section):
    enabled: bool = True
    model: str | None = None  # None: the pinned lid.176.ftz
    allowed: list[str] = Field(default=["en"], min_length=1)  # labels of the model (lid.176: ISO 639 codes)
    min_score: Fraction = 0.65
    max_chars: Positive = 3000

    @model_validator(mode="after")
    def _labels_known(self) -> "Language":
        # Checked even when the group is off: a bucket may switch it on.
        known = language_labels(self.model)
        bad = [a for a in self.allowed if a not in known]
        if bad:
            raise ValueError(f"allowed: {bad} are not labels of the language model, which knows {len(known)} "
                             f"ISO 639 codes such as en, de, fr, zh (filter.language.model: {self.model or 'lid.176'})")
        return self


class GopherRepetition(_Section):
    enabled: bool = True
    max_dup_para_frac: Fraction = 0.30
    max_dup_para_char_frac: Fraction = 0.20
    max_dup_line_frac: Fraction = 0.30
    max_dup_line_char_frac: Fraction = 0.20
    max_top_2gram_char_frac: Fraction = 0.20
    max_top_3gram_char_frac: Fraction = 0.18
    max_top_4gram_char_frac: Fraction = 0.16
    max_dup_5gram_char_frac: Fraction = 0.15
    max_dup_6gram_char_frac: Fraction = 0.14
    max_dup_7gram_char_frac: Fraction = 0.13
    max_dup_8gram_char_frac: Fraction = 0.12
    max_dup_9gram_char_frac: Fraction = 0.11
    max_dup_10gram_char_frac: Fraction = 0.10


class GopherQuality(_Section):
    enabled: bool = True
    min_words: Count = 50
    max_words: Positive = 100_000
    min_mean_word_length: Annotated[float, Field(ge=0)] = 3.0
    max_mean_word_length: Annotated[float, Field(gt=0)] = 10.0
    max_hash_word_ratio: Fraction = 0.1
    max_ellipsis_word_ratio: Fraction = 0.1
    max_bullet_line_frac: Fraction = 0.9
    max_ellipsis_line_frac: Fraction = 0.3
    min_alpha_word_frac: Fraction = 0.8
    min_stop_words: Count = 2
    stop_words: list[str] = ["the", "be", "to", "of", "and", "that", "have", "with"]
    bullets: list[str] = ["•", "●", "○", "◦", "▪", "▫", "■", "□", "‣", "⁃", "∙", "·", "-", "–", "*"]

    @model_validator(mode="after")
    def _bounds_ordered(self) -> "GopherQuality":
        if self.min_words > self.max_words:
            raise ValueError(f"min_words: expected at most max_words ({self.max_words}), got {self.min_words}")
        return self


class C4(_Section):
    enabled: bool = True
    min_terminal_punct_char_frac: Fraction = 0.5
    min_words_per_line: Count = 5
    max_word_length: Positive = 1000
    max_lorem_ipsum: Count = 0
    max_curly_brace_lines: Count = 0
    max_javascript_line_frac: Fraction = 0.2
    policy_substrings: list[str] = ["terms of use", "privacy policy", "cookie policy", "uses cookies",
                                    "use of cookies", "use cookies"]
    max_policy_line_frac: Fraction = 0.2
    min_sentences: Count = 3


class FineWeb(_Section):
    enabled: bool = True
    stop_chars: list[str] = [".", "'", '"', "!", "?", "”", "’", "»", "›", "…"]
    closing_brackets: list[str] = [")", "]", "}"]
    min_line_punct_ratio: Fraction = 0.12
    short_line_length: Positive = 30
    max_short_line_ratio: Fraction = 0.67
    max_char_dup_ratio: Fraction = 0.01
    max_newline_word_ratio: Annotated[float, Field(ge=0)] = 0.3


class BucketSwitches(_Section):
    """Per bucket: a rule group switched on or off for its documents (unset: the group's `enabled`)."""

    licences: bool | None = None
    blocklists: bool | None = None
    language: bool | None = None
    gopher_repetition: bool | None = None
    gopher_quality: bool | None = None
    c4: bool | None = None
    fineweb: bool | None = None


class Filter(_Section):
    licences: Licences = Licences()
    blocklists: Blocklists = Blocklists()
    language: Language = Field(default_factory=Language)
    gopher_repetition: GopherRepetition = GopherRepetition()
    gopher_quality: GopherQuality = GopherQuality()
    c4: C4 = C4()
    fineweb: FineWeb = FineWeb()
    buckets: dict[str, BucketSwitches] = {}


# ---------------------------------------------------------------------------------------------------------
# pii


def _pii_types() -> tuple[str, ...]:
    from tokenmill.pii.detectors import TYPES
    return tuple(TYPES)


def _pii_regions() -> tuple[str, ...]:
    from tokenmill.pii.detectors import DEFAULT_REGIONS
    return DEFAULT_REGIONS


class Pii(_Section):
    enabled: dict[str, bool] = {}  # types left out are on
    tokens: dict[str, str] = {}  # types left out get <TYPE>
    phone_regions: list[str] = Field(default_factory=lambda: list(_pii_regions()))
    # valid: the number is in a range its plan allocates (is_valid_number); possible: only its length fits the
    # plan (is_possible_number), which also accepts numbers with unassigned area codes (RESULTS.md, PII)
    phone_validation: Literal["valid", "possible"] = "valid"
    keep_private_ip: bool = False

    @field_validator("enabled", "tokens")
    @classmethod
    def _known_types(cls, v: dict) -> dict:
        bad = sorted(set(v) - set(_pii_types()))
        if bad:
            raise ValueError(f"unknown types {bad}; known: {', '.join(_pii_types())}")
        return v

    @field_validator("phone_regions")
    @classmethod
    def _known_regions(cls, v: list[str]) -> list[str]:
        import phonenumbers

        bad = [r for r in v if r.upper() not in phonenumbers.SUPPORTED_REGIONS]
        if bad:
            raise ValueError(f"unknown regions {bad} (ISO 3166 alpha-2 codes, e.g. US, GB, DE)")
        return v


# ---------------------------------------------------------------------------------------------------------
# dedup


class Exact(_Section):
    enabled: bool = True
    strip_punctuation: bool = False


class Near(_Section):
    enabled: bool = True
    ngram: Positive = 5
    num_perm: Positive = 128
    seed: int = 1
    threshold: Annotated[float, Field(gt=0, le=1)] = 0.8  # Jaccard similarity of two documents' n-gram sets
    # LSH bands x rows minimise fp_weight * (false positive area) + fn_weight * (false negative area).
    # Verification removes false positives afterwards; nothing recovers a false negative.
    false_positive_weight: Annotated[float, Field(ge=0)] = 0.1
    false_negative_weight: Annotated[float, Field(ge=0)] = 0.9
    bands: Positive | None = None  # set both bands and rows to override the optimisation
    rows: Positive | None = None
    verify: bool = True
    bucket_window: Positive = 100

    @model_validator(mode="after")
    def _lsh_shape(self) -> "Near":
        if (self.bands is None) != (self.rows is None):
            raise ValueError("bands and rows: set both (to override the optimised LSH shape) or neither")
        if self.bands is not None and self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands x rows: expected at most num_perm ({self.num_perm}), got "
                             f"{self.bands} x {self.rows}")
        return self


class Lines(_Section):
    enabled: bool = True
    min_chars: Count = 20
    max_docs: Positive = 10
    skip_buckets: list[str] = ["code"]


class Dedup(_Section):
    exact: Exact = Exact()
    near: Near = Near()
    lines: Lines = Lines()


# ---------------------------------------------------------------------------------------------------------
# quality


class ReferenceDataset(_Section):
    path: str | None = None       # a Hugging Face dataset (its Hub name) or a local folder in its layout
    name: str | None = None       # its configuration, where it has several
    split: str = "train"
    revision: str | None = None   # the dataset repository's commit: pin it, the reference is part of the recipe
    text_field: str = "text"


class Positives(_Section):
    sources: list[str] = ["sample_reference"]
    paths: list[str] = []
    dataset: ReferenceDataset = ReferenceDataset()
    reference: str | None = "data/sample/reference/*.parquet"  # null: no fallback corpus
    max_examples: Positive = 20000


class Negatives(_Section):
    buckets: list[str] = ["web"]
    max_examples: Positive = 20000


class FastTextModel(_Section):
    dim: Positive = 64
    epoch: Positive = 25
    lr: Annotated[float, Field(gt=0)] = 0.5
    word_ngrams: Positive = 2
    hash_buckets: Positive = 200000
    min_count: Positive = 1
    seed: int = 1234
    folds: Annotated[int, Field(ge=2)] = 2  # scores are cross-fitted


class Keep(_Section):
    mode: Literal["top_fraction", "threshold"] = "top_fraction"
    top_fraction: Annotated[float, Field(gt=0, le=1)] = 0.7
    threshold: Fraction = 0.5


class Quality(_Section):
    positives: Positives = Positives()
    negatives: Negatives = Negatives()
    cut_buckets: list[str] = ["web"]
    max_chars: Positive = 10000
    model: FastTextModel = FastTextModel()
    min_separation: Fraction = 0.2
    min_score_spread: Fraction = 0.02
    # auto: refuse when the reference was named, keep the crawl (with a warning) when it is the project's own
    on_degenerate: Literal["auto", "refuse", "skip_cut"] = "auto"
    keep: Keep = Keep()


# ---------------------------------------------------------------------------------------------------------
# decontaminate


def _benchmark_formats() -> tuple[str, ...]:
    from tokenmill.decontam.readers import READERS
    return tuple(READERS)


class BenchmarkFile(_Section):
    name: str = Field(min_length=1)
    format: str
    path: str = Field(min_length=1)
    optional: bool = False

    @field_validator("format")
    @classmethod
    def _known_format(cls, v: str) -> str:
        if v not in _benchmark_formats():
            near = difflib.get_close_matches(v, _benchmark_formats(), n=1)
            raise ValueError(f"expected one of {', '.join(_benchmark_formats())}, got {v!r}"
                             + (f" (did you mean {near[0]!r}?)" if near else ""))
        return v


class Decontaminate(_Section):
    ngram: Positive = 5
    min_item_words: Positive = 8
    threshold: Annotated[float, Field(gt=0, le=1)] = 0.8
    min_matches: Positive = 32
    template_items: Positive = 10
    slack: Count = 8
    action: Literal["drop", "flag"] = "drop"
    benchmarks: list[BenchmarkFile] = []

    @field_validator("benchmarks")
    @classmethod
    def _unique_names(cls, v: list[BenchmarkFile]) -> list[BenchmarkFile]:
        names = [b.name for b in v]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"benchmark names must be unique (items are named by them), repeated: {twice}")
        return v


# ---------------------------------------------------------------------------------------------------------
# tokenizer, tokenize


class Tokenizer(_Section):
    sample_weights: dict[str, Annotated[float, Field(ge=0)]] = {}  # bucket -> share of the training sample
    model_type: Literal["bpe", "unigram"] = "bpe"
    vocab_size: Positive = 16384
    sample_bytes: Positive = 20_000_000  # UTF-8 bytes of documents in the training sample
    seed: int = 1234
    num_reserved: Count = 16  # <reserved_0> .. : control ids kept free for later use (chat markers, FIM, ...)
    user_defined_symbols: list[str] = ["\n", "\t", "\r"]
    character_coverage: Annotated[float, Field(gt=0, le=1)] = 0.9999  # rarer characters: byte fallback
    max_piece_length: Positive = 16
    max_sentence_bytes: Positive = 8192  # longer training lines are cut (SentencePiece would skip them)
    num_threads: Positive = 1  # part of the result for unigram (float sums), so fixed rather than os.cpu_count()
    unk_piece: str = "<unk>"
    bos_piece: str = "<s>"
    eos_piece: str = "</s>"
    pad_piece: str = "<pad>"

    @model_validator(mode="after")
    def _room_for_pieces(self) -> "Tokenizer":
        if "\n" not in self.user_defined_symbols:
            raise ValueError('user_defined_symbols: must contain "\\n" (training lines cannot hold it otherwise)')
        # Byte fallback keeps 256 byte pieces; the four specials, the reserved ids and the user symbols come on
        # top. How many more the sample's characters need only the sample says (the stage names it then).
        fixed = 256 + 4 + self.num_reserved + len(self.user_defined_symbols)
        if self.vocab_size <= fixed:
            raise ValueError(f"vocab_size: expected more than {fixed} (256 byte pieces, 4 specials, "
                             f"{self.num_reserved} reserved, {len(self.user_defined_symbols)} user symbols), "
                             f"got {self.vocab_size}")
        return self


class Canaries(_Section):
    """Secrets planted to measure memorisation (tokenmill.canaries): `sets` canaries per visit count."""
    sets: Count = 2  # 0: none planted
    # planned visits of each canary in the training stream; 0: a control, scored but never planted
    visits: list[Count] = [0, 1, 2, 4, 8, 16]
    digits: Annotated[int, Field(ge=4, le=32)] = 10  # of the secret: 10^digits secrets of the format
    candidates: Annotated[int, Field(ge=1)] = 999  # random secrets each is ranked among: exposure <= log2(N+1)
    seed: int = 0

    @field_validator("visits")
    @classmethod
    def _distinct(cls, v):
        if len(set(v)) != len(v):  # a canary is named by its set and visit count
            raise ValueError(f"expected distinct visit counts, got {v}")
        return v


class Tokenize(_Section):
    # bucket -> {tier: minimum quality quantile}; a given mapping replaces the default whole ({} or null: none)
    quality_tiers: dict[str, dict[str, Fraction]] | None = {"web": {"high": 0.5, "low": 0.0}}
    canaries: Canaries = Canaries()

    @field_validator("quality_tiers")
    @classmethod
    def _tiers_named(cls, v):
        for bucket, tiers in (v or {}).items():
            if not tiers:
                raise ValueError(f"{bucket}: expected at least one tier, got {tiers!r}")
        return v


# ---------------------------------------------------------------------------------------------------------
# mixture


class Phase(_Section):
    fraction: Annotated[float, Field(gt=0, le=1)]  # of the token budget
    weights: dict[str, Annotated[float, Field(ge=0)]]  # bucket (or bucket/tier) -> weight, normalised per phase

    @field_validator("weights")
    @classmethod
    def _some_weight(cls, v):
        if sum(v.values()) <= 0:
            raise ValueError(f"expected at least one positive weight, got {v}")
        return v


class Mixture(_Section):
    name: str  # a preset states its name and phases: they are what a mixture is
    seed: int = 1234
    heldout_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.01
    # bucket -> the most epochs; `default` for the buckets not named (a given mapping is merged over it)
    max_epochs: dict[str, Annotated[float, Field(gt=0)]] = {"default": 4}
    phases: dict[str, Phase] = Field(min_length=1)

    @model_validator(mode="after")
    def _fractions_sum_to_one(self) -> "Mixture":
        total = sum(p.fraction for p in self.phases.values())
        if abs(total - 1) > 1e-6:
            raise ValueError(f"phases: the fractions must sum to 1, got {total:g} "
                             f"({', '.join(f'{n} {p.fraction:g}' for n, p in self.phases.items())})")
        return self


# ---------------------------------------------------------------------------------------------------------
# evaluate, export, lineage, execution


class Evaluate(_Section):
    limit: Positive | None = 100  # items per benchmark (null: all)
    heldout_limit: Positive | None = 64  # held-out documents per mixture bucket
    batch_size: Positive = 16
    device: Literal["cpu", "cuda"] = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    inloop_items: Count = 24  # items per benchmark every training run scores at each evaluation point


class Export(_Section):
    step: Count | None = None  # null: the final weights; N: the DCP checkpoint of step N


class Lineage(_Section):
    ground_truth: str | None = "data/sample/ground_truth.json"  # planted cases of the embedded corpus


class Execution(_Section):
    backend: Literal["local", "ray"] = "local"
    workers: Positive = 2
    ray_address: str | None = None
    # DuckDB's memory limit for the global steps on one node (dedup's clustering, the lineage build), which
    # spill to disk beyond it: 10 M documents cluster in 46 s at 2.2 GB peak with 2GB (benchmarks/RESULTS.md,
    # "Deduplication's global step from 1 to 10 million documents").
    duckdb_memory_limit: str = "2GB"

    @field_validator("duckdb_memory_limit")
    @classmethod
    def _size(cls, v: str) -> str:
        if not re.fullmatch(r"\d+(\.\d+)?\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)", v):
            raise ValueError(f"expected a size such as 512MB or 2GB, got {v!r}")
        return v


class Scout(_Section):
    """A rung of the scout ladder: its model, its token budget (null: train.tokens_per_param x parameters),
    its seed replicas and their seed, its micro-batch and its learning-rate sweep (the training schemas check the model and the
    rung's run)."""

    model: dict
    token_budget: Positive | None
    seeds: Positive = 1
    seed: int = 0  # the rung's runs: replica k initialises and orders its windows with seed + k (not train.seed)
    micro_batch: Positive | None = None
    lrs: list[Annotated[float, Field(gt=0)]] = []  # one more run per peak learning rate (tokenmill.train.stage.lr_sweep)


SECTIONS: dict[str, type[_Section]] = {
    "benchmarks": Benchmarks, "sample": Sample, "ingest": Ingest, "filter": Filter, "pii": Pii, "dedup": Dedup,
    "quality": Quality, "decontaminate": Decontaminate, "tokenizer": Tokenizer, "tokenize": Tokenize,
    "mixture": Mixture, "evaluate": Evaluate, "export": Export, "lineage": Lineage, "execution": Execution,
}


# Sections validated here through schemas that live beside the code reading them (or, for sources, a model per
# declared source): see problems().
BESIDE_THEIR_CODE = ("sources", "model", "train", "scouts", "forecast")


# ---------------------------------------------------------------------------------------------------------
# Errors as one line each: the dotted key, what is allowed, the value given


def _unwrap(annotation: Any) -> Any:
    """The model class or container an annotation holds (Optional[X] -> X, Annotated[X, ...] -> X)."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _field_at(model: type[BaseModel], loc: tuple) -> tuple[type[BaseModel] | None, Any]:
    """(the model holding the last named field of loc, that field's FieldInfo or None)."""
    current: Any = model
    holder, info = None, None
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            if part not in current.model_fields:
                return current, None
            holder, info = current, current.model_fields[part]
            current = info.annotation
        elif typing.get_origin(current) in (dict, list):
            args = typing.get_args(current)
            current = args[-1] if args else Any
            info = None
            # constraints of Annotated[float, Field(...)] inside a container
            meta = typing.get_args(current)[1:] if typing.get_origin(current) is Annotated else ()
            if any(isinstance(m, FieldInfo) for m in meta):
                info = FieldInfo.merge_field_infos(*[m for m in meta if isinstance(m, FieldInfo)])
                info.annotation = typing.get_args(current)[0]
        else:
            return holder, None
    return holder, info


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel]:
    """The model whose fields a key below loc is one of (the section's own model for an empty loc)."""
    holder, _ = _field_at(model, (*loc, ""))  # "" is no field: the walk stops at the model it is looked up in
    return holder or model


def _bounds(info) -> dict:
    out = {}
    for m in getattr(info, "metadata", []) or []:
        for name in ("gt", "ge", "lt", "le"):
            if getattr(m, name, None) is not None:
                out[name] = getattr(m, name)
    return out


def _range_words(b: dict, integer: bool) -> str:
    lo = f"({b['gt']:g}" if "gt" in b else f"[{b['ge']:g}" if "ge" in b else None
    hi = f"{b['lt']:g})" if "lt" in b else f"{b['le']:g}]" if "le" in b else None
    kind = "an integer" if integer else "a number"
    if lo and hi:
        return f"{kind} in {lo}, {hi}"
    if b.get("gt") == 0:
        return "a positive integer" if integer else "a positive number"
    if b.get("ge") == 0:
        return "a count (0 or more)" if integer else "a number >= 0"
    return f"{kind} " + " and ".join(f"{ {'gt': '>', 'ge': '>=', 'lt': '<', 'le': '<='}[k]} {v:g}" for k, v in b.items())


_TYPES = {"int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
          "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
          "bool_parsing": "true or false", "string_type": "a string", "list_type": "a list",
          "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping"}


def _where(section: str, loc: tuple) -> str:
    out = section
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _lines(model: type[BaseModel], section: str, exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if p != "")
        kind, given = err["type"], err.get("input")
        # pydantic names a union's member in loc ("int", "list[str]"): drop those tags
        loc = tuple(p for p in loc if not (isinstance(p, str) and (p in ("int", "float", "str", "bool", "none")
                                                                        or "[" in p or p.startswith("function-"))))
        where = _where(section, loc)
        if kind == "extra_forbidden":
            known = sorted(_model_at(model, loc[:-1]).model_fields)
            near = difflib.get_close_matches(str(loc[-1]), known, n=1)
            lines.append(f"{where}: unknown parameter (known: {', '.join(known)})"
                         + (f"; did you mean {near[0]!r}?" if near else ""))
        elif kind == "missing":
            lines.append(f"{where}: missing")
        elif kind in _TYPES:
            lines.append(f"{where}: expected {_TYPES[kind]}, got {given!r}")
        elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
            _, info = _field_at(model, loc)
            b = _bounds(info) or {k: v for k, v in (err.get("ctx") or {}).items()}
            annotation = getattr(info, "annotation", None)
            base = _unwrap(annotation)
            integer = base is int or (base is None and isinstance(given, int))
            nullable = type(None) in typing.get_args(annotation)
            lines.append(f"{where}: expected {_range_words(b, integer)}{' or null' if nullable else ''}, "
                         f"got {given!r}")
        elif kind == "literal_error":
            lines.append(f"{where}: expected {err['ctx']['expected'].replace(chr(39), '')}, got {given!r}")
        elif kind in ("too_short", "too_long"):
            lines.append(f"{where}: {err['msg'].lower()}, got {given!r}")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            # a model validator names its field first ("min_words: ..."): put it in the key
            head, sep, rest = msg.partition(": ")
            if sep and head.isidentifier():
                where, msg = f"{where}.{head}", rest
            lines.append(f"{where}: {msg}")
    return lines


def check_section(name: str, given: Mapping | None, model: type[_Section] | None = None) -> list[str]:
    """Problems of one section, one line each (empty: valid)."""
    model = model or SECTIONS[name]
    if given is not None and not isinstance(given, Mapping):
        return [f"{name}: expected a mapping, got {given!r}"]
    try:
        model.model_validate(dict(given or {}))
    except ValidationError as exc:
        return _lines(model, name, exc)
    return []


def resolve(name: str, given: Mapping | None) -> dict:
    """The section's values with its defaults filled in, or a ParamError listing every problem in it."""
    model = SECTIONS[name]
    lines = check_section(name, given, model)
    if lines:
        raise ParamError("; ".join(lines))
    return model.model_validate(dict(given or {})).model_dump()


def defaults(name: str) -> dict:
    """The section's defaults, as the stage sees them (a key without one, such as mixture.name, is None)."""
    out = {}
    for key, f in SECTIONS[name].model_fields.items():
        value = None if f.is_required() else f.get_default(call_default_factory=True)
        out[key] = value.model_dump() if isinstance(value, BaseModel) else value
    return out


def problems(params: Mapping[str, Any]) -> list[str]:
    """Every problem of the composed configuration, one line each: each section against its schema, the
    training sections and the scout ladder through the training schemas, the forecast through its own."""
    out: list[str] = []
    for name in SECTIONS:
        if name in params:
            out += check_section(name, params[name])
    for name in params:
        if name not in SECTIONS and name not in BESIDE_THEIR_CODE:
            near = difflib.get_close_matches(name, [*SECTIONS, *BESIDE_THEIR_CODE], n=1)
            out.append(f"{name}: unknown section" + (f" (did you mean {near[0]!r}?)" if near else ""))
    if "sources" in params:
        sources = params["sources"]
        if not isinstance(sources, Mapping) or not sources:
            out.append(f"sources: expected a mapping of source names to declarations, got {sources!r}")
        else:
            for name, spec in sources.items():
                out += check_section(f"sources.{name}", spec, Source)
    from tokenmill.train.config import ModelConfig, TrainConfig, TrainConfigError, parse_run, scout_run_config

    run_lines = check_section("model", params.get("model"), ModelConfig) + \
        check_section("train", params.get("train"), TrainConfig)
    out += run_lines
    if not run_lines:
        try:  # what needs both sections: tensor parallel against the heads, the FFN, the sequence
            parse_run({"model": params.get("model") or {}, "train": params.get("train") or {}})
        except TrainConfigError as exc:
            out += str(exc).split("; ")
    if "scouts" in params:
        scouts = params["scouts"]
        if not isinstance(scouts, Mapping):
            out.append(f"scouts: expected a mapping of rung names to rungs, got {scouts!r}")
        else:
            for rung, spec in scouts.items():
                lines = check_section(f"scouts.{rung}", spec, Scout)
                out += lines
                if not lines and not run_lines:
                    try:  # the rung's run exactly as the scout stage trains it
                        parse_run(scout_run_config(spec, params["train"]))
                    except TrainConfigError as exc:
                        out += [f"scouts.{rung}: {line}" for line in str(exc).split("; ")]
    if "forecast" in params:
        from tokenmill.forecast import ForecastConfig

        out += check_section("forecast", params["forecast"], ForecastConfig)
    return out
