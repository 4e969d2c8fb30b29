"""Coverage of the interval engine's nominal 95% intervals against a known truth: the table of
docs/statistics.md. tests/test_stats_intervals.py runs a smaller fixed-seed subset of the same
simulations as CI checks.

Models (scenarios independent; seeds of a scenario share its level):
- rates: scenario rate ~ Beta with mean p and intraclass correlation ICC, seeds Bernoulli;
  truth p; every (p, scenarios, seeds) of {0.02, 0.5, 0.9, 0.98} x {20, 50, 200} x {1, 3, 10};
- paired rates: two policies share a scenario effect u ~ N(0, 1) on the probit scale, 20 scenarios;
  truth E[Phi(a + u)] - E[Phi(b + u)];
- paired scores and means: scenario effect N(0, 1) + seed noise N(0, 1), 20 scenarios x 3 seeds;
- crossed: y[s, h] = u_s + v_h + e, 20 scenarios x H counterparts, truth 0 over counterparts.

Usage: python benchmarks/interval_coverage.py [--reps 2000] [--icc 0.3] [--markdown OUT]
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from ibrl_bench.stats.intervals import crossed_interval, mean_interval, paired_interval, proportion_intervals

RATES = (0.02, 0.5, 0.9, 0.98)
SCENARIOS = (20, 50, 200)
SEEDS = (1, 3, 10)


def rate_table(reps: int, icc: float, seed: int) -> list[tuple[float, int, int, float, float]]:
    rng = np.random.default_rng(seed)
    s = 1 / icc - 1
    out = []
    for p in RATES:
        for k in SCENARIOS:
            for m in SEEDS:
                y = rng.binomial(m, rng.beta(p * s, (1 - p) * s, (reps, k))) / m
                ivs = proportion_intervals([(row, np.full(k, m)) for row in y])
                cover = np.mean([iv.low <= p <= iv.high for iv in ivs])
                width = np.mean([iv.high - iv.low for iv in ivs])
                out.append((p, k, m, float(cover), float(width)))
    return out


def episodes(means: np.ndarray, m: int) -> np.ndarray:
    """0/1 episodes (scenario-major) with the given per-scenario success counts / m."""
    c = np.rint(means * m).astype(int)
    return (np.arange(m)[None, :] < c[:, None]).astype(float).ravel()


def paired_rate_table(reps: int, seed: int) -> list[tuple[str, int, float]]:
    rng = np.random.default_rng(seed)
    u_truth = np.random.default_rng(0).normal(0, 1, 1_000_000)
    out = []
    for pa, pb in ((0.98, 0.9), (0.9, 0.5), (0.5, 0.4), (0.02, 0.02), (0.98, 0.98)):
        a, b = stats.norm.ppf(pa) * np.sqrt(2), stats.norm.ppf(pb) * np.sqrt(2)
        truth = stats.norm.cdf(a + u_truth).mean() - stats.norm.cdf(b + u_truth).mean()
        for m in SEEDS:
            u = rng.normal(0, 1, (reps, 20))
            ya, yb = rng.binomial(m, stats.norm.cdf(a + u)) / m, rng.binomial(m, stats.norm.cdf(b + u)) / m
            scen = np.repeat(np.arange(20), m)
            hits = 0
            for ra, rb in zip(ya, yb, strict=True):
                d = paired_interval(episodes(ra, m), episodes(rb, m), scen, True, with_test=False).difference
                hits += d.low <= truth <= d.high
            out.append((f"{pa} vs {pb}", m, hits / reps))
    return out


def score_rows(reps: int, seed: int) -> list[tuple[str, float]]:
    rng = np.random.default_rng(seed)
    scen = np.repeat(np.arange(20), 3)
    hits_mean = hits_paired = 0
    for _ in range(reps):
        u = rng.normal(0, 1, 20)[:, None]
        y = u + rng.normal(0, 1, (20, 3))
        iv = mean_interval(y.ravel(), scen)
        hits_mean += iv.low <= 0 <= iv.high
        ya, yb = (u + 0.3 + rng.normal(0, 1, (20, 3))).ravel(), (u + rng.normal(0, 1, (20, 3))).ravel()
        d = paired_interval(ya, yb, scen, False, with_test=False).difference
        hits_paired += d.low <= 0.3 <= d.high
    return [("mean score, t on scenario means (20 x 3)", hits_mean / reps),
            ("paired score difference, paired t (20 x 3)", hits_paired / reps)]


def crossed_rows(reps: int, seed: int) -> list[tuple[str, float]]:
    rng = np.random.default_rng(seed)
    out = []
    for h in (3, 5, 8, 20):
        hits = 0
        for _ in range(reps):
            y = rng.normal(0, 0.5, 20)[:, None] + rng.normal(0, 0.5, h)[None, :] + rng.normal(0, 0.5, (20, h))
            d = crossed_interval(y, n=20 * h, n_resamples=1000).difference
            hits += d.low <= 0 <= d.high
        out.append((f"crossed bootstrap, 20 scenarios x {h} counterparts", hits / reps))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--icc", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--markdown", default=None, help="write the tables as markdown to this file")
    args = ap.parse_args()
    lines = [f"Rates (ICC {args.icc}, {args.reps} replications per setting): coverage / mean width", "",
             "| true rate | scenarios | 1 seed | 3 seeds | 10 seeds |", "|---|---|---|---|---|"]
    rates = rate_table(args.reps, args.icc, args.seed)
    for p in RATES:
        for k in SCENARIOS:
            cells = [f"{c:.3f} / {w:.3f}" for (pp, kk, _, c, w) in rates if pp == p and kk == k]
            lines.append(f"| {p} | {k} | " + " | ".join(cells) + " |")
    lines += ["", f"worst rate coverage: {min(r[3] for r in rates):.3f}", ""]
    lines += [f"Paired rate differences, 20 scenarios ({args.reps // 4} replications)", "",
              "| rates | 1 seed | 3 seeds | 10 seeds |", "|---|---|---|---|"]
    paired = paired_rate_table(args.reps // 4, args.seed + 1)
    for name in dict.fromkeys(n for n, _, _ in paired):
        lines.append(f"| {name} | " + " | ".join(f"{c:.3f}" for n, _, c in paired if n == name) + " |")
    lines += ["", f"Scores and crossed ({args.reps // 4} replications)", "", "| interval | coverage |", "|---|---|"]
    for name, c in score_rows(args.reps // 4, args.seed + 2) + crossed_rows(args.reps // 4, args.seed + 3):
        lines.append(f"| {name} | {c:.3f} |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
