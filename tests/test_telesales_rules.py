"""TeleSales rules through the real protocol: every branch of the success rule, the rewards, the
turn protocol, statuses and metrics, and privacy of each role's brief."""

from __future__ import annotations

import asyncio
import json

import pytest

from ibrl_bench.agents.scripted.telesales import BUYERS, SELLERS
from ibrl_bench.domains import get_domain
from ibrl_bench.domains.telesales.catalog import load_catalog
from ibrl_bench.domains.telesales.models import Brief, Offer, Persona
from ibrl_bench.domains.telesales.rules import judge, missing_needs, sale_terms, willingness_to_pay
from ibrl_bench.domains.telesales.scenarios import make_scenario

GAME = get_domain("telesales")
CATALOG = load_catalog()

BRIEF = {
    "dealership": "Test Motors",
    "inventory": [
        {"vehicle": "arden-terra-le", "floor": 28_400},  # suv, awd, roof rails; list 31,500
        {"vehicle": "kestrel-nomad-s", "floor": 34_000},  # suv, awd; list 37,900
        {"vehicle": "arden-pico-s", "floor": 18_500},  # hatchback
        {"vehicle": "solano-costa-s", "floor": 25_000},  # suv without awd
    ],
    "incentives": [{"id": "extended_warranty", "cost": 800}],
}
PERSONA = {
    "budget": 31_000, "reservation": 30_000,
    "must_haves": {"bodies": ["suv"], "fuels": [], "min_seats": 0, "features": ["awd"]},
    "nice_to_haves": ["roof_rails", "sunroof"], "nice_bonus": 300,
    "incentive_values": {"extended_warranty": 1_500, "winter_tyres": 400},
    "price_sensitivity": 0.5, "patience": 5, "temperament": "friendly", "difficulty": "medium",
}
ROOM = 31_500 - 28_400  # list - floor of the Terra
WTP = 30_000 + 300  # reservation + one nice-to-have (roof rails)


def scenario(**buyer):
    return make_scenario({"catalog": CATALOG.ref, "seller": BRIEF, "buyer": {**PERSONA, **buyer}})


def play(*texts: str, max_turns: int | None = None, **buyer):
    """Apply messages in turn (the seller first) until the episode ends; return state and outcome."""
    state = GAME.start(scenario(**buyer), seed=0, max_turns=max_turns)
    for text in texts:
        if state.over:
            break
        GAME.apply(state, GAME.to_move(state)[0], text)
    return state, GAME.outcome(state)


def offer(vehicle: str, price: float, extras: str = "") -> str:
    tail = f" extras={extras}" if extras else ""
    return f"How about this one? <offer>vehicle={vehicle} price={price}{tail}</offer>"


def sold(*texts, **kw):
    state, out = play(*texts, **kw)
    assert out.status == "ok" and out.agreement and out.success, out.detail
    assert out.metrics["fell_through"] is False
    return out


def fell_through(*texts, **kw) -> str:
    state, out = play(*texts, **kw)
    assert out.status == "ok" and out.agreement and not out.success
    assert out.rewards == {"seller": 0.0, "buyer": 0.0}
    assert out.metrics["fell_through"] is True and out.metrics["price_share_of_list"] is None
    assert out.metrics["success_medium"] is False
    return out.detail


# --- the success rule, branch by branch ---------------------------------------------------------


def test_a_valid_sale_is_a_success_with_the_documented_rewards():
    out = sold(offer("arden-terra-le", 30_000), "Deal <accept>")
    assert out.rewards["seller"] == pytest.approx(0.5 * (1 + (30_000 - 28_400) / ROOM), abs=1e-6)
    assert out.rewards["buyer"] == pytest.approx((WTP - 30_000) / ROOM, abs=1e-6)
    m = out.metrics
    assert m["price_share_of_list"] == pytest.approx(30_000 / 31_500, abs=1e-6)
    assert m["seller_margin"] == pytest.approx(1_600 / 31_500, abs=1e-6)
    assert m["buyer_surplus"] == pytest.approx(300 / 31_500, abs=1e-6)
    assert m["success_medium"] is True and m["success_easy"] is None and m["success_hard"] is None
    assert m["turns"] == 2 and m["offers"] == 1 and m["invalid_offers"] == 0
    assert "sold arden-terra-le" in out.detail


def test_extras_cost_the_seller_and_are_worth_something_to_the_buyer():
    out = sold(offer("arden-terra-le", 30_500, "warranty"), "<accept>")
    assert out.rewards["seller"] == pytest.approx(0.5 * (1 + (30_500 - 28_400 - 800) / ROOM), abs=1e-6)
    assert out.rewards["buyer"] == pytest.approx((WTP + 1_500 - 30_500) / ROOM, abs=1e-6)


def test_extras_that_cost_more_than_the_price_clears_the_floor_lower_the_sellers_reward():
    out = sold(offer("arden-terra-le", 28_400, "extended_warranty"), "<accept>")
    assert out.rewards["seller"] == pytest.approx(0.5 * (1 - 800 / ROOM), abs=1e-6)
    assert out.metrics["seller_margin"] == pytest.approx(-800 / 31_500, abs=1e-6)


def test_the_boundaries_floor_and_budget_are_inclusive():
    at_floor = sold(offer("arden-terra-le", 28_400), "<accept>")
    assert at_floor.rewards["seller"] == 0.5
    at_budget = sold(offer("arden-terra-le", 31_000), "<accept>")
    assert at_budget.rewards["buyer"] == pytest.approx((WTP - 31_000) / ROOM, abs=1e-6)
    assert at_budget.rewards["buyer"] < 0  # a valid sale above what the car is worth to the buyer


def test_rewards_are_clipped():
    # A buyer with money to spare pays above list: the seller's reward stops at 1.
    out = sold(offer("arden-terra-le", 36_000), "<accept>", budget=40_000, reservation=39_000)
    assert out.rewards["seller"] == 1.0
    # Paying far above what the car is worth: the buyer's reward stops at -1.
    out = sold(offer("arden-terra-le", 39_000), "<accept>", budget=40_000, reservation=20_000)
    assert out.rewards["buyer"] == -1.0


@pytest.mark.parametrize("texts, reason", [
    ((offer("arden-terra-le", 28_399), "<accept>"), "below the floor"),
    ((offer("arden-terra-le", 30_000, "winter tyres"), "<accept>"), "extra winter_tyres is not available"),
    ((offer("norvik-e1-city", 26_000), "<accept>"), "not in the inventory"),
    ((offer("arden-pico-s", 19_000), "<accept>"), "body is hatchback, needs suv"),
    ((offer("solano-costa-s", 26_000), "<accept>"), "no all-wheel drive"),
    ((offer("arden-terra-le", 31_001), "<accept>"), "over the budget"),
    ((offer("kestrel-nomad-s", 34_500), "<accept>"), "over the budget"),
])
def test_an_accepted_offer_that_breaks_a_rule_falls_through(texts, reason):
    assert reason in fell_through(*texts)


def test_every_broken_rule_is_reported():
    detail = fell_through(offer("norvik-e1-city", 40_000, "winter_tyres"), "<accept>")
    for reason in ("not in the inventory", "winter_tyres is not available", "body is hatchback", "over the budget"):
        assert reason in detail


def test_judge_and_terms_directly():
    brief, persona = Brief.model_validate(BRIEF), Persona.model_validate(PERSONA)
    assert judge(Offer("arden-terra-le", 30_000), brief, persona, CATALOG).success
    verdict = judge(Offer("arden-pico-s", 40_000), brief, persona, CATALOG)
    assert not verdict.success and len(verdict.problems) == 3  # body, awd, budget
    terms = sale_terms(Offer("arden-terra-le", 30_000, ("extended_warranty",)), brief, persona, CATALOG)
    assert terms.buyer_reward == pytest.approx((WTP + 1_500 - 30_000) / ROOM)
    terra = CATALOG.vehicle("arden-terra-le")
    assert missing_needs(terra, persona.must_haves, CATALOG) == []
    assert willingness_to_pay(terra, persona.model_copy(update={"nice_bonus": 5_000})) == persona.budget


# --- the protocol -------------------------------------------------------------------------------


def test_leaving_ends_without_a_sale():
    state, out = play(offer("arden-terra-le", 31_000), "Too much. <leave>")
    assert state.over and out.status == "ok" and not out.agreement and not out.success
    assert out.metrics["buyer_left"] is True and out.metrics["fell_through"] is False
    assert out.rewards == {"seller": 0.0, "buyer": 0.0}


def test_the_turn_limit_ends_the_talk_and_is_configurable():
    assert GAME.default_max_turns == 20
    talk = ["Hello", "Hi"] * 20
    state, out = play(*talk)
    assert out.status == "max_turns" and out.turns == 20 and not out.agreement
    state, out = play(*talk, max_turns=6)
    assert out.status == "max_turns" and out.turns == 6
    # An acceptance on the very last message still counts.
    state, out = play("hi", "hello", offer("arden-terra-le", 30_000), "<accept>", max_turns=4)
    assert out.status == "ok" and out.success


def test_an_empty_message_is_a_protocol_violation():
    state, out = play(offer("arden-terra-le", 30_000), "   \n ")
    assert out.status == "invalid" and out.violators == ["buyer"] and not out.agreement
    assert "empty message" in out.detail and out.metrics["success_medium"] is False
    state, out = play("")
    assert out.status == "invalid" and out.violators == ["seller"] and out.turns == 1


def test_accepting_with_nothing_on_the_table_is_talk():
    state, out = play("Hello, what do you need?", "I <accept> nothing yet", offer("arden-terra-le", 30_000), "<accept>")
    assert state.transcript[1].parsed == {"act": "accept", "ignored": "no offer on the table"}
    assert out.success and out.turns == 4


def test_the_latest_offer_is_the_one_accepted():
    out = sold(offer("arden-terra-le", 31_000), "lower?", offer("arden-terra-le", 29_500), "ok <accept>")
    assert out.metrics["price_share_of_list"] == pytest.approx(29_500 / 31_500, abs=1e-6)
    assert out.metrics["offers"] == 2
    # Talk without an offer leaves the offer on the table.
    out = sold(offer("arden-terra-le", 29_900), "hmm", "It's a great car, trust me.", "<accept>")
    assert out.metrics["price_share_of_list"] == pytest.approx(29_900 / 31_500, abs=1e-6)


def test_a_malformed_offer_counts_as_invalid_and_clears_the_table():
    state, out = play(offer("arden-terra-le", 30_000), "lower?", "<offer>vehicle=terra price=cheap</offer>", "<accept>")
    assert state.transcript[2].parsed["offer"] is None and "malformed" in state.transcript[2].parsed["invalid"]
    assert state.transcript[3].parsed["ignored"] == "no offer on the table"
    assert not state.over  # the talk goes on
    assert out.metrics["invalid_offers"] == 1 and out.metrics["offers"] == 2 and not out.agreement


def test_an_offer_the_seller_may_not_make_is_counted_but_stays_on_the_table():
    state, out = play(offer("arden-terra-le", 20_000), "<accept>")
    assert state.transcript[0].parsed["invalid"].startswith("price 20,000 is below the floor")
    assert out.metrics["invalid_offers"] == 1 and out.agreement and not out.success


def test_tags_of_the_other_role_are_talk():
    state, out = play("Do you <accept>? <leave>", "<offer>vehicle=arden-terra-le price=1</offer> hi")
    assert not state.over and state.transcript[0].parsed is None and state.transcript[1].parsed is None
    assert out.metrics["offers"] == 0


def test_the_seller_opens_and_turns_alternate():
    state = GAME.start(scenario(), seed=5)
    assert state.starter == "seller" and GAME.to_move(state) == ["seller"]
    GAME.apply(state, "seller", "hi")
    assert GAME.to_move(state) == ["buyer"]
    with pytest.raises(ValueError):
        GAME.apply(state, "seller", "me again")


# --- privacy ------------------------------------------------------------------------------------


def test_each_role_sees_only_its_own_brief():
    s = scenario()
    seen = []

    class Spy:
        def __init__(self, inner):
            self.inner = inner

        async def act(self, obs):
            seen.append(obs)
            return await self.inner.act(obs)

    async def run():
        state = GAME.start(s, seed=1)
        agents = {"seller": Spy(SELLERS["consultative"]()), "buyer": Spy(BUYERS["analytical"]())}
        while not state.over:
            role = GAME.to_move(state)[0]
            GAME.apply(state, role, (await agents[role].act(GAME.observe(state, role))).text)

    asyncio.run(run())
    assert {o.role for o in seen} == {"seller", "buyer"} and len(seen) >= 4
    for obs in seen:
        dumped = json.dumps(obs.private)  # the dialogue is public; what each side says there is its choice
        if obs.role == "seller":
            assert set(obs.private) == {"brief", "catalog"} and obs.private["brief"] == BRIEF
            for secret in ("persona", "reservation", "budget", "must_haves", "incentive_values", "patience"):
                assert secret not in dumped, secret
        else:
            assert set(obs.private) == {"persona", "catalog"}
            assert obs.private["persona"] == Persona.model_validate(PERSONA).model_dump(mode="json")
            for secret in ("brief", "inventory", "floor", "dealership", '"cost"'):
                assert secret not in dumped, secret
            assert "28400" not in dumped and "28,400" not in dumped  # the Terra's floor


def test_an_agent_that_mutates_its_view_cannot_change_the_game():
    state = GAME.start(scenario(), seed=0)
    obs = GAME.observe(state, "seller")
    obs.private["brief"]["inventory"][0]["floor"] = 1
    obs.private["brief"]["incentives"].append({"id": "winter_tyres", "cost": 0})
    assert GAME.observe(state, "seller").private["brief"] == BRIEF
    GAME.apply(state, "seller", offer("arden-terra-le", 1_000))
    assert "below the floor" in state.transcript[0].parsed["invalid"]


def test_describe_shows_both_briefs_for_a_human():
    text = GAME.describe(scenario())
    assert "budget $31,000" in text and "reservation $30,000" in text and "Test Motors" in text
    assert "* arden-terra-le" in text and "  arden-pico-s" in text  # meets the needs, or not
