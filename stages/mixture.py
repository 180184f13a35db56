"""DVC stage `mixture`: the deterministic sampling plan training reads, with its lineage tables."""

import sys

from tokenmill.mixture import MixtureError
from tokenmill.mixture.stage import run_mixture
from tokenmill.runtime import load_params


def main() -> int:
    p = load_params()
    try:
        m = run_mixture(p["mixture"], p["train"], p["model"], data_root="data")
    except MixtureError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"mixture {p['mixture']['name']}: plan of {m['params']['token_budget']:,} tokens written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
