"""Seats and defaults resolved from the panel YAML (runner/matrix.py), not from tables in the CLI."""

import pytest

from ibrl_bench.errors import UserError
from ibrl_bench.runner.matrix import heldout_panel, resolve_episode, resolve_matrix, scripted_players


def test_the_heldout_panel_is_the_offline_panel_that_does_not_claim_the_role():
    assert heldout_panel("telesales", "seller") == "telesales-buyers-heldout"
    assert heldout_panel("telesales", "buyer") == "telesales-sellers-heldout"
    assert heldout_panel("dealnodeal", "a") == heldout_panel("dealnodeal", "b") == "dealnodeal-scripted-heldout"


def test_a_roles_scripted_players_are_the_panel_that_plays_it():
    assert scripted_players("telesales", "seller")[0] == "scripted:telesales/consultative"
    assert all(s.startswith("scripted:telesales/") for s in scripted_players("telesales", "buyer"))
    assert "scripted:telesales/hurried" in scripted_players("telesales", "buyer")


def test_the_demo_and_the_roles_a_panel_leaves_to_the_policy():
    demo = resolve_matrix("telesales", [], [], [], ["buyer"])
    assert demo.demo == "demo: 4 scripted policies x panel telesales-sellers-heldout"
    assert demo.config.roles == ["buyer"] and "scripted:telesales/hurried" in demo.config.policies
    named = resolve_matrix("telesales", ["scripted:telesales/consultative"], [], ["telesales-buyers-heldout"], [])
    assert named.demo is None and named.config.roles == ["seller"]  # the panel plays the buyers
    with pytest.raises(UserError, match="no counterpart given"):
        resolve_matrix("dealnodeal", ["scripted:dealnodeal/fair"], [], [], [])


def test_play_picks_a_scripted_pair_and_a_scenario_by_index_or_id():
    pairing = resolve_episode("telesales", None, None, "buyer", "test", "1")
    assert (pairing.policy, pairing.counterpart) == ("scripted:telesales/friendly", "scripted:telesales/consultative")
    again = resolve_episode("telesales", None, None, "buyer", "test", pairing.scenario.id)
    assert again.scenario == pairing.scenario
    with pytest.raises(UserError, match="out of range"):
        resolve_episode("dealnodeal", None, None, None, "test", "100000")
