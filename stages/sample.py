"""DVC stage `sample`: build the embedded default corpus from the Python installation it runs in."""

import sys

from tokenmill.runtime import ParamError, StageRun, load_params, merge_params, script
from tokenmill.sample import build_reference, build_sample

# The parameters and their defaults: the `sample:` of conf/source/sample.yaml, the default source preset
# (tests/test_config.py keeps the two equal); conf/source/crawl.yaml sets every key for a real crawl.
DEFAULTS = {"enabled": True, "n_docs": 12000, "seed": 1234, "eval_items": 200, "planted_eval_items": 24}


def resolve_params(params):
    """params over DEFAULTS: an unknown key, a wrong type or a negative count is a ParamError naming the
    full dotted key."""
    p = merge_params("sample", DEFAULTS, params)
    for key in ("n_docs", "eval_items", "planted_eval_items"):
        if p[key] < 0:
            raise ParamError(f"sample.{key}: expected a count (0 or more), got {p[key]!r}")
    # Only the embedded crawl plants items; a real crawl's run (enabled: false) ignores the count.
    if p["enabled"] and p["planted_eval_items"] > p["eval_items"]:
        raise ParamError(f"sample.planted_eval_items: expected at most sample.eval_items ({p['eval_items']}), "
                         f"got {p['planted_eval_items']!r}: planted items are some of the eval items")
    return p


def main() -> None:
    p = resolve_params(load_params("sample")["sample"])
    # The corpus is built from the installed distributions, so it changes when they do: a new environment is
    # a new corpus (RESULTS.md: two clones compare equal in one environment).
    with StageRun("sample", "data/sample", p) as run:
        if p["enabled"]:
            run.metrics["corpus"] = build_sample(run.tmp, n_docs=p["n_docs"], seed=p["seed"],
                                                 eval_items=p["eval_items"],
                                                 planted_eval_items=p["planted_eval_items"])
        else:  # a real crawl still gets the project's reference prose (quality positives) and eval set
            run.metrics["corpus"] = build_reference(run.tmp, n_docs=p["n_docs"], seed=p["seed"],
                                                    eval_items=p["eval_items"])


if __name__ == "__main__":
    sys.exit(script(main))
