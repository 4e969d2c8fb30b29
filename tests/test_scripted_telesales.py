"""Scripted TeleSales sellers and buyers, played through the real domain on dev scenarios."""

from __future__ import annotations

import asyncio
import random
from itertools import product
from statistics import mean

import pytest

from ibrl_bench.agents.base import Agent, Reply
from ibrl_bench.agents.scripted import build_scripted
from ibrl_bench.agents.scripted.telesales import BUYERS, SELLERS, PersonaBuyer
from ibrl_bench.domains import get_domain
from ibrl_bench.domains.base import Observation
from ibrl_bench.domains.telesales.catalog import load_catalog
from ibrl_bench.domains.telesales.models import TEMPERAMENTS
from ibrl_bench.domains.telesales.parser import buyer_act, parse_offer
from ibrl_bench.errors import FatalAgentError, UserError

GAME = get_domain("telesales")
SCENARIOS = GAME.scenario_set("dev", 40).scenarios
CATALOG = load_catalog()
PANEL_BUYERS = ["hurried", "skeptical", "friendly", "analytical"]


async def _play(agents: dict[str, Agent], scenario, seed: int):
    state = GAME.start(scenario, seed)
    log: list[tuple[Observation, str]] = []
    while not state.over:
        role = GAME.to_move(state)[0]
        obs = GAME.observe(state, role)
        text = (await agents[role].act(obs)).text
        log.append((obs, text))
        GAME.apply(state, role, text)
    return state, GAME.outcome(state), log


def play_all(seller: str, buyer: str, seed_base: int = 0, scenarios=SCENARIOS):
    agents = {"seller": SELLERS[seller](), "buyer": BUYERS[buyer]()}

    async def run():
        return [await _play(agents, s, seed_base + i) for i, s in enumerate(scenarios)]

    return asyncio.run(run())


@pytest.fixture(scope="module")
def matrix():
    """(seller, buyer) -> the 40 dev episodes."""
    return {(s, b): play_all(s, b) for s, b in product(SELLERS, PANEL_BUYERS)}


def success_rate(episodes) -> float:
    return mean(o.success for _, o, _ in episodes)


def test_registry_has_four_sellers_and_a_buyer_per_temperament():
    assert set(SELLERS) >= {"consultative", "discount_led", "pushy_upseller", "by_the_book"}
    assert set(BUYERS) >= set(TEMPERAMENTS)
    for name, cls in {**SELLERS, **BUYERS}.items():
        assert cls.name == name and cls.__doc__ and len(cls.__doc__.strip().splitlines()) >= 2
        assert isinstance(build_scripted("telesales", name, {}), Agent)
    with pytest.raises(UserError, match=r"unknown parameter 'greed' .* valid parameters: markup: float \| None = None, "
                                        r"concession: float \| None = None"):
        build_scripted("telesales", "consultative", {"greed": 2})
    assert build_scripted("telesales", "consultative", {"concession": 0.5}).concession == 0.5
    assert build_scripted("telesales", "skeptical", {"depth": 0.2}).depth == 0.2
    with pytest.raises(UserError, match="concession"):
        build_scripted("telesales", "discount_led", {"concession": 2})
    with pytest.raises(UserError, match="depth"):
        build_scripted("telesales", "friendly", {"depth": "low"})
    with pytest.raises(UserError, match="unknown scripted agent"):
        build_scripted("telesales", "boulware", {})


def test_every_pairing_speaks_the_protocol(matrix):
    for (s, b), episodes in matrix.items():
        for _, outcome, log in episodes:
            assert outcome.status == "ok", (s, b, outcome.detail)  # buyers leave before the turn limit
            assert outcome.metrics["invalid_offers"] == 0, (s, b)  # never out of stock or below floor
            assert outcome.metrics["fell_through"] is False, (s, b)  # buyers accept only what they can buy
            for obs, text in log:
                if obs.role == "buyer":
                    assert parse_offer(text) is None
                else:
                    assert buyer_act(text) is None


def test_success_shows_a_spread_and_strategies_differ(matrix):
    rates = {pair: success_rate(eps) for pair, eps in matrix.items()}
    assert min(rates.values()) < 0.3 and max(rates.values()) > 0.85
    by_seller = {s: mean(rates[s, b] for b in PANEL_BUYERS) for s in SELLERS}
    by_buyer = {b: mean(rates[s, b] for s in SELLERS) for b in PANEL_BUYERS}
    # Upselling above the budget fails most; haggling sellers beat the fixed-price one.
    assert by_seller["pushy_upseller"] < by_seller["by_the_book"] < by_seller["consultative"]
    assert by_seller["by_the_book"] < by_seller["discount_led"]
    # A friendly buyer is easier to sell to than a skeptical or a hurried one.
    assert by_buyer["friendly"] > max(by_buyer["skeptical"], by_buyer["hurried"]) + 0.15


def test_the_difficulty_tier_matters(matrix):
    by_tier: dict[str, list[bool]] = {"easy": [], "medium": [], "hard": []}
    for episodes in matrix.values():
        for state, outcome, _ in episodes:
            by_tier[state.persona.difficulty].append(outcome.success)
    rates = {t: mean(v) for t, v in by_tier.items()}
    assert rates["easy"] > rates["medium"] > rates["hard"]
    assert rates["easy"] - rates["hard"] > 0.3


def test_sales_happen_within_the_rules_and_rewards_follow(matrix):
    n = 0
    for episodes in matrix.values():
        for state, outcome, _ in episodes:
            if outcome.success:
                n += 1
                assert 0.5 <= outcome.rewards["seller"] <= 1.0  # never below the floor plus the extras' cost
                assert outcome.rewards["buyer"] >= -1e-9  # scripted buyers never pay above what the car is worth
                assert state.accepted.price <= state.persona.budget
    assert n > 200


def test_strategies_behave_as_documented(matrix):
    def first(name, role="seller"):
        return [next(text for obs, text in log if obs.role == role) for _, _, log in matrix[name, "friendly"]]

    assert all(parse_offer(t) is None for t in first("consultative"))  # asks first
    assert all(parse_offer(t) is not None for t in first("discount_led"))  # offers at once
    for _, _, log in matrix["pushy_upseller", "analytical"]:
        o = parse_offer(log[0][1]).offer
        assert o.price >= CATALOG.vehicle(o.vehicle).list_price  # above list, pack priced in
    for _, _, log in matrix["by_the_book", "skeptical"]:
        prices: dict[str, set[float]] = {}
        for obs, text in log:
            read = parse_offer(text) if obs.role == "seller" else None
            if read:
                prices.setdefault(read.offer.vehicle, set()).add(read.offer.price)
        assert all(len(p) == 1 for p in prices.values())  # one published price per vehicle


def test_same_seed_same_transcripts_and_the_seed_matters():
    def texts(episodes):
        return [[t.text for t in state.transcript] for state, _, _ in episodes]

    for s, b in [("consultative", "friendly"), ("discount_led", "hurried"), ("pushy_upseller", "analytical")]:
        assert texts(play_all(s, b, 0)) == texts(play_all(s, b, 0))
    assert texts(play_all("consultative", "friendly", 0)) != texts(play_all("consultative", "friendly", 1000))


def test_replies_depend_only_on_the_observation(matrix):
    """Replaying recorded observations, shuffled, on fresh agents gives the same replies."""
    rng = random.Random(0)
    for (s, b), episodes in matrix.items():
        agents = {"seller": SELLERS[s](), "buyer": BUYERS[b]()}
        calls = [(obs, text) for _, _, log in episodes[:5] for obs, text in log]
        rng.shuffle(calls)
        for obs, text in calls:
            assert asyncio.run(agents[obs.role].act(obs.model_copy(deep=True))).text == text


def test_the_persona_buyer_plays_the_scenarios_temperament():
    seen = set()
    for scenario in SCENARIOS[:12]:
        temperament = scenario.data["buyer"]["temperament"]
        seen.add(temperament)
        a = play_all("discount_led", "persona", scenarios=[scenario])
        b = play_all("discount_led", temperament, scenarios=[scenario])
        assert [t.text for t in a[0][0].transcript] == [t.text for t in b[0][0].transcript]
    assert len(seen) >= 3


def test_an_agent_in_the_wrong_role_stops_the_run():
    state = GAME.start(SCENARIOS[0], 0)
    with pytest.raises(FatalAgentError, match="consultative is a seller; it cannot play the buyer"):
        asyncio.run(SELLERS["consultative"]().act(GAME.observe(state, "buyer")))
    with pytest.raises(FatalAgentError, match="friendly is a buyer"):
        asyncio.run(BUYERS["friendly"]().act(GAME.observe(state, "seller")))
    with pytest.raises(FatalAgentError):
        asyncio.run(PersonaBuyer().act(GAME.observe(state, "seller")))


class Babbler(Agent):
    """A counterpart that writes anything, as a language model might."""

    LINES = ["lol", "<offer>vehicle=batmobile price=1</offer>", "<offer>garbage</offer>", "<accept>",
             "My budget is $-5 and I need a spaceship", "<offer>vehicle=arden-terra-le price=1e9</offer>",
             "\u2603" * 50, "I need 99 seats, electric diesel, budget 1,000,000,000,000", "<offer>price=5</offer>"]

    async def act(self, obs: Observation) -> Reply:
        return Reply(text=self.LINES[obs.turn % len(self.LINES)])


def test_garbage_from_the_other_side_never_crashes_a_scripted_agent():
    for name in SELLERS:
        for scenario in SCENARIOS[:6]:
            state, outcome, _ = asyncio.run(_play({"seller": SELLERS[name](), "buyer": Babbler()}, scenario, 1))
            assert "seller" not in outcome.violators
            assert outcome.metrics["invalid_offers"] == 0
    for name in BUYERS:
        for scenario in SCENARIOS[:6]:
            state, outcome, _ = asyncio.run(_play({"seller": Babbler(), "buyer": BUYERS[name]()}, scenario, 1))
            assert "buyer" not in outcome.violators
            assert not outcome.success  # nothing the babbler offers is worth buying
