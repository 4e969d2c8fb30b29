"""Agent specs: the grammar, and the plugin form that lets users bring their own agent."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from ibrl_bench.agents.spec import build_agent, parse_spec
from ibrl_bench.domains import get_domain
from ibrl_bench.errors import UserError
from ibrl_bench.runner.episode import play_episode


def test_parse_kinds_targets_and_typed_params():
    s = parse_spec(" scripted:dealnodeal/boulware?beta=0.1&reservation=5&name=x&loud=true ")
    assert (s.kind, s.target) == ("scripted", "dealnodeal/boulware")
    assert s.params == {"beta": 0.1, "reservation": 5, "name": "x", "loud": True}
    assert s.text == "scripted:dealnodeal/boulware?beta=0.1&reservation=5&name=x&loud=true"
    assert parse_spec("openai:deepseek-chat@https://api.example/v1").target == "deepseek-chat@https://api.example/v1"
    assert parse_spec("python:pkg.mod:factory").target == "pkg.mod:factory"


@pytest.mark.parametrize("bad", ["", "boulware", "scripted:", ":x", "Scripted:x", "scripted:a b", "zzz:x"])
def test_malformed_specs_are_one_line_user_errors(bad):
    with pytest.raises(UserError) as e:
        parse_spec(bad)
    assert "\n" not in str(e.value)


def test_scripted_spec_with_or_without_domain_and_wrong_domain():
    assert build_agent("scripted:boulware", "dealnodeal").spec == "scripted:boulware"
    with pytest.raises(UserError, match="is an agent for telesales"):
        build_agent("scripted:telesales/pushy", "dealnodeal")
    with pytest.raises(UserError, match="unknown parameter 'nonsense' .*; valid parameters: beta: float"):
        build_agent("scripted:dealnodeal/boulware?nonsense=1", "dealnodeal")


def test_plugin_agents_play_through_the_same_loop():
    seat = build_agent("python:plugins:Spy?name=hardliner", "dealnodeal")
    assert seat.spec == "python:plugins:Spy?name=hardliner" and seat.card is None
    spy = seat.agent
    game = get_domain("dealnodeal")
    other = build_agent("scripted:dealnodeal/conceder", "dealnodeal").agent
    result = asyncio.run(play_episode(game, game.scenario_set("dev", 1).scenarios[0], {"a": spy, "b": other}, 0))
    assert result.outcome.status in ("ok", "max_turns")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("python:plugins", "expected python:package.module:factory"),
        ("python:no_such_module_xyz:f", "cannot import"),
        ("python:plugins:missing", "no callable 'missing'"),
        ("python:plugins:NotAnAgent", "async def act"),
        ("python:plugins:Slow?bogus=1", r"unknown parameter 'bogus' .*; valid parameters: name: str = 'boulware', "
                                        r"delay: float = 0.01"),
        pytest.param("hf:/models/x", "no model at", marks=pytest.mark.skipif(
            importlib.util.find_spec("torch") is None, reason="hf: specs are read by the [hf] extra (torch)")),
    ],
)
def test_plugin_and_reserved_spec_errors(spec, message):
    with pytest.raises(UserError, match=message):
        build_agent(spec, "dealnodeal")
