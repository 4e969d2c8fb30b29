"""Cross-episode batching of `hf:` agents: moves/s one request at a time vs batched.

Tiny random Llama models (ibrl_bench.models.tiny) play Deal-or-NoDeal against a scripted
counterpart through the real runner (run log included), with 16 episodes in flight, once with
batch_size=1 (every move its own `generate` call) and once with batch_size=16. The two settings
are measured in the same process and interleaved (1, 16, 1, 16 ...) so that a noisy, shared
machine affects both alike; the medians and their ratio are reported. Two model shapes:

  micro  1 layer, hidden 32: the model's own arithmetic is nearly free, as on a GPU, so the
         ratio shows what the batching machinery (gathering, padding, one call per batch) buys;
  tiny   the default of build_tiny_model (2 layers, hidden 64), used by the tests: on a CPU its
         per-row work (attention over a growing dialogue, which with padding runs the masked
         attention kernel instead of the fused causal one) does not shrink with batching.

On a machine shared with other jobs, torch's intra-op threads are themselves a cost: the ops of
a 16-row batch are large enough to be split across threads, those of one row are not, and every
parallel region then waits for a core the other jobs hold (on 2 busy cores a 1-layer decode step
took 5x longer on 2 threads than on 1). `--threads 1` takes that out and measures the batching.
Moves per CPU second (process time) are reported beside moves per second: on such a machine the
wall clock also counts the time other jobs held the cores, and with one thread the CPU time is
what an idle machine would take.

    python benchmarks/hf_batching.py [--scenarios 8] [--repeats 3] [--max-new-tokens 64] [--threads N] [--json OUT]
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
from ibrl_bench.models.tiny import build_tiny_model
from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig

COUNTERPART = "scripted:dealnodeal/conceder"
CONCURRENCY = 16
SHAPES = {
    "micro": dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1,
                  num_hidden_layers=1),
    "tiny": {},
}


def measure(model: Path, batch_size: int, scenarios: int, max_new_tokens: int) -> dict:
    spec = f"hf:{model}?batch_size={batch_size}&max_new_tokens={max_new_tokens}&window_ms=5"
    with tempfile.TemporaryDirectory() as folder:
        # A response cache of its own: with the user's, every batch size after the first would
        # replay the same games' replies from the cache and generate nothing.
        config = CrossplayConfig(policies=[spec], counterparts=[COUNTERPART], scenarios=scenarios, split="dev",
                                 concurrency=CONCURRENCY, retries=0, cache_dir=f"{folder}/cache")
        runner = Crossplay(config, f"{folder}/run")
        agent = runner.seats[spec].agent
        start, cpu_start = time.perf_counter(), time.process_time()
        progress = asyncio.run(runner.run())
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    assert progress.done == runner.total() and progress.errors == 0
    stats = agent.batcher.stats
    return {
        "moves_per_s": stats.requests / elapsed,
        "moves_per_cpu_s": stats.requests / cpu,
        "episodes_per_s": runner.total() / elapsed,
        "moves": stats.requests,
        "generate_calls": stats.batches,
        "mean_batch": stats.requests / stats.batches,
        "seconds": elapsed,
    }


def compare(model: Path, args: argparse.Namespace) -> dict:
    runs: dict[int, list[dict]] = {1: [], 16: []}
    measure(model, 16, 2, args.max_new_tokens)  # warm-up: first-call costs are not what we measure
    for _ in range(args.repeats):
        for batch_size in runs:
            runs[batch_size].append(measure(model, batch_size, args.scenarios, args.max_new_tokens))

    def median(key: str, batch_size: int) -> float:
        return statistics.median(r[key] for r in runs[batch_size])

    return {
        "moves_per_s": {f"batch_size={b}": round(median("moves_per_s", b), 2) for b in runs},
        "episodes_per_s": {f"batch_size={b}": round(median("episodes_per_s", b), 3) for b in runs},
        "mean_batch": {f"batch_size={b}": round(median("mean_batch", b), 2) for b in runs},
        "ratio_16_over_1": round(median("moves_per_s", 16) / median("moves_per_s", 1), 2),
        "moves_per_cpu_s": {f"batch_size={b}": round(median("moves_per_cpu_s", b), 2) for b in runs},
        "cpu_ratio_16_over_1": round(median("moves_per_cpu_s", 16) / median("moves_per_cpu_s", 1), 2),
        "all_runs_moves_per_s": {f"batch_size={b}": [round(r["moves_per_s"], 2) for r in rs] for b, rs in runs.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=8, help="scenarios; x2 roles = episodes per measurement")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64, help="the hf: default")
    ap.add_argument("--shape", choices=list(SHAPES), action="append", help="model shape(s); default both")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads; default torch's own")
    ap.add_argument("--json", default=None, help="write the numbers to this file")
    args = ap.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    report: dict = {"episodes_per_run": args.scenarios * 2, "concurrency": CONCURRENCY,
                    "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "device": "cpu",
                    "threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory() as folder:
        for name in args.shape or list(SHAPES):
            model = build_tiny_model(Path(folder) / name, seed=0, **SHAPES[name])
            report[name] = compare(model, args)
            print(f"{name}: x{report[name]['ratio_16_over_1']} "
                  f"(per CPU second: x{report[name]['cpu_ratio_16_over_1']})", flush=True)
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
