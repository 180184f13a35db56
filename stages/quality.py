"""DVC stage `quality`: train the fastText quality classifier, score every document, cut the crawl buckets."""

from tokenmill.quality import run_quality
from tokenmill.runtime import load_params


def main() -> None:
    p = load_params()
    m = run_quality(p["quality"], p.get("execution"), data_root="data", input_stage="dedup")
    print(f"quality: {m['counts']['in']} documents -> {m['counts']['out']} kept (cut-off {m['cutoff']:.4f})")


if __name__ == "__main__":
    main()
