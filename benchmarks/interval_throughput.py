"""Every interval of a large matrix: 100 cells x 1,000 episodes, 10,000 bootstrap resamples.

Times `stats.batch.matrix_metrics` (what `summarize` runs, vectorized across cells) on a simulated
episode table, and, in the same process, the baseline it replaces: `cell_metrics` per cell, one
`scipy.stats.bootstrap` call per interval. The baseline is timed on a few cells and scaled to 100
(it is linear in the number of cells; all 100 would take minutes). Usage:

    python benchmarks/interval_throughput.py [--cells 100] [--scenarios 250 --seeds 4]
        [--resamples 10000] [--baseline-cells 3] [--repeats 3] [--json OUT]

Default data: 250 scenarios x 4 seeds per cell, so that every rate takes the cluster bootstrap
(with one seed per scenario, rates take the closed-form Wilson interval and only scores resample).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import pandas as pd

from ibrl_bench.stats.batch import matrix_metrics
from ibrl_bench.stats.cells import cell_metrics

CELL = ["policy", "counterpart", "policy_role"]


def simulated_run(cells: int, scenarios: int, seeds: int, seed: int = 0) -> pd.DataFrame:
    """An episode table shaped like `matrix.episodes_frame`: clustered outcomes (a level per
    scenario), scores, a few invalid and max-turns episodes, a domain metric defined on deals."""
    rng = np.random.default_rng(seed)
    roles = ["a", "b"]
    n_cp = 5
    n_pol = max(1, cells // (n_cp * len(roles)))
    keys = [(f"policy-{p}", f"counterpart-{c}", r) for p in range(n_pol) for c in range(n_cp) for r in roles][:cells]
    n = scenarios * seeds
    level = rng.beta(2, 1, size=scenarios)
    parts = []
    for i, (p, c, r) in enumerate(keys):
        shift = rng.normal(0, 0.1)
        prob = np.clip(np.repeat(level, seeds) + shift, 0, 1)
        ok = rng.random(n) < prob
        status = np.where(rng.random(n) < 0.03, "invalid", np.where(rng.random(n) < 0.03, "max_turns", "ok"))
        ok &= status == "ok"
        parts.append(pd.DataFrame({
            "key": [f"{i}-{j}" for j in range(n)], "policy": p, "counterpart": c, "policy_role": r,
            "scenario_id": np.repeat([f"s{s:04d}" for s in range(scenarios)], seeds),
            "seed": np.tile(np.arange(seeds), scenarios), "status": status, "agreement": ok, "success": ok,
            "policy_score": np.where(ok, rng.normal(6, 2, n), 0.0), "counterpart_score": np.where(ok, rng.normal(5, 2, n), 0.0),
            "policy_violated": status == "invalid", "turns": 4, "attempts": 1,
            "m_pareto_optimal": pd.Series(np.where(ok, rng.random(n) < 0.7, None), dtype=object),
        }))
    return pd.concat(parts, ignore_index=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=100)
    ap.add_argument("--scenarios", type=int, default=250)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--baseline-cells", type=int, default=3, help="cells timed for the per-interval scipy baseline")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the numbers to this file")
    args = ap.parse_args()

    frame = simulated_run(args.cells, args.scenarios, args.seeds)
    n_cells = frame.groupby(CELL).ngroups
    batch_times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        metrics = matrix_metrics(frame, CELL, n_resamples=args.resamples)
        batch_times.append(time.perf_counter() - start)
    n_intervals = sum(len(m) for m in metrics.values())
    methods = sorted({iv.method for m in metrics.values() for iv in m.values()})

    groups = [g for _, g in frame.groupby(CELL, sort=False)][: args.baseline_cells]
    start = time.perf_counter()
    for g in groups:
        cell_metrics(g, n_resamples=args.resamples)
    per_cell = (time.perf_counter() - start) / len(groups)
    baseline = per_cell * n_cells

    batch = statistics.median(batch_times)
    numbers = {
        "cells": n_cells, "episodes_per_cell": args.scenarios * args.seeds, "scenarios": args.scenarios,
        "seeds": args.seeds, "resamples": args.resamples, "intervals": n_intervals, "methods": methods,
        "batch_s_median": round(batch, 3), "batch_s_all": [round(t, 3) for t in batch_times],
        "baseline_s_per_cell": round(per_cell, 3), "baseline_s_scaled_to_all_cells": round(baseline, 1),
        "baseline_cells_timed": len(groups), "speedup": round(baseline / batch, 1), "target_s": 2.0,
        "meets_target": batch < 2.0,
    }
    print(f"{n_intervals} intervals ({n_cells} cells x {args.scenarios * args.seeds} episodes, "
          f"{args.scenarios} scenarios x {args.seeds} seeds), {args.resamples:,} resamples each")
    print(f"  vectorized (matrix_metrics): {batch:.2f} s (median of {args.repeats}: "
          f"{', '.join(f'{t:.2f}' for t in batch_times)})  target < 2 s: {'met' if batch < 2.0 else 'MISSED'}")
    print(f"  per-interval scipy.stats.bootstrap (cell_metrics): {per_cell:.2f} s per cell, "
          f"{baseline:.0f} s for {n_cells} cells (timed on {len(groups)})")
    print(f"  speed-up: {baseline / batch:.0f}x")
    print(f"  methods: {'; '.join(methods)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(numbers, f, indent=2)


if __name__ == "__main__":
    main()
