"""The whole configuration's check: every section of params.yaml against the schema its own package states.

Each stage package owns its section's schema beside its code (tokenmill.dedup.params, tokenmill.train.config,
tokenmill.forecast, ...), built on tokenmill.section (the base model, the shared field types, the one error
wording); a stage script resolves its own section and depends on nothing here. Only the check stage reads this
module: `problems(params)` runs every section's schema over the composed configuration before any data stage
does work and prints every problem at once, one line each:

    dedup.near.threshold: expected a number in (0, 1], got 1.5

Names that depend on more than one section (a mixture weight's bucket against the buckets the sources fill) are
the check stage's (tokenmill.check), which sees the files too.
"""

from __future__ import annotations

import difflib
from typing import Any, Mapping

from tokenmill.anneal.params import Anneal
from tokenmill.backcheck.params import Backcheck
from tokenmill.benchmarks import Benchmarks
from tokenmill.decontam.params import Decontaminate
from tokenmill.dedup.params import Dedup
from tokenmill.domains.params import Domains, Embed
from tokenmill.evaluate.params import Evaluate
from tokenmill.execution.params import Execution
from tokenmill.export.params import Export
from tokenmill.filters.params import Filter
from tokenmill.forecast import ForecastConfig
from tokenmill.ingest.params import Ingest, Source
from tokenmill.lineage.params import Lineage
from tokenmill.mixture.params import Mixture
from tokenmill.pii.params import Pii
from tokenmill.quality.params import Quality
from tokenmill.sample.params import Sample
from tokenmill.section import Section, check_section
from tokenmill.tokenize.params import Tokenize
from tokenmill.tokenizer.params import Tokenizer
from tokenmill.train.config import (ModelConfig, ScheduleConfig, Scout, TrainConfig, TrainConfigError, parse_run,
                                    scout_run_config)

SECTIONS: dict[str, type[Section]] = {s.section: s for s in (
    Benchmarks, Sample, Ingest, Filter, Pii, Dedup, Quality, Decontaminate, Embed, Backcheck, Domains, Tokenizer, Tokenize, Mixture,
    Evaluate, Export, Lineage, Execution)}

# Sections checked by more than their model: a model per declared source or rung, the runs the training sections
# make together.
OTHERS = ("sources", "model", "train", "scouts", "forecast", "anneals")


def problems(params: Mapping[str, Any]) -> list[str]:
    """Every problem of the composed configuration, one line each: each section against its schema, the
    training sections and the scout ladder through the training schemas, the forecast through its own."""
    out: list[str] = []
    for name, model in SECTIONS.items():
        if name in params:
            out += check_section(name, params[name], model)
    for name in params:
        if name not in SECTIONS and name not in OTHERS:
            near = difflib.get_close_matches(name, [*SECTIONS, *OTHERS], n=1)
            out.append(f"{name}: unknown section" + (f" (did you mean {near[0]!r}?)" if near else ""))
    if "sources" in params:
        sources = params["sources"]
        if not isinstance(sources, Mapping) or not sources:
            out.append(f"sources: expected a mapping of source names to declarations, got {sources!r}")
        else:
            for name, spec in sources.items():
                out += check_section(f"sources.{name}", spec, Source)
    run_lines = check_section("model", params.get("model"), ModelConfig) + \
        check_section("train", params.get("train"), TrainConfig)
    out += run_lines
    run = None
    if not run_lines:
        try:  # what needs both sections: tensor parallel against the heads, the FFN, the sequence
            run = parse_run({"model": params.get("model") or {}, "train": params.get("train") or {}})
        except TrainConfigError as exc:
            out += str(exc).split("; ")
    if "scouts" in params:
        rungs, lines = _named(params, "scouts", "rung names to rungs")
        out += lines
        for rung, spec in rungs:
            lines = check_section(f"scouts.{rung}", spec, Scout)
            out += lines
            if not lines and not run_lines:
                try:  # the rung's run exactly as the scout stage trains it
                    parse_run(scout_run_config(spec, params["train"]))
                except TrainConfigError as exc:
                    out += [f"scouts.{rung}: {line}" for line in str(exc).split("; ")]
    if "anneals" in params:
        tests, lines = _named(params, "anneals", "test names to annealing tests")
        out += lines
        sources = params.get("sources") if isinstance(params.get("sources"), Mapping) else {}
        for name, spec in tests:
            out += check_section(f"anneals.{name}", spec, Anneal)
            if isinstance(spec, Mapping) and spec.get("source") not in sources:
                out.append(f"anneals.{name}.source: expected a declared source ({', '.join(sources)}), "
                           f"got {spec.get('source')!r}")
        if tests and run is not None:
            out += _decay_phase(tests, run.train.schedule, params.get("mixture"))
    if "forecast" in params:
        out += check_section("forecast", params["forecast"], ForecastConfig)
    return out


def _decay_phase(tests: list, schedule: ScheduleConfig, mixture: Any) -> list[str]:
    """An annealing test branches the full run where WSD's decay begins and plans the mixture's decay phase
    again: without that phase the anneal stage could only fail after the full run has trained (a one-phase
    mixture once did, at the end of `dvc exp run -S mixture=balanced`)."""
    off = f"or run no test (-S '~anneals.{tests[0][0]}')"
    if schedule.kind != "wsd" or not schedule.decay_phase:
        return [f"anneals: a test branches where WSD decays over train.schedule.decay_phase, but train.schedule is "
                f"{schedule.kind!r} with decay_phase {schedule.decay_phase!r}: set kind wsd and a decay phase, {off}"]
    phases = mixture.get("phases") if isinstance(mixture, Mapping) else None
    if isinstance(phases, Mapping) and schedule.decay_phase not in phases:
        return [f"anneals: the mixture {mixture.get('name')!r} has no phase {schedule.decay_phase!r} "
                f"(train.schedule.decay_phase) for a test to anneal (its phases: {', '.join(map(str, phases))}): "
                f"give it one, {off}"]
    if isinstance(phases, Mapping) and next(iter(phases)) == schedule.decay_phase:
        return [f"anneals: the decay phase {schedule.decay_phase!r} is the mixture's first, so the full run has no "
                f"stable phase before it to branch from: plan a phase before it, {off}"]
    return []


def _named(params: Mapping[str, Any], key: str, what: str) -> tuple[list, list[str]]:
    """The (name, spec) entries of a section that maps names to specs (scouts, anneals), or its problem line."""
    section = params[key]
    if not isinstance(section, Mapping):
        return [], [f"{key}: expected a mapping of {what}, got {section!r}"]
    return list(section.items()), []
