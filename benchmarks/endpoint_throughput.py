"""Cross-play against an OpenAI-compatible endpoint with a fixed latency, side by side with the
limits that bound it, all measured in one run on one endpoint:

1. at --low concurrent episodes (default 16): episodes/s as a ratio to the latency-bound limit,
   concurrency / (sequential model rounds per episode x latency); target >= 0.95;
2. at --high concurrent episodes (default 256): model calls/s of the harness as a ratio to what
   the bare `openai` async client reaches alone at the same concurrency on the same endpoint;
   target >= 0.9.

The endpoint is `ibrl_bench.testing.fake_openai` in its own process (the machine has 2 cores:
one serves, one runs the harness). Both seats of every episode go through HTTP. CPU seconds per
model call are reported for the client side (the harness, or the bare client) and for the
endpoint: with 50 ms latency, 16 episodes need about 320 calls/s, so the two processes together
must stay under about 6 ms of CPU per call on two cores for the latency bound to be reachable.

    python benchmarks/endpoint_throughput.py [--latency-ms 50] [--scenarios 40] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_endpoint(latency_ms: float) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ibrl_bench.testing.fake_openai", "--port", str(port),
                             "--latency-ms", str(latency_ms)])
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/models", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the endpoint did not start")


def server_cpu_s(proc: subprocess.Popen) -> float:
    """User + system CPU seconds of the endpoint process so far (Linux /proc)."""
    fields = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_call(run, proc: subprocess.Popen) -> tuple[dict, dict]:
    """Run `run()` (which returns a dict with calls_per_s and seconds) and add where CPU went."""
    own, server = time.process_time(), server_cpu_s(proc)
    out = run()
    calls = out["calls_per_s"] * out["seconds"]
    cpu = {"client_cpu_ms_per_call": round((time.process_time() - own) / calls * 1000, 2),
           "server_cpu_ms_per_call": round((server_cpu_s(proc) - server) / calls * 1000, 2)}
    return out, cpu


def crossplay(url: str, concurrency: int, scenarios: int, profile: bool = False) -> dict:
    spec = f"openai:fake@{url}?key_env=none&concurrency=1024&timeout=30"
    config = CrossplayConfig(policies=[spec], counterparts=[spec.replace("fake@", "fake-2@")],
                             scenarios=scenarios, concurrency=concurrency)
    with tempfile.TemporaryDirectory() as folder:
        runner = Crossplay(config, folder)
        prof = cProfile.Profile() if profile else None
        start = time.perf_counter()
        if prof:
            prof.enable()
        asyncio.run(runner.run())
        if prof:
            prof.disable()
        elapsed = time.perf_counter() - start
        records = runner.store.records()
    assert all(r.outcome.status != "error" for r in records)
    calls = sum(len(r.transcript) for r in records)
    # Talk moves are sequential; the two private splits are asked for at once: one round.
    rounds = sum(r.outcome.turns + 1 for r in records) / len(records)
    out = {"episodes": len(records), "seconds": elapsed, "episodes_per_s": len(records) / elapsed,
           "calls_per_s": calls / elapsed, "rounds_per_episode": rounds}
    if prof:
        stats = pstats.Stats(prof).sort_stats("tottime")
        out["top_functions"] = [
            f"{func[2]} ({func[0].split('site-packages/')[-1]}:{func[1]}) {row[2]:.2f}s"
            for func, row in list(stats.stats.items()) if row[2] > 0
        ]
        out["top_functions"] = sorted(out["top_functions"], key=lambda x: -float(x.rsplit(" ", 1)[1][:-1]))[:12]
    return out


def typical_conversation() -> list[dict[str, str]]:
    """The prompt of a mid-game move, as the harness sends it, so both sides carry equal bodies."""
    from ibrl_bench.domains import get_domain

    game = get_domain("dealnodeal")
    state = game.start(game.scenario_set("test", 1).scenarios[0], 0)
    for _ in range(5):
        game.apply(state, game.to_move(state)[0], "How about I take the books? <propose>book=1 hat=0 ball=0</propose>")
    return game.chat_messages(game.observe(state, game.to_move(state)[0]))


def bare_client(url: str, concurrency: int, calls: int) -> dict:
    from openai import AsyncOpenAI

    messages = typical_conversation()

    async def main() -> float:
        client = AsyncOpenAI(api_key="none", base_url=url, max_retries=3, timeout=30)  # as the harness retries
        left = calls

        async def worker():
            nonlocal left
            while left > 0:
                left -= 1
                await client.chat.completions.create(model="fake", messages=messages, max_tokens=256,
                                                     temperature=0.7, top_p=1.0)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
        await client.close()
        return {"calls_per_s": calls / elapsed, "seconds": elapsed}

    return asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--scenarios", type=int, default=40)
    ap.add_argument("--low", type=int, default=16)
    ap.add_argument("--high", type=int, default=256)
    ap.add_argument("--profile", action="store_true", help="where the time goes at --high")
    args = ap.parse_args()
    proc, url = start_endpoint(args.latency_ms)
    try:
        crossplay(url, 4, 2)  # warm up imports and connections
        # Steady state: at least eight waves of episodes, so that the first and last waves (slots
        # filling up, the longest games finishing alone) do not dominate; one wave read 0.58
        # where eight read 0.70 on the same endpoint.
        low, low_cpu = cpu_per_call(lambda: crossplay(url, args.low, max(args.scenarios, 4 * args.low)), proc)
        limit = args.low / (low["rounds_per_episode"] * args.latency_ms / 1000)
        low_calls = int(low["calls_per_s"] * low["seconds"])
        low_bare, low_bare_cpu = cpu_per_call(lambda: bare_client(url, args.low, low_calls), proc)
        high, high_cpu = cpu_per_call(lambda: crossplay(url, args.high, args.scenarios * 4, profile=args.profile), proc)
        calls = int(high["calls_per_s"] * high["seconds"])
        bare, bare_cpu = cpu_per_call(lambda: bare_client(url, args.high, calls), proc)
    finally:
        proc.terminate()
        proc.wait()
    report = {
        "latency_ms": args.latency_ms,
        "low": {"concurrency": args.low, "episodes_per_s": round(low["episodes_per_s"], 2),
                "latency_bound_episodes_per_s": round(limit, 2),
                "ratio_to_latency_bound": round(low["episodes_per_s"] / limit, 3),
                "calls_per_s": round(low["calls_per_s"], 1), "harness": low_cpu,
                "bare_openai_client_calls_per_s": round(low_bare["calls_per_s"], 1), "bare_client": low_bare_cpu},
        "high": {"concurrency": args.high, "harness_calls_per_s": round(high["calls_per_s"], 1),
                 "bare_openai_client_calls_per_s": round(bare["calls_per_s"], 1),
                 "ratio_to_bare_client": round(high["calls_per_s"] / bare["calls_per_s"], 3),
                 "harness": high_cpu, "bare_client": bare_cpu},
    }
    if args.profile:
        report["high"]["top_functions"] = high["top_functions"]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
