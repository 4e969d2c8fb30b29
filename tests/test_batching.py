"""The batcher that the local-model backends share: gathering, routing, failures, cancellation."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ibrl_bench.agents.batching import Batcher


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
