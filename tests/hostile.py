"""Broken agents and factories for the hostile-input tests, loaded as `python:hostile:NAME`."""

from __future__ import annotations

import asyncio
import time

from ibrl_bench.agents.base import Agent, Reply
from ibrl_bench.agents.spec import build_agent


def _raising(exc: BaseException):
    def factory(**kw):
        raise exc

    return factory


factory_value_error = _raising(ValueError("bad model path"))
factory_runtime_error = _raising(RuntimeError("CUDA not available\nsecond line of detail"))
factory_system_exit = _raising(SystemExit(3))
factory_cancelled = _raising(asyncio.CancelledError())
factory_zero_division = _raising(ZeroDivisionError("division by zero"))
factory_key_error = _raising(KeyError("weights"))
factory_os_error = _raising(FileNotFoundError(2, "No such file or directory", "/models/x"))
factory_recursion = _raising(RecursionError("maximum recursion depth exceeded"))
factory_empty_message = _raising(Exception())


def factory_none(**kw):
    return None


def factory_sync_act(**kw):
    class SyncAct:
        def act(self, obs):
            return Reply(text="hi")

    return SyncAct()


class _Raises(Agent):
    exc: BaseException = RuntimeError()

    async def act(self, obs):
        raise self.exc


class ActSystemExit(_Raises):
    exc = SystemExit(0)


class ActKeyboardInterrupt(_Raises):
    exc = KeyboardInterrupt()


class ActCancelled(_Raises):
    exc = asyncio.CancelledError()


class ActGeneratorExit(_Raises):
    exc = GeneratorExit()


class ActReturnsText(Agent):
    async def act(self, obs):
        return "a bare string"


class ActReturnsNone(Agent):
    async def act(self, obs):
        return None


class Blocking(Agent):
    """Blocks the event loop inside act, as a synchronous call would."""

    def __init__(self, seconds: float = 3600):
        self.seconds = seconds

    async def act(self, obs):
        time.sleep(self.seconds)
        return Reply(text="too late")


class FailButFirstHangs(Agent):
    """Hangs on the first scenario's moves and fails every other at once: a run stopped for its
    errors has an episode in flight."""

    def __init__(self, hang_on: str = ""):
        self.hang_on = hang_on
        self.inner = build_agent("scripted:dealnodeal/fair", "dealnodeal").agent

    async def act(self, obs):
        if obs.scenario_id == self.hang_on:
            await asyncio.sleep(3600)
        raise ConnectionError("simulated: endpoint down")
