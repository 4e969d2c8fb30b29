"""In-process agents for measuring the harness itself."""

from __future__ import annotations

from ibrl_bench.agents.base import Agent, Reply
from ibrl_bench.domains.base import Observation


class Instant(Agent):
    """Answers at once with a fixed legal move: talk until the limit, then decline a deal. Every
    episode therefore runs the full turn limit, the worst case for the harness's per-move work."""

    async def act(self, obs: Observation) -> Reply:
        if obs.phase == "talk":
            return Reply(text="How about I take the books? <propose>book=1 hat=0 ball=0</propose>")
        return Reply(text="<split>no deal</split>")
