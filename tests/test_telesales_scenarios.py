"""TeleSales catalog and scenarios: constraints, solvability, difficulty tiers, splits, versions."""

from __future__ import annotations

import json
from statistics import mean

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ibrl_bench.domains.telesales import scenarios as sc
from ibrl_bench.domains.telesales.catalog import BODIES, FUELS, Catalog, load_catalog
from ibrl_bench.domains.telesales.models import TEMPERAMENTS, TIERS, Brief, Persona
from ibrl_bench.domains.telesales.rules import meets_needs
from ibrl_bench.errors import UserError

CATALOG = load_catalog()
ALL = [s for split in sc.SPLITS for s in sc.scenario_set(split).scenarios]


def sellable(data: dict, cap: str) -> list[str]:
    """Stocked vehicles that meet the must-haves with a floor at or below the buyer's `cap`
    (its "budget" or its "reservation")."""
    brief, persona = Brief.model_validate(data["seller"]), Persona.model_validate(data["buyer"])
    limit = getattr(persona, cap)
    return [i.vehicle for i in brief.inventory
            if meets_needs(CATALOG.vehicle(i.vehicle), persona.must_haves) and i.floor <= limit]


def check_scenario(data: dict) -> None:
    assert data["catalog"] == CATALOG.ref
    brief, persona = Brief.model_validate(data["seller"]), Persona.model_validate(data["buyer"])
    knobs = sc.TIER_KNOBS[persona.difficulty]
    lo, hi = sc.INVENTORY_SIZE
    assert lo <= len(brief.inventory) <= hi
    for item in brief.inventory:
        vehicle = CATALOG.vehicle(item.vehicle)
        assert vehicle is not None
        room = 1 - item.floor / vehicle.list_price
        assert sc.DISCOUNT_ROOM[0] - 0.01 <= room <= sc.DISCOUNT_ROOM[1] + 0.01, (item, room)
    assert 1 <= len(brief.incentives) <= 3
    assert persona.reservation <= persona.budget
    assert 1 <= persona.must_haves.count
    assert persona.temperament in TEMPERAMENTS and persona.difficulty in TIERS
    assert knobs.sensitivity[0] <= persona.price_sensitivity <= knobs.sensitivity[1]
    low_patience = knobs.patience[0] - (persona.temperament == "hurried")
    assert max(2, low_patience) <= persona.patience <= knobs.patience[1]
    assert not set(persona.nice_to_haves) & set(persona.must_haves.features)
    # Solvability: a stocked vehicle meets every must-have with floor <= reservation <= budget.
    assert sellable(data, "reservation"), "no vehicle can be sold at or below the reservation"
    if knobs.only_one:
        assert len(sellable(data, "budget")) == 1, "hard: exactly one vehicle is sellable within budget"


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.integers(min_value=-(2**40), max_value=2**40).map(str), st.text(max_size=30)))
def test_any_key_gives_a_valid_solvable_scenario(key):
    data = sc.generate(key)
    check_scenario(data)
    assert sc.generate(key) == data  # a pure function of the key
    json.dumps(data)  # plain JSON


def test_every_scenario_of_every_split_is_valid_and_solvable():
    for s in ALL:
        check_scenario(s.data)


def test_catalog_is_versioned_data_with_a_few_dozen_vehicles():
    assert CATALOG.version.startswith("ts-catalog-v") and CATALOG.ref.startswith(CATALOG.version + "@")
    assert 30 <= len(CATALOG.vehicles) <= 60
    assert {v.body for v in CATALOG.vehicles} == set(BODIES)
    assert {v.fuel for v in CATALOG.vehicles} == set(FUELS)
    for v in CATALOG.vehicles:
        assert v.features and v.list_price > 10_000 and v.summary().startswith(v.name)


def test_a_bad_catalog_is_refused():
    raw = CATALOG.model_dump(mode="json")
    twice = {**raw, "vehicles": [*raw["vehicles"], raw["vehicles"][0]]}
    with pytest.raises(ValidationError, match="duplicate vehicle"):
        Catalog.model_validate(twice)
    ev = next(v for v in raw["vehicles"] if v["fuel"] == "electric")
    burning = {**raw, "vehicles": [{**ev, "consumption_l_100km": 5.0}, *raw["vehicles"][1:]]}
    with pytest.raises(ValidationError, match="consumption"):
        Catalog.model_validate(burning)
    unknown = {**raw, "vehicles": [{**raw["vehicles"][0], "features": ["jetpack"]}, *raw["vehicles"][1:]]}
    with pytest.raises(ValidationError, match="jetpack"):
        Catalog.model_validate(unknown)


def test_bad_briefs_and_personas_are_refused():
    data = ALL[0].data
    with pytest.raises(ValidationError, match="reservation"):
        Persona.model_validate({**data["buyer"], "reservation": data["buyer"]["budget"] + 1})
    with pytest.raises(ValidationError, match="unknown vehicle"):
        Brief.model_validate({**data["seller"], "inventory": [{"vehicle": "dream-car", "floor": 1000}]})
    item = data["seller"]["inventory"][0]
    list_price = CATALOG.vehicle(item["vehicle"]).list_price
    with pytest.raises(ValidationError, match="below its list price"):
        Brief.model_validate({**data["seller"], "inventory": [{**item, "floor": list_price}]})
    with pytest.raises(ValidationError):
        sc.make_scenario({**data, "buyer": {**data["buyer"], "temperament": "sleepy"}})


def test_difficulty_tiers_differ_as_documented():
    by_tier = {t: [s.data for s in ALL if s.data["buyer"]["difficulty"] == t] for t in TIERS}
    assert all(len(v) > 500 for v in by_tier.values())

    def avg(tier, f):
        return mean(f(d) for d in by_tier[tier])

    for f in (
        lambda d: d["buyer"]["patience"],
        lambda d: len(sellable(d, "budget")),  # vehicles that can be sold validly
        lambda d: (d["buyer"]["budget"] - d["buyer"]["reservation"]),  # budget headroom
        lambda d: -d["buyer"]["price_sensitivity"],
        lambda d: -Persona.model_validate(d["buyer"]).must_haves.count,
    ):
        assert avg("easy", f) > avg("medium", f) > avg("hard", f)

    def affordable_at_list(d):
        return any(CATALOG.vehicle(v).list_price <= d["buyer"]["budget"] for v in sellable(d, "budget"))

    share = {t: mean(affordable_at_list(d) for d in by_tier[t]) for t in TIERS}
    assert share["easy"] > 0.6 > 0.2 > share["hard"]
    # Hard stocks a vehicle that meets the needs but not the budget whenever the catalog has one.
    traps = mean(any(meets_needs(CATALOG.vehicle(i["vehicle"]), Persona.model_validate(d["buyer"]).must_haves)
                     and i["floor"] > d["buyer"]["budget"] for i in d["seller"]["inventory"]) for d in by_tier["hard"])
    assert traps > 0.3


def test_splits_are_disjoint_fixed_and_of_the_documented_sizes():
    sizes = {split: len(sc.scenario_set(split).scenarios) for split in sc.SPLITS}
    assert sizes == sc.SPLIT_SIZES
    seen: dict[str, str] = {}
    for split in sc.SPLITS:
        for s in sc.scenario_set(split).scenarios:
            assert s.hash not in seen, f"{s.id} in {split} and {seen[s.hash]}"
            seen[s.hash] = split
            assert s.id.startswith("ts-") and s.domain == "telesales"
    # Temperaments and tiers are all represented in the test split.
    test = sc.scenario_set("test").scenarios
    assert {s.data["buyer"]["temperament"] for s in test} == set(TEMPERAMENTS)
    assert {s.data["buyer"]["difficulty"] for s in test} == set(TIERS)


def test_scenario_sets_are_versioned_hashed_and_stable():
    full = sc.scenario_set("test")
    head = sc.scenario_set("test", 20)
    assert head.version == sc.VERSION and head.split == "test"
    assert head.scenarios == full.scenarios[:20]
    assert head.hash != full.hash and sc.scenario_set("test", 20).hash == head.hash
    assert sc.scenario_set("dev", 20).hash != head.hash
    # The scenario id and hash follow the content: change one number, both change.
    s = head.scenarios[0]
    data = json.loads(json.dumps(s.data))
    data["buyer"]["budget"] += 100
    other = sc.make_scenario(data)
    assert other.id != s.id and other.hash != s.hash
    # Regenerating a split from scratch gives the same scenarios (nothing depends on call order).
    sc._split.cache_clear()
    assert sc.scenario_set("test", 20).hash == head.hash


def test_bad_split_or_count_is_a_user_error():
    with pytest.raises(UserError, match="unknown split"):
        sc.scenario_set("holdout")
    with pytest.raises(UserError, match="at least 1"):
        sc.scenario_set("test", 0)
