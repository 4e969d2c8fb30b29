"""Agents for tests, loaded through the plugin spec `python:plugins:FACTORY` (tests/ on the path)."""

from __future__ import annotations

import asyncio
import os
from collections import Counter

from ibrl_bench.agents.base import Agent, Reply
from ibrl_bench.agents.spec import build_agent
from ibrl_bench.errors import FatalAgentError


class Slow(Agent):
    """A scripted negotiator that waits before each move, so a run can be killed mid-flight."""

    def __init__(self, name: str = "boulware", delay: float = 0.01):
        self.inner = build_agent(f"scripted:dealnodeal/{name}", "dealnodeal").agent
        self.delay = delay

    async def act(self, obs):
        await asyncio.sleep(self.delay)
        return await self.inner.act(obs)


class Flaky(Agent):
    """Fails the first `fail` times it is asked to move in each episode, then plays normally.
    The count lives in the process, keyed by `tag`, so a resumed run in the same process sees it."""

    failures: Counter = Counter()

    def __init__(self, fail: int = 1, name: str = "conceder", tag: str = ""):
        self.inner = build_agent(f"scripted:dealnodeal/{name}", "dealnodeal").agent
        self.fail = fail
        self.tag = tag

    async def act(self, obs):
        key = (self.tag, obs.scenario_id, obs.seed, obs.role)
        if Flaky.failures[key] < self.fail:
            Flaky.failures[key] += 1
            raise ConnectionError("simulated dropped connection")
        return await self.inner.act(obs)


class Broken(Agent):
    """Always fails, like an endpoint that is down."""

    async def act(self, obs):
        raise ConnectionResetError("simulated: endpoint down")


class Hang(Agent):
    """Never answers."""

    async def act(self, obs):
        await asyncio.sleep(3600)
        return Reply(text="too late")


class BadKey(Agent):
    async def act(self, obs):
        raise FatalAgentError("the endpoint rejected the key in $FAKE_KEY (401); set a valid key")


class NotAnAgent:
    def act(self, obs):  # not async
        return "hi"


def make_slow(**kw):
    return Slow(**kw)


def die_after(n: int = 5):
    """An agent that kills its own process after n moves (used to test crash recovery)."""
    moves = {"n": 0}

    class Dier(Agent):
        async def act(self, obs):
            moves["n"] += 1
            if moves["n"] >= n:
                os._exit(9)
            return Reply(text="hello")

    return Dier()


class Spy(Agent):
    """Plays like a scripted agent and keeps every observation it was shown."""

    seen: list = []

    def __init__(self, name: str = "fair"):
        self.inner = build_agent(f"scripted:dealnodeal/{name}", "dealnodeal").agent

    async def act(self, obs):
        Spy.seen.append(obs)
        return await self.inner.act(obs)


class HangInSelect(Agent):
    """Talks normally, then never states its split: the other side's move must be cancelled too."""

    def __init__(self):
        self.inner = build_agent("scripted:dealnodeal/conceder", "dealnodeal").agent

    async def act(self, obs):
        if obs.phase == "select":
            await asyncio.sleep(3600)
        return await self.inner.act(obs)


class FailInSelect(Agent):
    def __init__(self):
        self.inner = build_agent("scripted:dealnodeal/conceder", "dealnodeal").agent

    async def act(self, obs):
        if obs.phase == "select":
            raise ConnectionError("simulated: dropped during the split")
        return await self.inner.act(obs)


def make_noted(folder: str, delay: float = 0.005):
    """A Slow agent that leaves a file named by its process id in `folder`: a test finds the worker
    processes of a run this way, to kill one."""
    open(os.path.join(folder, str(os.getpid())), "w").close()
    return Slow(delay=delay)
