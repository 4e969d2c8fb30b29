"""Playing a run's episodes in worker processes, on Ray: local processes or an existing cluster.

Each worker is a Ray actor with its own event loop that builds its own agents from the run's specs
(runner/crossplay.py, `Crossplay(config, None)`) and plays the chunks of jobs it is sent,
`concurrency` episodes at a time. It sends back each episode's record as a JSON line, with its row
of the episode table; this process (the driver) stays the only writer of the run folder, so resume,
kill safety and the store's guarantees are those of a one-process run. A new run's workers start
while the driver opens the run folder, and each is sent chunks as soon as it is ready. Every worker
has two chunks in hand, so it never waits for the driver between chunks. A worker that dies
(killed, out of memory, a blocked event loop) costs the unfinished episodes of its chunks only: Ray
restarts it and sends it those chunks again. A chunk that has killed its worker `DEATHS` times
stops the run instead.

Local model seats (hf:, vllm:, or cards that name them) ask Ray for one GPU per worker when the
cluster has GPUs, so each worker holds one engine on its own GPU; the driver checks their
parameters but loads no weights (`seat_for_driver`).
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from ibrl_bench.agents.base import Agent
from ibrl_bench.agents.spec import Seat
from ibrl_bench.errors import FatalAgentError, UserError
from ibrl_bench.runner.store import row_json

if TYPE_CHECKING:
    from ibrl_bench.runner.crossplay import Crossplay, Job, Progress

DEATHS = 3  # a chunk that kills this many workers is not sent again
LOCAL_MODELS = ("hf", "vllm")
IN_HAND = 2  # chunks a worker holds at once: one it plays, one queued behind it
# The smallest chunk (or a worker's concurrency, if more), unless the run is too small to give each
# worker IN_HAND such chunks: a chunk costs the driver a Ray call (about a millisecond), which 32
# scripted episodes amortise; a killed worker loses at most IN_HAND chunks' unfinished episodes.
CHUNK = 32
GROWTH = 8  # while much is left, chunks grow up to this many times the smallest (see Chunks)


class WorkerPlan(BaseModel):
    """Where a run's episodes are played: `workers` local processes, or on the Ray cluster at
    `address` (`workers` None there: one per CPU, or per GPU for local model seats)."""

    workers: int | None = Field(None, ge=1)
    address: str | None = None
    chunk: int | None = Field(None, ge=1)  # episodes per chunk; None: see WorkerPool


def plan(workers: int | None, address: str | None) -> WorkerPlan | None:
    """The plan for `crossplay --workers/--ray`; None plays the run in this process."""
    if workers is None and address is None:
        return None
    return WorkerPlan(workers=workers, address=address)


def _ray():
    try:
        import ray
    except ImportError:
        raise UserError("--workers and --ray need Ray: pip install 'ibrl-bench[ray]'") from None
    return ray


class _OnWorkers(Agent):
    """A local model seat as the driver holds it: the prompt it reads, for the run's record. Only
    the workers load the model, each on its own GPU."""

    def __init__(self, prompt: str):
        self.prompt = prompt

    async def act(self, obs):
        raise RuntimeError("a local model seat of a run on workers is played by the workers")


def seat_for_driver(spec: str, domain: str) -> Seat:
    """The seat the driver of a run on workers holds for `spec`: the agent itself, except for a local
    model, whose parameters and prompt are checked here but whose weights only the workers load."""
    from ibrl_bench.agents.cards import card_for
    from ibrl_bench.agents.generation import require_prompts
    from ibrl_bench.agents.params import HFParams, VLLMParams, parse_params
    from ibrl_bench.agents.spec import build_agent, parse_spec

    parsed = parse_spec(spec)
    card = card_for(parsed, domain) if parsed.kind == "card" else None
    inner = parse_spec(card.spec()) if card else parsed
    if inner.kind not in LOCAL_MODELS:
        return build_agent(spec, domain)
    params = parse_params(HFParams if inner.kind == "hf" else VLLMParams, inner.params, inner.text)
    require_prompts(domain, params.prompt)
    return Seat(parsed.text, _OnWorkers(params.prompt), card)


def _local_model_seats(runner: Crossplay) -> bool:
    from ibrl_bench.agents.spec import parse_spec

    for spec, seat in runner.seats.items():
        card = seat.card
        kind = parse_spec(card.spec() if card else spec).kind
        if kind in LOCAL_MODELS:
            return True
    return False


def _connect(ray, plan: WorkerPlan) -> bool:
    """Join the cluster at `plan.address`, or start a local one sized for the workers; whether this
    call started Ray (and so shuts it down)."""
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no reporting home from a benchmark run
    quiet = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False}
    try:
        if plan.address is not None:
            _check_reachable(plan.address)
            ray.init(address=plan.address, **quiet)
        else:
            # Workers take one CPU each; the driver runs beside them outside Ray's accounting.
            ray.init(num_cpus=plan.workers, object_store_memory=100 * 2**20, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"the Ray cluster at {plan.address}" if plan.address else "a local Ray instance"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"cannot start {where}: {first}; check the address (ray status) or run without --ray") from None
    return True


def _check_reachable(address: str) -> None:
    """Refuse at once a HOST:PORT nobody listens on (Ray itself retries such an address for minutes)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", "local": Ray finds the cluster itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise UserError(f"no Ray cluster answers at {address} ({e.strerror or e}); start one (ray start --head) "
                        "or give its address as ray status prints it") from None


class _Worker:
    """The actor: one per worker process, its event loop Ray's own (async actor)."""

    def __init__(self, config_json: str, concurrency: int, cwd: str):
        from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig

        if os.path.isdir(cwd):  # relative paths of the run (--contexts, plugins) as the command saw them
            os.chdir(cwd)
        self.concurrency = concurrency
        self.slots: asyncio.Semaphore | None = None
        self.watchdog = None
        # What keeps this worker from playing, said to the driver rather than raised: a worker whose
        # construction fails is restarted by Ray again and again, each time with a traceback.
        self.broken: str | None = None
        try:
            self.runner = Crossplay(CrossplayConfig.model_validate_json(config_json), None)
        except UserError as e:  # this machine lacks a package, a model, a file or a key the specs need
            self.broken = str(e)

    async def start(self) -> tuple[int, str | None]:
        """Ready the worker in its event loop; its process id, and what keeps it from playing if
        anything does. Ray reruns `__init__` alone when it restarts a dead worker, so `play` calls
        this too."""
        if self.slots is None and self.broken is None:
            from ibrl_bench.runner import watchdog

            self.slots = asyncio.Semaphore(self.concurrency)
            # A blocked loop ends this process (the driver sees the worker die and sends the chunk
            # again, up to DEATHS times); the message lands in the worker's log.
            self.watchdog = watchdog.LoopWatchdog(self.runner.config.move_timeout)
            await self.watchdog.__aenter__()
            from ibrl_bench.runner.metering import Metering

            # Model seats answer from the response cache here too (one sqlite file shared by the
            # processes of this machine); a budget is refused with workers (runner/crossplay.py).
            self.seats = Metering.open(self.runner.config, self.runner.domain, None).seats(self.runner.seats)
        return os.getpid(), self.broken

    async def play(self, jobs: list[Job]) -> tuple[list[tuple[str, str, str | None, str, str]], BaseException | None]:
        """(key, status, last error, JSON line, row) per finished episode in job order, and the
        fatal error that stopped the chunk, if any (the episodes finished before it are kept)."""
        _, broken = await self.start()
        if broken is not None:  # restarted on a machine that cannot build the agents
            return [], UserError(_cannot_start(broken))
        runner = self.runner

        async def one(job: Job):
            async with self.slots:
                return await runner._play(job, self.seats)

        tasks = [asyncio.ensure_future(one(job)) for job in jobs]
        out, fatal = [], None
        for task in tasks:
            try:
                record = await task
            except FatalAgentError as e:
                fatal = e
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                break
            line = record.model_dump_json()
            # The row is read from the line here, where it costs this worker's CPU, rather than by
            # the driver, which writes for every worker.
            out.append((record.key, record.outcome.status, record.errors[-1] if record.errors else None, line,
                        row_json(line)))
        return out, fatal


class Chunks:
    """The jobs still to send, cut as they are sent: each chunk an even share of what is left, as
    if every worker's chunks in hand were a quarter of it, between `smallest` and `largest`. Large
    while much is left (fewer Ray calls for the driver), `smallest` at the end (the workers
    finish together rather than one waiting on another's last large chunk)."""

    def __init__(self, jobs: list, workers: int, smallest: int, largest: int):
        self.jobs, self.workers, self.smallest, self.largest = jobs, workers, smallest, largest
        self.sent = 0

    def __bool__(self) -> bool:
        return self.sent < len(self.jobs)

    def take(self) -> list:
        left = len(self.jobs) - self.sent
        size = max(self.smallest, min(self.largest, math.ceil(left / (4 * self.workers * IN_HAND))))
        chunk = self.jobs[self.sent:self.sent + size]
        self.sent += len(chunk)
        return chunk


class WorkerPool:
    """The worker actors of one run, sized for `n_episodes`. Creating it returns as soon as Ray has
    been asked for the actors (after joining or starting Ray): they start, import the package and
    build their agents meanwhile, and each one is fed chunks the moment it is ready, so a worker
    that starts late (its process spawned afresh, on a slower node) holds up no other."""

    def __init__(self, runner: Crossplay, n_episodes: int):
        self.ray = ray = _ray()
        plan = runner.workers
        assert plan is not None
        self.started_ray = _connect(ray, plan)
        self.workers: list = []
        self.ready: list[asyncio.Future] = []  # per worker: its start, done once it can play
        try:
            resources = ray.cluster_resources()
            unit = "GPU" if _local_model_seats(runner) and resources.get("GPU", 0) >= 1 else "CPU"
            have = resources.get(unit, 1)
            n = plan.workers or max(1, int(have))
            per_worker = max(1, math.ceil(runner.config.concurrency / n))
            # Small runs are cut finer, so that every worker has its chunks in hand.
            self.size = plan.chunk or max(1, min(max(CHUNK, per_worker), math.ceil(n_episodes / (n * IN_HAND))))
            self.largest = plan.chunk or GROWTH * self.size
            n = max(1, min(n, math.ceil(n_episodes / self.size)))  # no worker without a chunk to play
            # One CPU (or GPU) each; more workers than the cluster has share them, rather than wait
            # for resources that will never come free.
            share = min(1.0, have / n)
            actor = ray.remote(_Worker).options(
                num_cpus=share if unit == "CPU" else 0, num_gpus=share if unit == "GPU" else 0,
                # A dead worker is started again, and Ray sends the chunks it held to it again.
                max_restarts=-1, max_task_retries=DEATHS - 1, max_concurrency=IN_HAND + 2,
            )
            config = runner.config.model_dump_json()
            self.workers.extend(actor.remote(config, per_worker, os.getcwd()) for _ in range(n))
            self.ready.extend(asyncio.ensure_future(_started(ray, w.start.remote())) for w in self.workers)
        except BaseException:
            self.close()
            raise

    async def play(self, pending: list[Job], tally: Callable[[str, str, str | None, str, str], BaseException | None],
                   abort: list[BaseException], progress: Progress) -> None:
        """Play `pending`, handing each finished episode to `tally` (which records it and may return
        a reason to stop); a stop reason lands in `abort`."""
        starting = dict(zip(self.ready, self.workers, strict=True))
        chunks = Chunks(pending, len(self.workers), self.size, self.largest)
        await _feed(self.ray, starting, chunks, tally, abort, progress)

    def close(self) -> None:
        """End the run's workers (also on a cluster that outlives the run); idempotent."""
        for future in self.ready:
            if not future.cancel() and not future.cancelled():
                future.exception()  # a start that failed after the run ended says nothing more
        for worker in self.workers:
            self.ray.kill(worker)
        self.workers = []
        if self.started_ray:
            self.ray.shutdown()
            self.started_ray = False


async def _started(ray, ref) -> None:
    """Wait for a worker's `start`; a worker that cannot play stops the run with one line."""
    try:
        _, broken = await ref
    except ray.exceptions.RayActorError as e:
        # A worker that cannot build its agents (a bad spec or card is caught before, in this
        # process; what is left is the worker's machine: a missing package, model or file).
        cause = getattr(e, "error_msg", None) or str(e)
        raise UserError(_cannot_start(cause.strip().splitlines()[-1])) from None
    if broken is not None:
        raise UserError(_cannot_start(broken))


def _cannot_start(why: str) -> str:
    return (f"a worker could not start: {why}; the run's specs must work on every node "
            "(same packages, files, models and key variables)")


async def _feed(ray, starting: dict[asyncio.Future, object], chunks: Chunks, tally,
                abort: list[BaseException], progress: Progress) -> None:
    """Send each worker IN_HAND chunks once it is ready (`starting`: its start, done when ready;
    emptied as workers become ready), and another each time it returns one."""
    in_flight: dict[asyncio.Future, tuple[object, list]] = {}

    def send(worker) -> None:
        if chunks:
            chunk = chunks.take()
            in_flight[asyncio.ensure_future(worker.play.remote(chunk))] = (worker, chunk)

    try:
        # A worker still starting when every chunk is out has nothing left to do: not waited for.
        while (in_flight or (starting and chunks)) and not abort:
            done, _ = await asyncio.wait([*in_flight, *starting], return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                if future in starting:
                    worker = starting.pop(future)
                    future.result()  # a worker that cannot play raises here
                    if progress.playing_since is None:
                        progress.playing_since = time.perf_counter()
                    for _ in range(IN_HAND):
                        send(worker)
                    continue
                worker, chunk = in_flight.pop(future)
                try:
                    lines, fatal = future.result()
                except ray.exceptions.RayActorError:
                    # Ray sent the chunk again to the restarted worker DEATHS - 1 times, and every
                    # time the worker died with it unfinished (nothing of it was recorded).
                    from ibrl_bench.runner.crossplay import RunAborted

                    abort.append(RunAborted(
                        f"stopped: a chunk of {len(chunk)} episodes (the first: {chunk[0].key}) killed its worker "
                        f"{DEATHS} times (an agent that blocks the event loop or runs out of memory; see the "
                        "worker logs under /tmp/ray/session_latest/logs); finished episodes are kept: fix the "
                        "agent and rerun the same command to resume"))
                    break
                for key, status, last_error, line, row in lines:
                    reason = tally(key, status, last_error, line, row)
                    if reason is not None:
                        abort.append(reason)
                        break
                if fatal is not None and not abort:
                    abort.append(fatal)
                if abort:
                    break
                send(worker)
    finally:
        for future in in_flight:
            future.cancel()
