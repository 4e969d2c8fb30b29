"""A guard against an agent that blocks the event loop.

The move timeout (runner/episode.py) is enforced by the event loop, so it cannot fire while an
agent holds the loop with synchronous work (`time.sleep`, a blocking HTTP call, a long computation
inside `async def act`). A thread beside the loop watches a heartbeat the loop sends every
`interval` seconds; when the loop has been silent for longer than the move timeout plus a slack,
and the code holding it is inside an agent's `act`, the process stops with one line naming that
agent. Finished episodes are already on disk (store.py), so the same command resumes the run once
the agent is fixed. A stall outside any agent (reading a large run log) is left alone.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

from ibrl_bench.agents.base import Agent
from ibrl_bench.secrets import scrub

SLACK = 2.0  # seconds past the move timeout before a silent loop counts as blocked
EXIT_CODE = 3


def stop_process(message: str) -> None:
    sys.stderr.write(f"error: {scrub(message)}\n")
    sys.stderr.flush()
    os._exit(EXIT_CODE)  # the loop's thread is stuck in the agent: nothing else can end it


def blocking_agent(thread_id: int) -> str | None:
    """The name of the outermost agent whose `act` is on the stack of thread `thread_id` right now:
    the name the dialogue loop gave it (runner/episode.py `_act`), else its class name."""
    from ibrl_bench.runner.episode import _act

    frame: FrameType | None = sys._current_frames().get(thread_id)
    found = name = None
    while frame is not None:
        if frame.f_code.co_name == "act":
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, Agent):
                found, name = candidate, None
        elif frame.f_code is _act.__code__ and found is not None:
            name = frame.f_locals.get("name")
        frame = frame.f_back
    return None if found is None else name or type(found).__name__


class LoopWatchdog:
    """`async with LoopWatchdog(move_timeout):` around the part of a run that plays moves;
    `on_block(message)` is called from the watchdog's thread and must end the process."""

    def __init__(self, move_timeout: float | None,
                 on_block: Callable[[str], None] = stop_process, slack: float = SLACK):
        self.move_timeout = move_timeout
        self.limit = None if move_timeout is None else move_timeout + slack
        self.on_block = on_block
        self.interval = 0.1 if self.limit is None else min(0.1, self.limit / 10)
        self._beat = time.monotonic()
        self._stopped = threading.Event()

    async def __aenter__(self) -> LoopWatchdog:
        if self.limit is None:
            return self
        loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

        def beat() -> None:
            self._beat = time.monotonic()
            if not self._stopped.is_set():
                self._handle = loop.call_later(self.interval, beat)

        beat()
        self._thread = threading.Thread(target=self._watch, name="ibrl-loop-watchdog", daemon=True)
        self._thread.start()
        return self

    async def __aexit__(self, *exc) -> None:
        if self.limit is None:
            return
        self._stopped.set()
        self._handle.cancel()
        self._thread.join()

    def _watch(self) -> None:
        assert self.limit is not None
        while not self._stopped.wait(self.interval):
            silent = time.monotonic() - self._beat
            if silent <= self.limit:
                continue
            name = blocking_agent(self._loop_thread)
            if name is None:
                continue
            self.on_block(
                f"{name} blocked the event loop for {silent:.1f} s inside act (synchronous work such as "
                f"time.sleep or a blocking call), past the move timeout of {self.move_timeout:g} s; make act "
                "await instead (asyncio.sleep, asyncio.to_thread)")
            return
