"""Cross-play on Ray worker processes (`crossplay --workers N`) against one worker, in one run:

1. scripted CPU-bound matrix (--scenarios x 8 episodes): episodes/s with 2 workers over 1 worker,
   target >= 1.7x by wall on 2 cores, with the one-process run (no Ray) beside them;
2. API-bound against the fake OpenAI-compatible endpoint (ibrl_bench.testing.fake_openai, in its
   own process, so its CPU is not this process's) at --low and --high concurrent episodes:
   episodes/s with 2 workers over 1, and the bounds beside them, measured on the same endpoint
   in the same run: the client stack alone (requests straight through the openai backend's
   `complete` under the retry layer, no episodes) and a bare aiohttp session (the transport
   under the openai client), each at the same concurrency for the same number of calls. At
   --low, everything is also read as a ratio to the latency bound, concurrency / (model rounds
   per episode x latency); target >= 0.879 (what a thread-per-episode harness reached on the
   same endpoint); a bound's ratio is latency / its mean latency per call.

Runs are interleaved (one process, 1 worker, 2 workers, repeated) so a shared machine's load
touches each alike; the median of --repeats is reported with the load average before and after.
Rates are read two ways: `wall` over the whole run, from `Crossplay.run()` to its end (Ray itself
is started once before all runs, but each run starts its own worker processes, as a user's
command does), and `playing`, from the moment the first worker could play
(Progress.playing_since) to the end. `targets` at the end prints each target with its ratio.

    python benchmarks/workers_throughput.py [--scenarios 1000] [--repeats 3] [--latency-ms 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from endpoint_throughput import SPEC, bare_aiohttp, client_stack, start_endpoint

from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig
from ibrl_bench.runner.workers import WorkerPlan

SCRIPTED = {"policies": ["scripted:dealnodeal/boulware", "scripted:dealnodeal/tit_for_tat"],
            "counterparts": ["scripted:dealnodeal/conceder", "scripted:dealnodeal/random"], "split": "train"}


def measure(config: CrossplayConfig, workers: int | None) -> dict:
    """One run of `config` in a fresh folder: wall and playing episodes/s, and rounds per episode."""
    plan = WorkerPlan(workers=workers) if workers else None
    with tempfile.TemporaryDirectory() as folder:
        # A response cache of its own: with the user's, a repeat of the same games would replay
        # every reply from the cache and time no model call.
        config = config.model_copy(update={"cache_dir": f"{folder}/cache"})
        runner = Crossplay(config, f"{folder}/run", plan)
        start, cpu = time.perf_counter(), time.process_time()
        progress = asyncio.run(runner.run())
        end, cpu = time.perf_counter(), time.process_time() - cpu
        records = runner.store.records()
    assert progress.done == runner.total() and progress.errors == 0
    return {"wall": len(records) / (end - start), "playing": len(records) / (end - progress.playing_since),
            "driver_cpu_ms_per_episode": cpu / len(records) * 1000,
            "rounds_per_episode": sum(r.outcome.turns + 1 for r in records) / len(records)}


def compare(config: CrossplayConfig, repeats: int, one_process: bool = True) -> dict:
    kinds = {"one_process": None, "workers_1": 1, "workers_2": 2}
    if not one_process:
        kinds.pop("one_process")
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    for _ in range(repeats):
        for name, workers in kinds.items():
            runs[name].append(measure(config, workers))
    med = {name: {way: statistics.median(r[way] for r in rs) for way in ("wall", "playing")}
           for name, rs in runs.items()}
    out = {"episodes_per_s": {n: {w: round(v, 1) for w, v in m.items()} for n, m in med.items()},
           "ratio_2_over_1_workers": {w: round(med["workers_2"][w] / med["workers_1"][w], 3)
                                      for w in ("wall", "playing")},
           "rounds_per_episode": round(statistics.median(r["rounds_per_episode"]
                                                         for rs in runs.values() for r in rs), 2),
           # CPU of this process (the driver: the only one with no worker) per episode; with workers,
           # 1 / this is the ceiling of the episodes/s that the driver alone allows.
           "driver_cpu_ms_per_episode": {n: round(statistics.median(r["driver_cpu_ms_per_episode"] for r in rs), 3)
                                         for n, rs in runs.items()},
           "all_runs": {n: [{w: round(r[w], 1) for w in ("wall", "playing")} for r in rs] for n, rs in runs.items()}}
    if one_process:
        out["ratio_2_workers_over_one_process"] = {
            w: round(med["workers_2"][w] / med["one_process"][w], 3) for w in ("wall", "playing")}
    return out, med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=1000, help="scenarios of the scripted matrix (x8 episodes)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--low", type=int, default=16)
    ap.add_argument("--high", type=int, default=256)
    ap.add_argument("--skip-api", action="store_true")
    args = ap.parse_args()
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # One Ray instance for every run (its start-up is paid once); its worker processes are started
    # afresh in each run, as in a user's command.
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20, logging_level="WARNING",
             log_to_driver=False)
    report = {"cpus": os.cpu_count(), "load_average_before": os.getloadavg()}
    scripted = CrossplayConfig(scenarios=args.scenarios, concurrency=16, **SCRIPTED)
    report["scripted"], _ = compare(scripted, args.repeats)
    report["scripted"]["episodes_per_run"] = 8 * args.scenarios
    targets = {"scripted: 2 workers / 1 worker, episodes/s by wall (target >= 1.7)":
               report["scripted"]["ratio_2_over_1_workers"]["wall"]}
    if not args.skip_api:
        proc, url = start_endpoint(args.latency_ms)
        try:
            api = {"policies": [SPEC.format(model="fake", url=url)],
                   "counterparts": [SPEC.format(model="fake-2", url=url)]}
            for name, conc, scenarios in (("low", args.low, 8 * args.low), ("high", args.high, 2 * args.high)):
                config = CrossplayConfig(scenarios=scenarios, concurrency=conc, **api)
                level, med = compare(config, args.repeats, one_process=True)
                level["episodes_per_run"] = 2 * scenarios
                level["concurrency"] = conc
                calls = int(2 * scenarios * level["rounds_per_episode"])  # about a run's calls
                bounds = {way: [fn(url, conc, calls) for _ in range(args.repeats)]
                          for way, fn in (("client_stack", client_stack), ("bare_aiohttp", bare_aiohttp))}
                level["bounds_calls_per_s"] = {way: round(statistics.median(r["calls_per_s"] for r in rs), 1)
                                               for way, rs in bounds.items()}
                latency = {way: statistics.median(r["mean_latency_s"] for r in rs) for way, rs in bounds.items()}
                level["bounds_mean_latency_ms"] = {way: round(v * 1000, 2) for way, v in latency.items()}
                if name == "low":
                    bound = conc / (level["rounds_per_episode"] * args.latency_ms / 1000)
                    level["latency_bound_episodes_per_s"] = round(bound, 2)
                    ratios = {n: {w: round(v / bound, 3) for w, v in m.items()} for n, m in med.items()}
                    ratios |= {way: round(args.latency_ms / 1000 / v, 3) for way, v in latency.items()}
                    level["ratio_to_latency_bound"] = ratios
                    for n in ("one_process", "workers_2"):
                        targets[f"api at {conc}: {n}, ratio to the latency bound by wall (target >= 0.879)"] = \
                            ratios[n]["wall"]
                    targets[f"api at {conc}: bounds (client stack, bare aiohttp)"] = \
                        [ratios["client_stack"], ratios["bare_aiohttp"]]
                targets[f"api at {conc}: 2 workers / 1 worker, by wall"] = level["ratio_2_over_1_workers"]["wall"]
                report[f"api_{name}"] = level
        finally:
            proc.terminate()
            proc.wait()
    report["targets"] = targets
    report["load_average_after"] = os.getloadavg()
    ray.shutdown()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
