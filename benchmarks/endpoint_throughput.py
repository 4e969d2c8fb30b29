"""Cross-play against an OpenAI-compatible endpoint with a fixed latency, side by side with the
limits that bound it, all measured in one run on one endpoint:

1. at --low concurrent episodes (default 16): episodes/s as a ratio to the latency-bound limit,
   concurrency / (sequential model rounds per episode x latency); target >= 0.879 (what a
   thread-per-episode harness reached on the same endpoint; the openai client alone allows 0.74-0.95
   here, depending on the load, and `ratio_bound_by_client_stack` says what it allowed in this run);
2. at --high concurrent episodes (default 256): model calls/s of the harness as a ratio to what
   the bare `openai` async client reaches alone at the same concurrency on the same endpoint;
   target >= 0.9.

The endpoint is `ibrl_bench.testing.fake_openai` in its own process (the machine has 2 cores:
one serves, one runs the harness). Both seats of every episode go through HTTP. CPU milliseconds
per model call are itemised for both sides, each measured in its own pass on the same endpoint:

- client: `harness` (the whole cross-play process), `client_stack` (the same requests sent
  straight through the backend's `complete`: the openai client, its HTTP transport and our
  parsing, no episodes), `harness_own` (the difference: episodes, prompts, retry layer, store),
  and `bare_create` (the bare `openai` client's `chat.completions.create`, as a peer would call);
- endpoint: the endpoint process's CPU per call in each of those passes.

`serial` sends calls one at a time: its latency above the injected one is what every call pays
in series (client and endpoint CPU, loopback), before any queueing. With 50 ms latency, 16
episodes need about 320 calls/s; client and endpoint CPU per call then load their cores at
320/s x CPU, and the queueing that load causes adds to every call's latency too.

At --low the ratio is split into `round_ms` (a round's mean time inside an episode) and
`slots_busy` (the share of the run the episode slots were full), and set beside two bounds: the
ratio the client stack alone would allow at its latency at that concurrency, and the ratio a bare
aiohttp session (the transport under the openai client) would allow. `targets` at the end prints
each target with its ratio.

    python benchmarks/endpoint_throughput.py [--latency-ms 50] [--scenarios 40] [--uvloop] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
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

SPEC = "openai:{model}@{url}?key_env=none&concurrency=1024&timeout=30"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_endpoint(latency_ms: float, http: str = "auto", loop: str = "auto") -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ibrl_bench.testing.fake_openai", "--port", str(port),
                             "--latency-ms", str(latency_ms), "--http", http, "--loop", loop])
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
    cpu = {"client": round((time.process_time() - own) / calls * 1000, 3),
           "server": round((server_cpu_s(proc) - server) / calls * 1000, 3)}
    return out, cpu


def package(filename: str) -> str:
    """Which library a profiled function belongs to, for the itemised profile."""
    if filename.startswith("~") or filename.startswith("<"):
        return "builtins (sockets, epoll, C calls)"
    if "site-packages/" in filename:
        return filename.split("site-packages/")[1].split("/")[0].removesuffix(".py")
    if "/ibrl_bench/" in filename:
        return "ibrl_bench"
    return "stdlib " + filename.rsplit("/lib/python", 1)[-1].split("/", 2)[1].removesuffix(".py")


def crossplay(url: str, concurrency: int, scenarios: int, run=asyncio.run, profile: bool = False) -> dict:
    spec = SPEC.format(model="fake", url=url)
    with tempfile.TemporaryDirectory() as folder:
        # A response cache of its own: with the user's, a game played before (the warm-up, the
        # lower level, an earlier run of this benchmark) would replay its replies from the cache.
        config = CrossplayConfig(policies=[spec], counterparts=[SPEC.format(model="fake-2", url=url)],
                                 scenarios=scenarios, concurrency=concurrency, cache_dir=f"{folder}/cache")
        runner = Crossplay(config, f"{folder}/run")
        prof = cProfile.Profile() if profile else None
        start = time.perf_counter()
        if prof:
            prof.enable()
        run(runner.run())
        if prof:
            prof.disable()
        elapsed = time.perf_counter() - start
        records = runner.store.records()
    assert all(r.outcome.status != "error" for r in records)
    calls = sum(len(r.transcript) for r in records)
    # Talk moves are sequential; the two private splits are asked for at once: one round.
    rounds = sum(r.outcome.turns + 1 for r in records)
    busy = sum(r.duration_s for r in records)
    out = {"episodes": len(records), "seconds": elapsed, "episodes_per_s": len(records) / elapsed,
           "calls_per_s": calls / elapsed, "rounds_per_episode": rounds / len(records),
           # The ratio splits into two factors: how long a round takes inside an episode, and
           # what share of the run the `concurrency` episode slots were busy (the first and last
           # waves leave some empty).
           "round_ms": busy / rounds * 1000,
           "slots_busy": busy / (concurrency * elapsed)}
    if prof:
        stats = pstats.Stats(prof).stats
        by_package: dict[str, float] = {}
        for func, row in stats.items():
            by_package[package(func[0])] = by_package.get(package(func[0]), 0.0) + row[2]
        total = sum(by_package.values())
        # Profiled time runs slower than plain time; the shares are what to read.
        out["profile_share_by_package"] = {k: f"{v / total:.1%}" for k, v in
                                           sorted(by_package.items(), key=lambda kv: -kv[1])[:12]}
        top = sorted(stats.items(), key=lambda kv: -kv[1][2])[:12]
        out["top_functions"] = [f"{f[2]} ({f[0].split('site-packages/')[-1]}:{f[1]}) {r[2] / total:.1%}"
                                for f, r in top]
    return out


def typical_conversation() -> list[dict[str, str]]:
    """The prompt of a mid-game move, as the harness sends it, so both sides carry equal bodies."""
    from ibrl_bench.domains import get_domain

    game = get_domain("dealnodeal")
    state = game.start(game.scenario_set("test", 1).scenarios[0], 0)
    for _ in range(5):
        game.apply(state, game.to_move(state)[0], "How about I take the books? <propose>book=1 hat=0 ball=0</propose>")
    return game.chat_messages(game.observe(state, game.to_move(state)[0]))


def typical_request() -> dict:
    """The body every pass sends: a mid-game move with the harness's generation parameters."""
    return dict(model="fake", messages=typical_conversation(), temperature=0.7, top_p=1.0, max_tokens=256)


async def closed_loop(send, concurrency: int, calls: int) -> dict:
    """`calls` awaits of `send()`, `concurrency` at a time, each started as soon as one ends."""
    left, latencies = calls, []

    async def worker():
        nonlocal left
        while left > 0:
            left -= 1
            start = time.perf_counter()
            await send()
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    return {"calls_per_s": calls / elapsed, "seconds": elapsed, "mean_latency_s": sum(latencies) / len(latencies)}


def client_stack(url: str, concurrency: int, calls: int, run=asyncio.run) -> dict:
    """The harness's transport alone: `calls` requests straight through the backend's `complete`,
    under the shared retry layer as the harness sends them (a dropped connection is retried)."""
    from ibrl_bench.agents.remote import call
    from ibrl_bench.agents.spec import build_agent

    agent = build_agent(SPEC.format(model="fake", url=url), "dealnodeal").agent
    request = typical_request()

    async def main() -> dict:
        await agent.complete(request)  # the connection, once
        out = await closed_loop(lambda: call(agent.endpoint, agent.settings, lambda: agent.complete(request)),
                                concurrency, calls)
        await agent.aclose()
        return out

    return run(main())


def bare_aiohttp(url: str, concurrency: int, calls: int, run=asyncio.run) -> dict:
    """The transport alone: the same request body posted with a bare aiohttp session (the
    transport under the openai client; no client, no harness), at the same concurrency on the
    same endpoint."""
    import aiohttp

    body = json.dumps(typical_request()).encode()

    async def main() -> dict:
        async with aiohttp.ClientSession(headers={"Content-Type": "application/json"}) as session:
            async def send():
                async with session.post(f"{url}/chat/completions", data=body) as response:
                    await response.read()

            return await closed_loop(send, concurrency, calls)

    return run(main())


def bare_client(url: str, concurrency: int, calls: int, run=asyncio.run) -> dict:
    from openai import AsyncOpenAI

    request = typical_request()

    async def main() -> dict:
        client = AsyncOpenAI(api_key="none", base_url=url, max_retries=3, timeout=30)  # as the harness retries
        out = await closed_loop(lambda: client.chat.completions.create(**request), concurrency, calls)
        await client.close()
        return out

    return run(main())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--scenarios", type=int, default=40)
    ap.add_argument("--low", type=int, default=16)
    ap.add_argument("--high", type=int, default=256)
    ap.add_argument("--uvloop", action="store_true", help="run the client side on uvloop")
    ap.add_argument("--server-http", default="auto", help="the endpoint's HTTP parser (uvicorn): auto, h11, httptools")
    ap.add_argument("--server-loop", default="auto", help="the endpoint's event loop (uvicorn): auto, asyncio, uvloop")
    ap.add_argument("--profile", action="store_true", help="where the harness's time goes at --low, by package")
    args = ap.parse_args()
    run = asyncio.run
    if args.uvloop:
        import uvloop

        run = uvloop.run
    proc, url = start_endpoint(args.latency_ms, args.server_http, args.server_loop)
    try:
        crossplay(url, 4, 2, run)  # warm up imports and connections
        serial, serial_cpu = cpu_per_call(lambda: client_stack(url, 1, 100, run), proc)
        # Steady state: at least eight waves of episodes, so that the first and last waves (slots
        # filling up, the longest games finishing alone) do not dominate; one wave read 0.58
        # where eight read 0.70 on the same endpoint.
        levels = {}
        for name, conc, scenarios in (("low", args.low, max(args.scenarios, 4 * args.low)),
                                      ("high", args.high, args.scenarios * 4)):
            harness, harness_cpu = cpu_per_call(
                functools.partial(crossplay, url, conc, scenarios, run, profile=args.profile and name == "low"), proc)
            calls = int(harness["calls_per_s"] * harness["seconds"])
            stack, stack_cpu = cpu_per_call(functools.partial(client_stack, url, conc, calls, run), proc)
            bare, bare_cpu = cpu_per_call(functools.partial(bare_client, url, conc, calls, run), proc)
            levels[name] = (conc, harness, harness_cpu, stack, stack_cpu, bare, bare_cpu)
        floor = bare_aiohttp(url, args.low, int(levels["low"][1]["calls_per_s"] * levels["low"][1]["seconds"]), run)
    finally:
        proc.terminate()
        proc.wait()
    report = {"latency_ms": args.latency_ms, "client_loop": "uvloop" if args.uvloop else "asyncio",
              "server": f"uvicorn http={args.server_http} loop={args.server_loop}",
              "serial": {"latency_above_injected_ms": round(serial["mean_latency_s"] * 1000 - args.latency_ms, 2),
                         "client_cpu_ms_per_call": serial_cpu["client"],
                         "server_cpu_ms_per_call": serial_cpu["server"]}}
    for name, (conc, harness, harness_cpu, stack, stack_cpu, bare, bare_cpu) in levels.items():
        level = {"concurrency": conc, "harness_calls_per_s": round(harness["calls_per_s"], 1),
                 "bare_create_calls_per_s": round(bare["calls_per_s"], 1),
                 "ratio_to_bare_create": round(harness["calls_per_s"] / bare["calls_per_s"], 3),
                 "client_cpu_ms_per_call": {
                     "harness": harness_cpu["client"], "client_stack": stack_cpu["client"],
                     "harness_own": round(harness_cpu["client"] - stack_cpu["client"], 3),
                     "bare_create": bare_cpu["client"]},
                 "server_cpu_ms_per_call": {"harness": harness_cpu["server"], "client_stack": stack_cpu["server"],
                                            "bare_create": bare_cpu["server"]}}
        if name == "low":
            limit = conc / (harness["rounds_per_episode"] * args.latency_ms / 1000)
            level = {"concurrency": conc, "episodes_per_s": round(harness["episodes_per_s"], 2),
                     "latency_bound_episodes_per_s": round(limit, 2),
                     "ratio_to_latency_bound": round(harness["episodes_per_s"] / limit, 3),
                     # where the ratio goes: per round inside an episode, and slots left empty
                     "round_ms": round(harness["round_ms"], 2), "slots_busy": round(harness["slots_busy"], 3),
                     # Latency per call of the client stack alone and of the bare transport under
                     # it, and the ratio each would allow if a round took just that: bounds that
                     # the harness, which adds its own work to every round, cannot go over.
                     "client_stack_mean_latency_ms": round(stack["mean_latency_s"] * 1000, 1),
                     "ratio_bound_by_client_stack": round(args.latency_ms / (stack["mean_latency_s"] * 1000), 3),
                     "bare_aiohttp_mean_latency_ms": round(floor["mean_latency_s"] * 1000, 1),
                     "ratio_bound_by_bare_aiohttp": round(args.latency_ms / (floor["mean_latency_s"] * 1000), 3),
                    } | level
            for key in ("profile_share_by_package", "top_functions"):
                if key in harness:
                    level[key] = harness[key]
        report[name] = level
    low, high = report["low"], report["high"]
    report["targets"] = {
        f"at {args.low}: ratio to the latency bound (target >= 0.879)": low["ratio_to_latency_bound"],
        f"at {args.low}: bounds (client stack, bare aiohttp)": [low["ratio_bound_by_client_stack"],
                                                                low["ratio_bound_by_bare_aiohttp"]],
        f"at {args.high}: calls/s over the bare openai client's (target >= 0.9)": high["ratio_to_bare_create"]}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
