"""Gather requests from concurrently running episodes into batches for one blocking function.

A local model is fastest when it decodes many prompts at once, but each episode asks for one
move at a time. `Batcher.submit` puts a request in a queue and awaits its result; one batcher task
takes up to `max_batch` requests, waiting for more to join until none has come for `window_s`,
and runs the blocking function on the whole batch in a worker thread, so the event loop keeps
serving the other episodes (and collecting the next batch) meanwhile. One batch runs
at a time per batcher: a model on one device gains nothing from two.

An exception from the function fails every request of that batch with that exception; the
runner treats it like any other infrastructure failure of the episodes concerned.

Time spent queued is not the model's fault: each time a batch starts, the move clocks of the
requests it takes and of those still waiting restart (agents/base.py, MoveClock), so the runner's
move timeout measures one batch's work, and still fires when no batch starts for that long.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ibrl_bench.agents.base import MoveClock, current_move_clock

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class BatchStats:
    """What a batcher has done; for tests and benchmarks."""

    batches: int = 0
    requests: int = 0
    largest: int = 0
    sizes: list[int] = field(default_factory=list)


@dataclass
class _Request(Generic[T, R]):
    item: T
    future: asyncio.Future[R]
    arrived: float
    clock: MoveClock | None = None


class Batcher(Generic[T, R]):
    def __init__(self, run: Callable[[list[T]], Sequence[R]], max_batch: int, window_s: float):
        if max_batch < 1 or window_s < 0:
            raise ValueError("max_batch must be >= 1 and window_s >= 0")
        self._run = run
        self.max_batch = max_batch
        self.window_s = window_s
        self.stats = BatchStats()
        # Bound to the event loop of the first request; a later loop (a second asyncio.run with
        # the same agent) gets a fresh queue and task, since asyncio objects belong to one loop.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending: deque[_Request[T, R]] = deque()
        self._arrived: asyncio.Event | None = None

    async def submit(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._task is None or self._task.done():
            self._start(loop)
        assert self._arrived is not None
        request: _Request[T, R] = _Request(item, loop.create_future(), loop.time(), current_move_clock.get())
        self._pending.append(request)
        self._arrived.set()
        return await request.future  # cancelling this await leaves the batch to skip the request

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._task is not None and self._loop is loop:
            self._task.cancel()
        self._loop = loop
        self._pending = deque(r for r in self._pending if r.future.get_loop() is loop and not r.future.done())
        self._arrived = asyncio.Event()
        self._task = loop.create_task(self._serve(), name="ibrl-bench batcher")

    async def _serve(self) -> None:
        assert self._loop is not None and self._arrived is not None
        loop, arrived = self._loop, self._arrived
        free_at = loop.time()
        while True:
            while not self._pending:
                arrived.clear()
                await arrived.wait()
            # Gather until the batch is full or no request came for `window_s`, counting from when
            # the model became free at the earliest. The episodes a batch just answered come back a
            # moment after it ends; cutting the next batch from the oldest request's arrival alone
            # takes only those that waited during the last batch, and the two groups then stay out
            # of step for good, every batch half full. The cap bounds a trickle of arrivals.
            cap = max(self._pending[0].arrived, free_at) + 10 * self.window_s
            while len(self._pending) < self.max_batch:
                quiet = max(self._pending[-1].arrived, free_at) + self.window_s
                left = min(quiet, cap) - loop.time()
                if left <= 0:
                    break
                arrived.clear()
                try:
                    await asyncio.wait_for(arrived.wait(), left)
                except TimeoutError:
                    break
            batch = [self._pending.popleft() for _ in range(min(self.max_batch, len(self._pending)))]
            batch = [r for r in batch if not r.future.done()]  # drop requests whose episode gave up
            if not batch:
                continue
            for r in (*batch, *self._pending):
                if r.clock is not None:
                    r.clock.restart()
            self.stats.batches += 1
            self.stats.requests += len(batch)
            self.stats.largest = max(self.stats.largest, len(batch))
            self.stats.sizes.append(len(batch))
            try:
                results = await asyncio.to_thread(self._run, [r.item for r in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"batch function returned {len(results)} results for {len(batch)} requests")
            except Exception as e:  # noqa: BLE001 - handed to every waiting episode, which raises it
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(e)
                continue
            except BaseException:  # the batcher itself is cancelled: nobody may wait forever
                for r in batch:
                    r.future.cancel()
                raise
            finally:
                free_at = loop.time()
            for r, result in zip(batch, results, strict=True):
                if not r.future.done():
                    r.future.set_result(result)

    async def aclose(self) -> None:
        """Stop the batcher task; requests still waiting are cancelled."""
        task, self._task = self._task, None
        if task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        while self._pending:
            request = self._pending.popleft()
            if not request.future.done() and not request.future.get_loop().is_closed():
                request.future.cancel()
        self._loop = None
