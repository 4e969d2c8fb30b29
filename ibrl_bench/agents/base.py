"""The one interface for everything that speaks in a dialogue.

An agent is shared by many concurrent episodes (a batched local model, a rate-limited endpoint),
so `act` takes the whole observation and keeps no per-episode state of its own: anything it needs
(its role, private information, the dialogue, the episode seed) is in the observation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from pydantic import BaseModel

from ibrl_bench.domains.base import Observation


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


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

    spec: str = ""

    @abstractmethod
    async def act(self, obs: Observation) -> Reply: ...

    async def aclose(self) -> None:
        """Release connections, engines, threads. Called once when a run ends."""
