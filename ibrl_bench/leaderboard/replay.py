"""Replaying a recorded episode to check that its outcome follows from its transcript
(`runner/replay.py`), with the seats played by deterministic agents (scripted ones) asked again
for every move they made: a counterpart swapped for an easier one, or a transcript edited on its
side, no longer matches what the agent says.
"""

from __future__ import annotations

from collections.abc import Mapping

from ibrl_bench.agents.base import Agent
from ibrl_bench.domains.base import Domain, Scenario
from ibrl_bench.runner.replay import ReplayMismatch, replay_moves
from ibrl_bench.runner.store import EpisodeRecord


async def replay(domain: Domain, scenario: Scenario, record: EpisodeRecord, max_turns: int,
                 agents: Mapping[str, Agent]) -> str | None:
    """The first way the episode departs from the rules (or from a re-asked agent), or None.
    `agents` holds the deterministic agents to re-ask, by role."""
    n = 0  # moves so far
    try:
        for group in replay_moves(domain, scenario, record, max_turns):
            for obs, turn in group:
                n += 1
                if turn.role in agents:
                    said = await agents[turn.role].reask(obs, turn.text)
                    if said != turn.text:
                        return (f"move {n} ({turn.role}, {record.agents.get(turn.role)}): recorded "
                                f"{turn.text[:60]!r}, the agent says {said[:60]!r}")
    except ReplayMismatch as e:
        return str(e)
    return None
