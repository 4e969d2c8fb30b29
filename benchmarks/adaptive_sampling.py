"""Adaptive sampling (`crossplay --target-halfwidth H`) against a uniform design, and the coverage
of the adaptive rule's intervals.

1. Episodes: a scripted Deal-or-NoDeal matrix whose cells differ in variance (agreement from
   about 65% to 100%) is played in full once (every scenario of the split, one seed). Then:
   - adaptive: `run_adaptive` on that folder (it plays nothing more: every episode is there)
     gives the episodes its rule spends, the sum of each cell's size at its stopping look;
   - uniform: the smallest n, the same in every cell and taken in the same order, at which every
     cell's 95% interval is at most H wide (read off the played episodes, so the uniform design
     gets its best n in hindsight: a generous baseline).
   Both then report every cell at half-width <= H. Printed: both counts and their ratio
   (target <= 0.7), and whether every adaptive cell reached H.
2. Coverage: Bernoulli cells of known rate run through the same looks, per-look level and stopping
   rule (`looks`, `LOOK_CONFIDENCE`, `stop_reason`), with the interval engine's Clopper-Pearson
   bounds (the engine's interval for one episode per scenario); printed: the share of stopped
   cells whose interval holds the true rate, per rate and target, and the minimum. For
   comparison, the same with a 95% interval at each look.

    python benchmarks/adaptive_sampling.py [--halfwidth 0.08] [--scenarios 300] [--reps 2000] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile

import numpy as np

from ibrl_bench.runner.adaptive import (
    LOOK_CONFIDENCE,
    NOMINAL,
    looks,
    run_adaptive,
    stop_reason,
)
from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig
from ibrl_bench.stats.batch import matrix_metrics
from ibrl_bench.stats.intervals import _clopper_pearson, proportion_interval
from ibrl_bench.stats.matrix import CELL, episodes_frame

POLICIES = ["scripted:dealnodeal/boulware", "scripted:dealnodeal/tit_for_tat", "scripted:dealnodeal/fair"]
COUNTERPARTS = ["scripted:dealnodeal/conceder", "scripted:dealnodeal/hardliner", "scripted:dealnodeal/random"]
METRIC = "success_at_1"


def episodes_spent(halfwidth: float, scenarios: int) -> dict:
    config = CrossplayConfig(policies=POLICIES, counterparts=COUNTERPARTS, scenarios=scenarios, concurrency=32,
                             target_halfwidth=halfwidth, target_metric=METRIC, cache=False)
    with tempfile.TemporaryDirectory() as folder:
        runner = Crossplay(config, folder)
        asyncio.run(runner.run())  # the whole split, once
        report = asyncio.run(run_adaptive(runner))
        latest = runner.store.latest()
    # The adaptive rule's order (new scenarios first, then seeds): the uniform design reads the same.
    order = {s.id: i for i, s in enumerate(runner.scenario_set.scenarios)}
    ordered: dict[tuple, list] = {}
    for job in sorted(runner.jobs(), key=lambda j: (j.seed, order[j.scenario.id])):
        ordered.setdefault((job.policy, job.counterpart, job.policy_role), []).append(latest[job.key])
    uniform = None
    for n in range(1, scenarios + 1):
        frame = episodes_frame([r for records in ordered.values() for r in records[:n]])
        widths = [(iv[METRIC].high - iv[METRIC].low) / 2 if iv[METRIC].low is not None else np.inf
                  for iv in matrix_metrics(frame, CELL, NOMINAL).values()]
        if max(widths) <= halfwidth:
            uniform = n * len(ordered)
            break
    adaptive = report.episodes
    return {
        "halfwidth": halfwidth, "cells": len(ordered), "split": scenarios, "looks": report.looks,
        "adaptive_episodes": adaptive, "uniform_episodes": uniform,
        "ratio": None if uniform is None else round(adaptive / uniform, 3),
        "adaptive_all_reached": all(c.reason == "reached H" for c in report.cells),
        "adaptive_max_halfwidth": max(c.halfwidth for c in report.cells),
        "cells_by_reason": {r: sum(c.reason == r for c in report.cells) for r in {c.reason for c in report.cells}},
        "rates": sorted(round(c.interval.estimate, 3) for c in report.cells),
    }


def coverage(rate: float, target: float, confidence: float, reps: int, cap: int, rng: np.random.Generator) -> float:
    """Share of `reps` cells of true `rate` whose interval at the stopping look holds the rate."""
    sizes = looks(cap)
    successes = np.cumsum(rng.random((reps, cap)) < rate, axis=1)
    covered = np.zeros(reps, bool)
    open_ = np.ones(reps, bool)
    for n in sizes:
        low, high = _clopper_pearson(successes[:, n - 1].astype(float), np.full(reps, float(n)), confidence)
        stop = open_ & np.array([stop_reason(w, n, cap, target) is not None for w in (high - low) / 2])
        covered[stop] = (low[stop] <= rate) & (rate <= high[stop])
        open_ &= ~stop
    return float(covered.mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--halfwidth", type=float, default=0.08)
    ap.add_argument("--scenarios", type=int, default=300, help="the split each cell may use (the test split has 546)")
    ap.add_argument("--reps", type=int, default=2000, help="simulated cells per rate and target")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    # The engine's interval for one episode per scenario is exactly these Clopper-Pearson bounds.
    check = proportion_interval(np.array([1.0] * 7 + [0.0] * 3), np.ones(10), LOOK_CONFIDENCE)
    low, high = _clopper_pearson(np.array([7.0]), np.array([10.0]), LOOK_CONFIDENCE)
    assert abs(check.low - low[0]) < 1e-9 and abs(check.high - high[0]) < 1e-9

    spent = episodes_spent(args.halfwidth, args.scenarios)
    print(f"episodes to half-width {args.halfwidth} on {spent['cells']} cells (split {spent['split']}): "
          f"adaptive {spent['adaptive_episodes']}, uniform {spent['uniform_episodes']}, ratio {spent['ratio']} "
          f"(target <= 0.7); adaptive cells by stop: {spent['cells_by_reason']}, max half-width "
          f"{spent['adaptive_max_halfwidth']:.4f}; rates {spent['rates']}")

    rng = np.random.default_rng(0)
    rates = [0.1, 0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99]
    table = {}
    for confidence in (LOOK_CONFIDENCE, NOMINAL):
        for target in (0.03, 0.05, 0.08, 0.12):
            table[(confidence, target)] = [coverage(p, target, confidence, args.reps, 2000, rng) for p in rates]
            row = " ".join(f"{c:.3f}" for c in table[(confidence, target)])
            print(f"coverage, {confidence:.1%} a look, H={target}: {row}  (rates {rates}); "
                  f"min {min(table[(confidence, target)]):.3f}")
    # The Monte Carlo error of one share near 0.95 with these reps.
    se = (NOMINAL * (1 - NOMINAL) / args.reps) ** 0.5
    worst = min(min(v) for (c, _), v in table.items() if c == LOOK_CONFIDENCE)
    print(f"adaptive rule ({LOOK_CONFIDENCE:.1%} a look): minimum coverage {worst:.3f} over the grid "
          f"(nominal {NOMINAL:.0%}; Monte Carlo SE {se:.3f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"spent": spent, "coverage": {f"{c}@{t}": v for (c, t), v in table.items()}, "rates": rates},
                      f, indent=2)


if __name__ == "__main__":
    main()
