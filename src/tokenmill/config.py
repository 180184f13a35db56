"""Compose conf/ into params.yaml exactly as `dvc exp run` does (DVC's own Hydra composition)."""

from __future__ import annotations

import sys
from pathlib import Path

from dvc.utils.hydra import compose_and_dump


def compose(overrides: list[str] | None = None, conf_dir: str | Path = "conf",
            output: str | Path = "params.yaml") -> None:
    compose_and_dump(str(output), str(Path(conf_dir).resolve()), None, "config", "", list(overrides or []))


if __name__ == "__main__":
    compose(sys.argv[1:])
