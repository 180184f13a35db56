"""A two-term law L(N, D) = E + A N^-a + B D^-b (Hoffmann et al., 2022, approach 3) fitted to the rungs of two or
more forecasts at once, and its value at the full run: the lead RESULTS.md ("Why the forecast misses", the fourth
attempt) reports. The forecast stage's law is in compute alone, which cannot tell a run bound by its width from
one bound by its tokens; this fit needs rungs that vary both (e.g. conf/scouts/cpu_demo_deep.yaml, along the
tokens-per-parameter line, and conf/scouts/cpu_demo_full_tokens.yaml, at the full run's tokens).

Usage: python benchmarks/fit_two_term_law.py <data/forecast/prediction.json of each ladder> [--actual L ...]
"""

import argparse
import json

import numpy as np
from scipy.optimize import least_squares


def fit(n: np.ndarray, d: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """E, log A, a, log B, b by least squares from a grid of starting exponents (the best of nine)."""
    def law(x, n, d):
        return x[0] + np.exp(x[1]) * n ** -x[2] + np.exp(x[3]) * d ** -x[4]
    best = None
    for a0 in (0.1, 0.3, 0.6):
        for b0 in (0.1, 0.3, 0.6):
            r = least_squares(lambda x: law(x, n, d) - loss, [3.0, np.log(100), a0, np.log(100), b0],
                              bounds=([0, -20, 0, -20, 0], [loss.min(), 40, 2, 40, 2]))
            best = r if best is None or r.cost < best.cost else best
    return best.x, law


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("predictions", nargs="+")
    ap.add_argument("--actual", type=float, nargs="*", default=[], help="the full run's held-out loss per seed")
    args = ap.parse_args()
    points, targets = [], set()
    for path in args.predictions:
        p = json.load(open(path))
        points += [(q["params"], q["tokens"], q["value"], q["name"]) for q in p["points"]]
        targets.add((p["target"]["params"], p["target"]["tokens"]))
    if len(targets) != 1:
        raise SystemExit(f"the forecasts are for different full runs: {sorted(targets)}")
    (tn, td), = targets
    n, d, loss = (np.array([p[i] for p in points], float) for i in range(3))
    if len(points) < 6:
        raise SystemExit(f"{len(points)} rungs: a five-parameter law needs at least 6")
    x, law = fit(n, d, loss)
    print(f"{len(points)} rungs, {len(points) - 5} degree(s) of freedom: E {x[0]:.3f}, A {np.exp(x[1]):.4g}, "
          f"a {x[2]:.3f}, B {np.exp(x[3]):.4g}, b {x[4]:.3f}")
    for (pn, pd, pl, name), r in zip(points, law(x, n, d) - loss):
        print(f"  {name}: {pn:,} parameters, {pd:,} tokens, {pl:.4f}, residual {r:+.4f}")
    predicted = float(law(x, tn, td))
    print(f"the full run ({tn:,} parameters, {td:,} tokens): {predicted:.4f}")
    for actual in args.actual:
        print(f"  against {actual:.4f}: {predicted / actual - 1:+.1%}")
    if args.actual:
        print(f"  against the mean {np.mean(args.actual):.4f}: {predicted / np.mean(args.actual) - 1:+.1%}")


if __name__ == "__main__":
    main()
