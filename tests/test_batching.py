"""The batcher that the local-model backends share: gathering, routing, failures, cancellation."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ibrl_bench.agents.base import Agent
from ibrl_bench.agents.batching import Batcher
from ibrl_bench.agents.spec import build_agent
from ibrl_bench.domains import get_domain
from ibrl_bench.runner.episode import play_episode

GAME = get_domain("dealnodeal")


class Recorder:
    """A blocking batch function that doubles its inputs and remembers every batch it saw."""

    def __init__(self, delay: float = 0.0, fail_on: int | None = None):
        self.batches: list[list[int]] = []
        self.threads: set[str] = set()
        self.delay = delay
        self.fail_on = fail_on

    def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)
        if self.fail_on is not None and self.fail_on in items:
            raise RuntimeError(f"model failed on {self.fail_on}")
        return [2 * x for x in items]


def test_concurrent_requests_are_gathered_and_each_gets_its_own_result():
    run = Recorder(delay=0.02)
    batcher = Batcher(run, max_batch=4, window_s=0.05)

    async def main():
        return await asyncio.gather(*(batcher.submit(i) for i in range(10)))

    assert asyncio.run(main()) == [2 * i for i in range(10)]
    assert [len(b) for b in run.batches] == [4, 4, 2]
    assert sorted(x for b in run.batches for x in b) == list(range(10))
    assert threading.main_thread().name not in run.threads  # the blocking work ran off the event loop
    assert (batcher.stats.batches, batcher.stats.requests, batcher.stats.largest) == (3, 10, 4)


def test_the_window_waits_for_stragglers_but_not_forever():
    run = Recorder()

    async def staggered(window_s: float):
        batcher = Batcher(run, max_batch=16, window_s=window_s)

        async def late(i):
            await asyncio.sleep(0.01 * i)
            return await batcher.submit(i)

        return await asyncio.gather(*(late(i) for i in range(4)))

    asyncio.run(staggered(window_s=0.3))
    assert run.batches == [[0, 1, 2, 3]]
    run.batches.clear()
    asyncio.run(staggered(window_s=0.0))
    assert len(run.batches) == 4


def test_the_event_loop_keeps_running_while_a_batch_computes():
    batcher = Batcher(Recorder(delay=0.3), max_batch=2, window_s=0.0)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        t = asyncio.create_task(ticker())
        await batcher.submit(1)
        t.cancel()
        return ticks

    assert asyncio.run(main()) >= 10


def test_a_failing_batch_fails_its_requests_and_the_batcher_serves_on():
    run = Recorder(fail_on=3)
    batcher = Batcher(run, max_batch=4, window_s=0.05)

    async def main():
        first = await asyncio.gather(*(batcher.submit(i) for i in range(4)), return_exceptions=True)
        second = await batcher.submit(10)
        return first, second

    first, second = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) and "failed on 3" in str(r) for r in first)
    assert second == 20


def test_a_request_whose_episode_gave_up_is_not_computed():
    run = Recorder()
    batcher = Batcher(run, max_batch=8, window_s=0.1)

    async def main():
        doomed = asyncio.create_task(batcher.submit(99))
        await asyncio.sleep(0)
        doomed.cancel()
        return await asyncio.gather(batcher.submit(1), batcher.submit(2))

    assert asyncio.run(main()) == [2, 4]
    assert run.batches == [[1, 2]]


def test_one_batcher_serves_successive_event_loops_and_closes_cleanly():
    batcher = Batcher(Recorder(), max_batch=2, window_s=0.0)

    async def main(x):
        result = await batcher.submit(x)
        await batcher.aclose()
        return result

    assert asyncio.run(main(1)) == 2
    assert asyncio.run(main(2)) == 4


def test_closing_cancels_waiting_requests():
    batcher = Batcher(Recorder(), max_batch=2, window_s=10.0)

    async def main():
        waiting = asyncio.create_task(batcher.submit(1))
        await asyncio.sleep(0.01)
        await batcher.aclose()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        Batcher(Recorder(), max_batch=0, window_s=0.0)


class QueuedScripted(Agent):
    """A scripted negotiator whose every move first waits for a batch of `batcher`: a stand-in
    for a local model shared by many episodes, with the fake batch function's speed."""

    def __init__(self, batcher: Batcher, name: str):
        self.batcher = batcher
        self.inner = build_agent(f"scripted:dealnodeal/{name}", "dealnodeal").agent

    async def act(self, obs):
        await self.batcher.submit(0)
        return await self.inner.act(obs)


def test_time_queued_behind_other_episodes_batches_does_not_count_toward_the_move_timeout():
    # 24 episodes x 2 moves in flight, 2 per batch, 0.05 s a batch: a move waits up to ~1.2 s in
    # the queue, four times the timeout, while each batch takes a sixth of it.
    run = Recorder(delay=0.05)
    batcher = Batcher(run, max_batch=2, window_s=0.0)
    agents = {"a": QueuedScripted(batcher, "fair"), "b": QueuedScripted(batcher, "conceder")}
    scenarios = GAME.scenario_set("dev", 24).scenarios

    async def main():
        started = time.perf_counter()
        results = await asyncio.gather(*(play_episode(GAME, s, agents, seed=0, max_turns=4, move_timeout=0.3)
                                         for s in scenarios))
        return results, time.perf_counter() - started

    results, elapsed = asyncio.run(main())
    assert all(r.state.over for r in results)
    assert elapsed > 0.6, "the queue was long enough to outlast the timeout"


def test_a_hung_batch_still_times_out_its_moves_and_those_queued_behind_it():
    release = threading.Event()
    batcher = Batcher(lambda items: release.wait(30) and items, max_batch=2, window_s=0.0)
    agents = {"a": QueuedScripted(batcher, "fair"), "b": QueuedScripted(batcher, "conceder")}
    scenarios = GAME.scenario_set("dev", 4).scenarios

    async def main():
        try:
            return await asyncio.wait_for(asyncio.gather(
                *(play_episode(GAME, s, agents, seed=0, max_turns=4, move_timeout=0.2) for s in scenarios),
                return_exceptions=True), 10)
        finally:
            release.set()  # free the worker thread so the test's event loop can close
            await batcher.aclose()

    started = time.perf_counter()
    outcomes = asyncio.run(main())
    assert all(isinstance(o, TimeoutError) for o in outcomes), outcomes
    assert time.perf_counter() - started < 5
