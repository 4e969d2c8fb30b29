"""Replaying a recorded episode through the domain's rules, to check that its outcome follows
from its transcript.

The recorded messages are fed to a fresh game (`domain.start` with the episode's scenario and
seed, then `domain.apply` turn by turn, in the order the runner applied them); the domain's own
reading of each move and the outcome must come out as recorded. Seats played by deterministic
agents (scripted ones) are asked again for every move they made: a counterpart swapped for an
easier one, or a transcript edited on its side, no longer matches what the agent says.
"""

from __future__ import annotations

from collections.abc import Mapping

from ibrl_bench.agents.base import Agent
from ibrl_bench.domains.base import Domain, Scenario
from ibrl_bench.runner.store import EpisodeRecord


def _differences(recorded: dict, replayed: dict, prefix: str) -> list[str]:
    return [f"{prefix}{k}: recorded {recorded.get(k)!r}, replay gives {replayed.get(k)!r}"
            for k in sorted(set(recorded) | set(replayed)) if recorded.get(k) != replayed.get(k)]


async def replay(domain: Domain, scenario: Scenario, record: EpisodeRecord, max_turns: int,
                 agents: Mapping[str, Agent]) -> str | None:
    """The first way the episode departs from the rules (or from a re-asked agent), or None.
    `agents` holds the deterministic agents to re-ask, by role."""
    state = domain.start(scenario, record.seed, max_turns)
    if record.starter is not None and state.starter != record.starter:
        return f"starter: recorded {record.starter}, the rules give {state.starter}"
    turns = list(record.transcript)
    i = 0
    while not state.over:
        movers = domain.to_move(state)
        group = turns[i:i + len(movers)]
        if len(group) < len(movers):
            return f"the transcript ends after {i} moves, but the game is not over ({', '.join(movers)} to move)"
        if sorted(t.role for t in group) != sorted(movers):
            return (f"move {i + 1} is by {', '.join(t.role for t in group)}, "
                    f"but the rules have {', '.join(movers)} to move")
        # Observe every mover before applying any move, as the dialogue loop does.
        observations = {role: domain.observe(state, role) for role in movers if role in agents}
        for turn in group:
            if turn.role in observations:
                said = (await agents[turn.role].act(observations[turn.role])).text
                if said != turn.text:
                    return (f"move {i + 1} ({turn.role}, {record.agents.get(turn.role)}): recorded {turn.text[:60]!r}, "
                            f"the agent says {said[:60]!r}")
            domain.apply(state, turn.role, turn.text)
            i += 1
    if i < len(turns):
        return f"the transcript goes on for {len(turns) - i} moves after the game is over"
    for n, (got, rec) in enumerate(zip(state.transcript, turns), 1):
        diff = _differences(rec.model_dump(mode="json"), got.model_dump(mode="json"), f"move {n} ")
        if diff:
            return diff[0]
    diff = _differences(record.outcome.model_dump(mode="json"), domain.outcome(state).model_dump(mode="json"),
                        "outcome ")
    return diff[0] if diff else None
