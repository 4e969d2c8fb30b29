"""The harness's own CPU per move: cross-play between two in-process agents that answer at once,
with the run log written as in a real run (so no HTTP client or model is in the way).

Reports CPU milliseconds per move (process time, so other load on the shared machine counts
less), and, as a baseline from the same run, the CPU per move of the bare dialogue loop without
the runner and its log, so the ratio shows what the runner adds. Target: < 0.3 ms per move.

    python benchmarks/harness_overhead.py [--scenarios 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time

from ibrl_bench.agents.spec import build_agent
from ibrl_bench.domains import get_domain
from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig
from ibrl_bench.runner.episode import play_episode

INSTANT = "python:ibrl_bench.testing.agents:Instant"


def runner_cpu_per_move(scenarios: int) -> tuple[float, int]:
    config = CrossplayConfig(policies=[INSTANT], counterparts=[INSTANT], scenarios=scenarios, concurrency=64)
    with tempfile.TemporaryDirectory() as folder:
        runner = Crossplay(config, folder)
        start = time.process_time()
        asyncio.run(runner.run())
        cpu = time.process_time() - start
        moves = sum(len(r.transcript) for r in runner.store.records())
    return cpu * 1000 / moves, moves


def loop_cpu_per_move(scenarios: int) -> float:
    game = get_domain("dealnodeal")
    agent = build_agent(INSTANT, "dealnodeal").agent
    items = game.scenario_set("test", scenarios).scenarios

    async def main() -> int:
        moves = 0
        for s in items:
            for _ in game.roles:
                result = await play_episode(game, s, {"a": agent, "b": agent}, 0)
                moves += len(result.state.transcript)
        return moves

    start = time.process_time()
    moves = asyncio.run(main())
    return (time.process_time() - start) * 1000 / moves


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    runs, loops, moves = [], [], 0
    for _ in range(args.repeats):
        ms, moves = runner_cpu_per_move(args.scenarios)
        runs.append(ms)
        loops.append(loop_cpu_per_move(args.scenarios))
    report = {
        "moves_per_run": moves,
        "runner_cpu_ms_per_move": round(statistics.median(runs), 4),
        "bare_loop_cpu_ms_per_move": round(statistics.median(loops), 4),
        "runner_over_bare_loop": round(statistics.median(runs) / statistics.median(loops), 3),
        "target_ms_per_move": 0.3,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
