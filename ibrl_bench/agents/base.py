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


class Reply(BaseModel):
    text: str
    usage: Usage | None = None


class Agent(ABC):
    """Produces the next message of one role. Implementations must be safe to call concurrently."""

    spec: str = ""

    @abstractmethod
    async def act(self, obs: Observation) -> Reply: ...

    async def aclose(self) -> None:
        """Release connections, engines, threads. Called once when a run ends."""
