"""Episodes per second of scripted-vs-scripted cross-play, at concurrency 1 and 64.

Reports both rates and their ratio, measured in the same process and interleaved (1, 64, 1, 64 ...)
so that the shared, noisy machine affects both alike. Usage:

    python benchmarks/crossplay_throughput.py [--scenarios 100] [--repeats 3] [--json OUT]

The run log is written to a temporary folder for every repetition, so the numbers include the
per-episode write to episodes.jsonl, as in a real run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time

from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig

POLICIES = ["scripted:dealnodeal/boulware", "scripted:dealnodeal/tit_for_tat"]
COUNTERPARTS = ["scripted:dealnodeal/conceder", "scripted:dealnodeal/random"]


def measure(concurrency: int, scenarios: int) -> float:
    config = CrossplayConfig(policies=POLICIES, counterparts=COUNTERPARTS, scenarios=scenarios,
                             concurrency=concurrency, split="dev")
    with tempfile.TemporaryDirectory() as folder:
        runner = Crossplay(config, folder)
        start = time.perf_counter()
        progress = asyncio.run(runner.run())
        elapsed = time.perf_counter() - start
    assert progress.done == runner.total()
    return runner.total() / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the numbers to this file")
    args = ap.parse_args()
    rates: dict[int, list[float]] = {1: [], 64: []}
    for _ in range(args.repeats):
        for c in rates:
            rates[c].append(measure(c, args.scenarios))
    med = {c: statistics.median(v) for c, v in rates.items()}
    episodes = len(POLICIES) * len(COUNTERPARTS) * 2 * args.scenarios
    report = {
        "episodes_per_run": episodes,
        "repeats": args.repeats,
        "episodes_per_s": {str(c): round(m, 1) for c, m in med.items()},
        "ratio_64_over_1": round(med[64] / med[1], 3),
        "all_runs": {str(c): [round(x, 1) for x in v] for c, v in rates.items()},
    }
    print(json.dumps(report, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
