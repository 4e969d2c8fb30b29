"""Replaying a recorded episode: the dialogue loop fed by a transcript instead of by agents.

The recorded messages are fed to a fresh game (`domain.start` with the episode's scenario and
seed, then `domain.apply` turn by turn, in the order the runner applied them). `replay_moves`
yields each group of simultaneous moves with the observation each mover had, observed before any
of them is applied, as `runner/episode.py` does; so a caller can re-ask an agent (leaderboard
verification) or learn to say the recorded message (SFT). When the game is over, the domain's
own reading of every move and its outcome must come out as recorded. The first departure raises
`ReplayMismatch`, saying where.

Used by the leaderboard's verification (`leaderboard/replay.py`) and by SFT (`train/sft.py`).
"""

from __future__ import annotations

from collections.abc import Iterator

from ibrl_bench.domains.base import Domain, Observation, Scenario, Turn
from ibrl_bench.runner.store import EpisodeRecord


class ReplayMismatch(Exception):
    """The domain, fed the recorded transcript, does not reach the recorded transcript or outcome."""


def replay_moves(domain: Domain, scenario: Scenario, record: EpisodeRecord,
                 max_turns: int) -> Iterator[list[tuple[Observation, Turn]]]:
    """Every group of simultaneous moves of `record`, each with its mover's observation; the
    group is applied when the caller asks for the next one. Raises ReplayMismatch."""
    state = domain.start(scenario, record.seed, max_turns)
    if record.starter is not None and state.starter != record.starter:
        raise ReplayMismatch(f"starter: recorded {record.starter}, the rules give {state.starter}")
    turns = list(record.transcript)
    i = 0
    while not state.over:
        movers = domain.to_move(state)
        group = turns[i:i + len(movers)]
        if len(group) < len(movers):
            raise ReplayMismatch(f"the transcript ends after {i} moves, but the game is not over "
                                 f"({', '.join(movers)} to move)")
        if sorted(t.role for t in group) != sorted(movers):
            raise ReplayMismatch(f"move {i + 1} is by {', '.join(t.role for t in group)}, "
                                 f"but the rules have {', '.join(movers)} to move")
        # Observe every mover before applying any move, as the dialogue loop does.
        observed = [(domain.observe(state, turn.role), turn) for turn in group]
        yield observed
        for _, turn in observed:
            domain.apply(state, turn.role, turn.text)
        i += len(group)
    if i < len(turns):
        raise ReplayMismatch(f"the transcript goes on for {len(turns) - i} moves after the game is over")
    for n, (got, rec) in enumerate(zip(state.transcript, turns, strict=False), 1):
        _raise_first(rec.model_dump(mode="json"), got.model_dump(mode="json"), f"move {n} ")
    _raise_first(record.outcome.model_dump(mode="json"), domain.outcome(state).model_dump(mode="json"), "outcome ")


def _raise_first(recorded: dict, replayed: dict, prefix: str) -> None:
    for k in sorted(set(recorded) | set(replayed)):
        if recorded.get(k) != replayed.get(k):
            raise ReplayMismatch(f"{prefix}{k}: recorded {recorded.get(k)!r}, replay gives {replayed.get(k)!r}")
