"""Deal-or-NoDeal rules: scenario constraints, splits, protocol, scoring and Pareto optimality."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ibrl_bench.domains.dealnodeal import scenarios as sc
from ibrl_bench.domains.dealnodeal.game import DealOrNoDeal
from ibrl_bench.domains.dealnodeal.rules import (
    all_splits,
    complement,
    dot,
    is_agreement,
    is_pareto_optimal,
    valid_pair,
)
from ibrl_bench.errors import UserError

GAME = DealOrNoDeal()
ALL = [s for split in sc.SPLITS for s in sc.scenario_set(split).scenarios]


def check_constraints(s) -> None:
    counts = tuple(s.data["counts"])
    va, vb = (tuple(s.data["values"][r]) for r in ("a", "b"))
    assert all(1 <= c <= 4 for c in counts)
    assert 5 <= sum(counts) <= 7
    for v in (va, vb):
        assert all(isinstance(x, int) and x >= 0 for x in v)
        assert dot(counts, v) == 10
        assert sum(x == 0 for x in v) <= 2
    assert all(x > 0 or y > 0 for x, y in zip(va, vb, strict=True)), "every item worth something to someone"
    assert any(x > 0 and y > 0 for x, y in zip(va, vb, strict=True)), "one item worth something to both"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ALL))
def test_every_generated_scenario_obeys_the_rules(s):
    check_constraints(s)


def test_splits_are_disjoint_by_content_including_swapped_sides():
    seen: dict[tuple, str] = {}
    for split in sc.SPLITS:
        for s in sc.scenario_set(split).scenarios:
            counts = tuple(s.data["counts"])
            pair = tuple(sorted([tuple(s.data["values"]["a"]), tuple(s.data["values"]["b"])]))
            key = (counts, pair)
            assert key not in seen, f"{s.id} in {split} and {seen[key]}"
            seen[key] = split
    sizes = {split: len(sc.scenario_set(split).scenarios) for split in sc.SPLITS}
    assert sizes["test"] > 400 and sizes["dev"] > 200 and sizes["train"] > 1500


def test_scenario_sets_are_versioned_hashed_and_stable():
    full = sc.scenario_set("test")
    head = sc.scenario_set("test", 20)
    assert head.scenarios == full.scenarios[:20]
    assert head.hash != full.hash
    assert sc.scenario_set("test", 20).hash == head.hash
    assert sc.scenario_set("dev", 20).hash != head.hash
    # Content hash: changing one value changes the scenario hash.
    s = head.scenarios[0]
    edited = s.model_copy(update={"data": {**s.data, "counts": [9, 9, 9]}})
    assert edited.hash != s.hash


def test_unknown_split_and_bad_size_are_user_errors():
    with pytest.raises(UserError, match="unknown split"):
        sc.scenario_set("validation")
    with pytest.raises(UserError, match="at least 1"):
        sc.scenario_set("test", 0)


def test_valid_pair_rejects_each_broken_constraint():
    assert valid_pair((1, 2, 3), (4, 0, 2), (0, 2, 2))
    assert not valid_pair((1, 2, 3), (4, 0, 2), (10, 0, 0))  # hats worth 0 to both sides
    assert not valid_pair((1, 2, 3), (4, 0, 2), (0, 0, 0))  # worth 0 in total
    assert not valid_pair((1, 2, 3), (4, 0, 2), (0, 5, 0))  # no item worth something to both
    assert not valid_pair((1, 1, 1), (4, 3, 3), (4, 3, 3))  # 3 items: too few
    assert not valid_pair((5, 1, 1), (1, 3, 2), (1, 3, 2))  # a count above 4


def test_lewis_loader_reads_pairs_and_rejects_bad_files(tmp_path):
    good = tmp_path / "ctx.txt"
    good.write_text("# comment\n1 4 4 1 1 2\n1 0 4 2 1 2\n\n3 2 1 1 1 3\n3 0 1 4 1 6\n")
    ss = sc.load_lewis_contexts(good)
    assert len(ss.scenarios) == 2
    assert ss.scenarios[0].data == {"counts": [1, 4, 1], "values": {"a": [4, 1, 2], "b": [0, 2, 2]}}
    assert ss.split == "file:ctx.txt" and ss.hash
    for text, match in [
        ("1 4 4 1 1 2\n", "odd number"),
        ("1 4 4 1 1\n1 0 4 2 1 2\n", r"ctx.txt:1: expected six integers"),
        ("1 4 4 1 1 2\n2 0 4 2 1 2\n", "different item counts"),
        ("1 4 4 1 1 2\n1 4 4 1 1 3\n", "not a valid Deal-or-NoDeal game"),
        ("", "no contexts"),
    ]:
        good.write_text(text)
        with pytest.raises(UserError, match=match):
            sc.load_lewis_contexts(good)
    with pytest.raises(UserError, match="cannot read"):
        sc.load_lewis_contexts(tmp_path / "missing.txt")


def test_pareto_optimality_by_brute_force():
    counts, va, vb = (1, 2, 3), (4, 0, 2), (0, 2, 2)
    # a takes the book and the balls, b takes the hats: a=10, b=4; giving b a ball makes a worse.
    assert is_pareto_optimal(counts, va, vb, (1, 0, 3))
    # a takes everything: a=10, b=0; moving the hats (worth 0 to a) to b helps b, costs a nothing.
    assert not is_pareto_optimal(counts, va, vb, (1, 2, 3))
    # Checked against an independent enumeration on many scenarios.
    for s in sc.scenario_set("dev", 40).scenarios:
        c = tuple(s.data["counts"])
        a = tuple(s.data["values"]["a"])
        b = tuple(s.data["values"]["b"])
        points = [(dot(a, t), dot(b, complement(c, t))) for t in all_splits(c)]
        for t in all_splits(c):
            ua, ub = dot(a, t), dot(b, complement(c, t))
            dominated = any(x >= ua and y >= ub and (x, y) != (ua, ub) for x, y in points)
            assert is_pareto_optimal(c, a, b, t) == (not dominated)


def play(texts, scenario=None, seed=0, max_turns=None):
    """Drive the game with scripted texts: talk messages in order, then {role: split text}."""
    scenario = scenario or sc.make_scenario((1, 2, 3), (4, 0, 2), (0, 2, 2))
    state = GAME.start(scenario, seed, max_turns)
    talk, splits = texts
    for text in talk:
        (role,) = GAME.to_move(state)
        GAME.apply(state, role, text)
        if state.over or state.phase != "talk":
            break
    if not state.over:
        assert state.phase == "select"
        assert sorted(GAME.to_move(state)) == ["a", "b"]
        for role in ("a", "b"):
            GAME.apply(state, role, splits[role])
    return state, GAME.outcome(state)


def test_agreement_scores_each_side_by_its_own_values():
    state, out = play((["hello", "deal <selection>"], {"a": "<split>book=1 hat=0 ball=3</split>",
                                                         "b": "<split>book=0 hat=2 ball=0</split>"}))
    assert out.status == "ok" and out.agreement and out.success
    assert out.rewards == {"a": 10.0, "b": 4.0}
    assert out.metrics["pareto_optimal"] is True
    assert out.turns == 2


def test_splits_that_do_not_add_up_score_zero_for_both():
    _, out = play((["<selection>"], {"a": "<split>book=1 hat=0 ball=3</split>",
                                     "b": "<split>book=0 hat=2 ball=1</split>"}))
    assert not out.agreement and out.rewards == {"a": 0.0, "b": 0.0} and out.status == "ok"


def test_no_deal_is_valid_and_scores_zero():
    _, out = play((["<selection>"], {"a": "<split>no deal</split>", "b": "<split>book=0 hat=2 ball=0</split>"}))
    assert out.status == "ok" and not out.agreement and out.rewards == {"a": 0.0, "b": 0.0}


def test_unreadable_split_is_a_violation_of_that_side():
    _, out = play((["<selection>"], {"a": "<split>book=-1</split>", "b": "<split>book=0 hat=2 ball=0</split>"}))
    assert out.status == "invalid" and out.violators == ["a"] and out.rewards == {"a": 0.0, "b": 0.0}


def test_empty_message_is_a_violation_and_ends_the_episode():
    state, out = play(([" "], {}))
    assert state.over and out.status == "invalid" and len(out.violators) == 1


def test_turn_limit_ends_talk_then_splits_still_count():
    state, out = play((["hi"] * 20, {"a": "<split>book=1 hat=0 ball=3</split>",
                                     "b": "<split>book=0 hat=2 ball=0</split>"}), max_turns=4)
    assert out.status == "max_turns" and out.turns == 4 and out.agreement


def test_default_limit_is_ten_messages():
    _, out = play((["hi"] * 20, {"a": "<split>no deal</split>", "b": "<split>no deal</split>"}))
    assert out.turns == 10 and out.status == "max_turns"


def test_the_opener_is_seeded_and_the_same_across_calls():
    s = sc.scenario_set("test", 1).scenarios[0]
    openers = [GAME.start(s, seed, None).starter for seed in range(40)]
    assert set(openers) == {"a", "b"}
    assert openers == [GAME.start(s, seed, None).starter for seed in range(40)]


def test_observations_hide_the_other_sides_values_and_split():
    scenario = sc.make_scenario((1, 2, 3), (4, 0, 2), (0, 2, 2))
    state = GAME.start(scenario, 0, None)
    (role,) = GAME.to_move(state)
    GAME.apply(state, role, "<selection>")
    obs_a, obs_b = GAME.observe(state, "a"), GAME.observe(state, "b")
    assert obs_a.private["values"] == [4, 0, 2] and obs_b.private["values"] == [0, 2, 2]
    assert "0, 2, 2" not in obs_a.model_dump_json().replace("[0,2,2]", "x")
    GAME.apply(state, "a", "<split>book=1 hat=0 ball=3</split>")
    obs_b = GAME.observe(state, "b")
    assert all("split" not in m.text for m in obs_b.dialogue), "a's private split leaked to b"


def test_a_role_cannot_move_out_of_turn():
    state = GAME.start(sc.make_scenario((1, 2, 3), (4, 0, 2), (0, 2, 2)), 0, None)
    (role,) = GAME.to_move(state)
    with pytest.raises(ValueError):
        GAME.apply(state, GAME.other(role), "hi")


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(ALL[:300]), st.data())
def test_any_complementary_pair_of_splits_agrees_and_scores_correctly(s, data):
    counts = tuple(s.data["counts"])
    take_a = tuple(data.draw(st.integers(0, c)) for c in counts)
    take_b = complement(counts, take_a)
    fmt = lambda t: f"<split>book={t[0]} hat={t[1]} ball={t[2]}</split>"  # noqa: E731
    _, out = play((["<selection>"], {"a": fmt(take_a), "b": fmt(take_b)}), scenario=s)
    assert out.agreement and is_agreement(counts, take_a, take_b)
    assert out.rewards["a"] == dot(tuple(s.data["values"]["a"]), take_a)
    assert out.rewards["b"] == dot(tuple(s.data["values"]["b"]), take_b)
