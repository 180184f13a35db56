"""DVC stage `decontaminate`: n-gram overlap of every document with every configured benchmark item."""

from tokenmill.decontam import run_decontaminate
from tokenmill.runtime import load_params


def main() -> None:
    p = load_params()
    m = run_decontaminate(p["decontaminate"], p.get("execution"), data_root="data", input_stage="quality")
    print(f"decontaminate: {m['counts']['in']} documents -> {m['counts']['out']} kept")


if __name__ == "__main__":
    main()
