"""The one interface for everything that speaks in a dialogue.

An agent is shared by many concurrent episodes (a batched local model, a rate-limited endpoint),
so `act` takes the whole observation and keeps no per-episode state of its own: anything it needs
(its role, private information, the dialogue, the episode seed) is in the observation.
"""

from __future__ import annotations

import asyncio
import contextvars
from abc import ABC, abstractmethod

from pydantic import BaseModel

from ibrl_bench.domains.base import Observation


class Usage(BaseModel):
    """Tokens and cost of paid model calls, and apart from them the replies served from the
    response cache (runner/cache.py), which cost nothing: `cost_usd` is what was paid."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0  # paid model calls (counted by the runner; 0 where it did not meter the seat)
    cache_hits: int = 0  # replies served from the response cache
    cached_tokens: int = 0  # prompt + completion tokens of those replies, not paid again
    saved_usd: float = 0.0  # what those replies cost when they were first paid for

    def add(self, other: Usage) -> None:
        for name in type(self).model_fields:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class Trace(BaseModel):
    """What a local model saw and generated for one move, token for token (for the trainers).

    `prompt_ids`: the exact ids fed to the model (chat template applied, cut to its context, no
    padding). `completion_ids`: the ids it generated, up to and including its end-of-sequence
    token when it wrote one. `logprobs`: the log-probability of each generated id under the
    distribution it was drawn from (logits / temperature, then top-p; temperature 1 when greedy).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]


class Reply(BaseModel):
    text: str
    usage: Usage | None = None
    trace: Trace | None = None  # set only by agents asked to trace (agents/hf_local.py)


class Agent(ABC):
    """Produces the next message of one role. Implementations must be safe to call concurrently."""

    @abstractmethod
    async def act(self, obs: Observation) -> Reply: ...

    async def reask(self, obs: Observation, recorded: str) -> str:
        """What the agent says at `obs`, asked by a verifier that holds the move `recorded` there.
        A deterministic backend may confirm `recorded` without producing it (an `hf:` model scores
        it in one forward pass: agents/hf_local.py); whatever it cannot confirm is what `act` says."""
        return (await self.act(obs)).text

    async def aclose(self) -> None:
        """Release connections, engines, threads. Called once when a run ends."""
        return None  # a concrete default: agents that hold nothing need not override it


class MoveClock:
    """The clock of one move's timeout, which an agent may restart while the move waits its turn.

    The runner times every move (runner/episode.py). A local model shared by many episodes serves
    their moves one batch at a time, so a move can spend minutes queued behind other episodes'
    batches while the model is working fine; that wait is not the model failing on this move. An
    agent that queues (agents/batching.py) therefore calls `restart` whenever the queue it waits in
    makes progress (a batch starts), and when the move's own batch starts. The timeout then fires
    only when the move waited `timeout` seconds without any batch starting, or its own batch ran
    longer than that: a hung model still ends the move, a busy one does not.
    """

    def __init__(self) -> None:
        self.started = asyncio.get_running_loop().time()

    def restart(self) -> None:
        self.started = asyncio.get_running_loop().time()


# The clock of the move being played in this task (set by the runner around `Agent.act`).
current_move_clock: contextvars.ContextVar[MoveClock | None] = contextvars.ContextVar("move_clock", default=None)
