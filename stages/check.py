"""DVC stage `check`: the configuration against the files present, before ingest (tokenmill.check)."""

import sys

import yaml

from tokenmill.check import check_config
from tokenmill.runtime import StageRun, load_params, script, write_json

# Every section: the whole configuration is validated here, before ingest (execution too, which changes no
# output and so is no dependency). Any parameter edit reruns this check, in seconds, with its output unchanged.
KEYS = ("benchmarks", "sample", "sources", "ingest", "filter", "pii", "dedup", "quality", "decontaminate", "embed", "backcheck",
        "domains",
        "tokenizer", "tokenize", "mixture", "train", "model", "scouts", "forecast", "anneals", "export", "evaluate",
        "lineage")


def main() -> int:
    p = load_params(*KEYS, "execution")
    with open("dvc.yaml") as f:
        dvc = yaml.safe_load(f)
    result = check_config(p, dvc)
    for line in result["warnings"]:
        print(f"check: warning: {line}", file=sys.stderr)
    if result["problems"]:
        for line in result["problems"]:
            print(f"check: {line}", file=sys.stderr)
        return 2
    with StageRun("check", "data/check", p) as run:
        write_json(run.tmp / "files.json", result["files"])
        run.metrics["files"] = {name: len(paths) for name, paths in result["files"].items()}
    print(f"check: {sum(map(len, result['files'].values()))} source files, configuration complete")
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
