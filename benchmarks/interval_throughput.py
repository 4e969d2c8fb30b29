"""Every interval of a large matrix: 100 cells x 1,000 episodes, 10,000 bootstrap resamples.

Times, on one simulated episode table and in one process:
- the cell table (`stats.batch.matrix_metrics`, what `summarize` runs): the engine's closed-form
  rate and mean intervals, nothing resampled;
- the engine's bootstrap (`intervals.bootstrap_intervals`, BCa with exact ties) of every cell and
  metric's mean at once, 10,000 resamples: what any resampled statistic of the matrix costs;
- the baseline, the engine of the previous version (`--baseline-ref`, default the commit before the
  engine): its `batch.matrix_metrics`, a vectorised BCa over 10,000 resamples, loaded from git.
Usage:

    python benchmarks/interval_throughput.py [--cells 100] [--scenarios 250 --seeds 4]
        [--resamples 10000] [--repeats 3] [--baseline-ref REF] [--json OUT]

Default data: 250 scenarios x 4 seeds per cell, so that every rate takes the cluster bootstrap
(with one seed per scenario, rates take the closed-form Wilson interval and only scores resample).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ibrl_bench.stats.batch import matrix_metrics
from ibrl_bench.stats.intervals import bootstrap_intervals

CELL = ["policy", "counterpart", "policy_role"]
BASELINE_REF = "2dc6bd4"  # the last commit with the three bootstrap engines


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
            "policy_score": np.where(ok, rng.normal(6, 2, n), 0.0),
            "counterpart_score": np.where(ok, rng.normal(5, 2, n), 0.0),
            "policy_violated": status == "invalid", "turns": 4, "attempts": 1,
            "m_pareto_optimal": pd.Series(np.where(ok, rng.random(n) < 0.7, None), dtype=object),
        }))
    return pd.concat(parts, ignore_index=True)


def baseline_engine(ref: str):
    """The previous version's `matrix_metrics`, imported from git under other module names, with
    the rest of the package as it is now (it only reads the episode table's columns)."""
    root = Path(__file__).resolve().parent.parent
    tmp = Path(tempfile.mkdtemp(prefix="baseline-engine-"))
    names = {"intervals": "baseline_intervals", "batch": "baseline_batch"}
    for old, new in names.items():
        text = subprocess.run(["git", "-C", str(root), "show", f"{ref}:ibrl_bench/stats/{old}.py"],
                              check=True, capture_output=True, text=True).stdout
        text = text.replace("from ibrl_bench.stats.intervals import", "from baseline_intervals import")
        (tmp / f"{new}.py").write_text(text)
    sys.path.insert(0, str(tmp))
    for new in names.values():
        spec = importlib.util.spec_from_file_location(new, tmp / f"{new}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[new] = module
        spec.loader.exec_module(module)
    return sys.modules["baseline_batch"].matrix_metrics


def scenario_means_of(frame: pd.DataFrame) -> np.ndarray:
    """(cells x metrics) rows of scenario means, for the bootstrap timing: success and score."""
    scored = frame[frame["status"] != "error"]
    rows = []
    for col in ("success", "policy_score", "counterpart_score"):
        wide = scored.groupby(CELL + ["scenario_id"])[col].mean().unstack("scenario_id")
        rows.append(wide.to_numpy(dtype=float))
    return np.vstack(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=100)
    ap.add_argument("--scenarios", type=int, default=250)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline-ref", default=BASELINE_REF, help="git ref of the engine to compare with")
    ap.add_argument("--json", default=None, help="write the numbers to this file")
    args = ap.parse_args()

    frame = simulated_run(args.cells, args.scenarios, args.seeds)
    n_cells = frame.groupby(CELL).ngroups
    old = baseline_engine(args.baseline_ref)
    means = scenario_means_of(frame)

    def timed(fn) -> list[float]:
        out = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
        return out

    table = timed(lambda: matrix_metrics(frame, CELL))
    boot = timed(lambda: bootstrap_intervals(means, lambda m: m, "bootstrap {}", n=len(frame),
                                             n_resamples=args.resamples))
    base = timed(lambda: old(frame, CELL, n_resamples=args.resamples))
    metrics = matrix_metrics(frame, CELL)
    n_intervals = sum(len(m) for m in metrics.values())
    t_table, t_boot, t_base = (statistics.median(x) for x in (table, boot, base))
    numbers = {
        "cells": n_cells, "episodes_per_cell": args.scenarios * args.seeds, "scenarios": args.scenarios,
        "seeds": args.seeds, "resamples": args.resamples, "intervals": n_intervals,
        "methods": sorted({iv.method for m in metrics.values() for iv in m.values()}),
        "cell_table_s": round(t_table, 3), "engine_bootstrap_s": round(t_boot, 3),
        "engine_bootstrap_rows": int(means.shape[0]), "baseline_s": round(t_base, 3),
        "baseline_ref": args.baseline_ref, "cell_table_vs_baseline": round(t_table / t_base, 3),
        "bootstrap_vs_baseline": round(t_boot / t_base, 3), "target_s": 2.0,
        "meets_target": max(t_table, t_boot) < 2.0,
    }
    print(f"{n_intervals} intervals ({n_cells} cells x {args.scenarios * args.seeds} episodes, "
          f"{args.scenarios} scenarios x {args.seeds} seeds); medians of {args.repeats}")
    print(f"  cell table (matrix_metrics, closed form):      {t_table:.2f} s  ({t_table / t_base:.2f} x baseline)")
    print(f"  engine bootstrap, {means.shape[0]} rows x {args.resamples:,} resamples: {t_boot:.2f} s  "
          f"({t_boot / t_base:.2f} x baseline)")
    print(f"  baseline ({args.baseline_ref} matrix_metrics, BCa, {args.resamples:,} resamples): {t_base:.2f} s")
    print(f"  target < 2 s: {'met' if numbers['meets_target'] else 'MISSED'}")
    print(f"  methods: {'; '.join(numbers['methods'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(numbers, f, indent=2)


if __name__ == "__main__":
    main()
