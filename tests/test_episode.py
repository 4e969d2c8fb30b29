"""The one dialogue loop."""

from __future__ import annotations

import asyncio

import pytest

from ibrl_bench.agents.spec import build_agent
from ibrl_bench.domains import get_domain
from ibrl_bench.runner.episode import play_episode
from plugins import FailInSelect, HangInSelect

GAME = get_domain("dealnodeal")
SCENARIO = GAME.scenario_set("dev", 1).scenarios[0]


def test_an_episode_runs_to_an_outcome_with_usage_per_role():
    agents = {"a": build_agent("scripted:dealnodeal/fair", "dealnodeal").agent,
              "b": build_agent("scripted:dealnodeal/conceder", "dealnodeal").agent}
    result = asyncio.run(play_episode(GAME, SCENARIO, agents, seed=3))
    assert result.state.over and result.outcome.status in ("ok", "max_turns")
    public = [t for t in result.state.transcript if t.public]
    assert result.outcome.turns == len(public) and public[0].role == result.state.starter
    assert [t.role for t in result.state.transcript if not t.public] == ["a", "b"]
    assert set(result.usage()) == {"a", "b"}


def test_a_failing_simultaneous_move_cancels_the_other_one():
    async def main():
        agents = {"a": FailInSelect(), "b": HangInSelect()}
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(play_episode(GAME, SCENARIO, agents, seed=0, move_timeout=None), 10)
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    assert asyncio.run(main()) == []


def test_a_move_past_the_timeout_raises_timeout():
    async def main():
        agents = {"a": HangInSelect(), "b": build_agent("scripted:dealnodeal/fair", "dealnodeal").agent}
        await play_episode(GAME, SCENARIO, agents, seed=0, move_timeout=0.05)

    # The builtin TimeoutError (asyncio.TimeoutError is another class before Python 3.11).
    with pytest.raises(TimeoutError):
        asyncio.run(main())
