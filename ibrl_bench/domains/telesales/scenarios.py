"""TeleSales scenarios: the seeded generator, its difficulty tiers, and the fixed splits.

One scenario = a seller brief + a buyer persona over the shipped catalog. `generate(key)` draws one
from a string key and is a pure function of it. Keys are `k` = "0", "1", "2", ...; each key belongs
to one split by a hash of the version and the key (70% train, 10% dev, 20% test), so the splits are
disjoint by construction and only the requested split is ever generated. A split's set is the first
SPLIT_SIZES[split] of its keys in order of k (a repeated content, never seen so far, would be
skipped); `--scenarios N` takes the first N. tests/test_telesales_scenarios.py checks that no
content appears in two splits.

Solvability, in every tier: the generator starts from a target vehicle, derives the must-haves
from it (so it meets them), puts it in stock, and draws its floor <= reservation <= budget. So at
least one stocked vehicle meets every must-have at a price between its floor and the budget, and
a sale at a price in [floor, reservation] leaves the buyer no worse off.

What the tier changes (TIER_KNOBS): how wide the bargaining zone of the target is, how far the
budget sits above the reservation (and so whether list price is affordable), how many must-haves
there are, the buyer's patience and price sensitivity, and, in `hard`, that the target is the only
stocked vehicle that meets the needs with a floor within budget (another that meets the needs but
costs too much is put in stock when the catalog has one: a trap for an upseller).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from functools import cache

from ibrl_bench.domains.base import Scenario, ScenarioSet, content_hash
from ibrl_bench.domains.telesales.catalog import Vehicle, load_catalog
from ibrl_bench.domains.telesales.models import TEMPERAMENTS, TIERS, Brief, MustHaves, Persona
from ibrl_bench.domains.telesales.rules import meets_needs
from ibrl_bench.errors import UserError

DOMAIN = "telesales"
VERSION = "ts-scenarios-v1"
SPLITS = ("train", "dev", "test")
SPLIT_SIZES = {"train": 2000, "dev": 300, "test": 500}
# Per mille of keys in each split, by hash.
_SPLIT_BOUNDS = (("train", 700), ("dev", 800), ("test", 1000))

DEALERSHIPS = ("Northside Motors", "Harbor Auto Group", "Maple Ridge Cars", "Summit Vehicle Sales",
               "Lakeshore Motors", "Crossroads Auto")
# Floors sit this far below list (the dealer's discount room), drawn per vehicle.
DISCOUNT_ROOM = (0.06, 0.14)
INVENTORY_SIZE = (6, 9)
# Looser body and fuel needs in the easy tier accept a neighbour.
_BODY_NEIGHBOUR = {"suv": "wagon", "wagon": "suv", "sedan": "hatchback", "hatchback": "sedan",
                   "minivan": "suv", "pickup": "suv", "coupe": "sedan"}
_FUEL_GROUP = {"petrol": ("petrol", "diesel", "hybrid"), "diesel": ("petrol", "diesel", "hybrid"),
               "hybrid": ("hybrid", "plugin_hybrid", "electric"),
               "plugin_hybrid": ("hybrid", "plugin_hybrid", "electric"),
               "electric": ("plugin_hybrid", "electric")}


@dataclass(frozen=True)
class TierKnobs:
    zopa: tuple[float, float]  # (reservation - floor) / (list - floor) of the target vehicle
    headroom: tuple[float, float]  # (budget - reservation) / list
    needs: tuple[int, int]  # number of must-have constraints
    patience: tuple[int, int]  # buyer messages before it leaves (hurried buyers: one fewer)
    sensitivity: tuple[float, float]  # price sensitivity
    only_one: bool  # the target is the only stocked vehicle that meets the needs within budget


TIER_KNOBS = {
    "easy": TierKnobs(zopa=(0.6, 1.0), headroom=(0.03, 0.10), needs=(1, 2), patience=(6, 8),
                      sensitivity=(0.1, 0.4), only_one=False),
    "medium": TierKnobs(zopa=(0.3, 0.6), headroom=(0.01, 0.05), needs=(2, 3), patience=(4, 6),
                        sensitivity=(0.4, 0.7), only_one=False),
    "hard": TierKnobs(zopa=(0.05, 0.3), headroom=(0.0, 0.02), needs=(3, 4), patience=(3, 4),
                      sensitivity=(0.7, 0.95), only_one=True),
}


def _round(x: float, step: int = 100) -> int:
    return int(round(x / step)) * step


def _must_haves(rng: random.Random, target: Vehicle, n: int, tier: str) -> dict:
    kinds = ["body", "fuel", "seats"] + ["feature"] * min(2, len(target.features))
    chosen = rng.sample(kinds, min(n, len(kinds)))
    if tier == "hard" and "body" not in chosen:
        chosen[0] = "body"
    needs: dict = {"bodies": [], "fuels": [], "min_seats": 0, "features": []}
    if "body" in chosen:
        needs["bodies"] = [target.body] + ([_BODY_NEIGHBOUR[target.body]] if tier == "easy" else [])
    if "fuel" in chosen:
        needs["fuels"] = list(_FUEL_GROUP[target.fuel]) if tier != "hard" else [target.fuel]
    if "seats" in chosen:
        needs["min_seats"] = target.seats
    needs["features"] = rng.sample(sorted(target.features), chosen.count("feature"))
    return needs


def generate(key: str) -> dict:
    """One scenario's data, a pure function of `key`."""
    rng = random.Random(f"{VERSION}|{key}")
    catalog = load_catalog()
    tier = rng.choice(TIERS)
    knobs = TIER_KNOBS[tier]
    temperament = rng.choice(TEMPERAMENTS)
    target = rng.choice(catalog.vehicles)

    def floor_of(v: Vehicle) -> int:
        return _round(v.list_price * (1 - rng.uniform(*DISCOUNT_ROOM)))

    needs = _must_haves(rng, target, rng.randint(*knobs.needs), tier)
    needs_model = MustHaves(**needs)
    target_floor = floor_of(target)
    room = target.list_price - target_floor
    reservation = max(target_floor, _round(target_floor + rng.uniform(*knobs.zopa) * room))
    budget = max(reservation, _round(reservation + rng.uniform(*knobs.headroom) * target.list_price))

    stock = {target.id: target_floor}
    others = [v for v in catalog.vehicles if v.id != target.id]
    rng.shuffle(others)
    size = rng.randint(*INVENTORY_SIZE)
    trap = None
    for v in others:
        floor = floor_of(v)
        if knobs.only_one and meets_needs(v, needs_model):
            if floor > budget and trap is None:
                trap = (v.id, floor)
            continue  # hard: no second vehicle meets the needs within budget
        if len(stock) < size:
            stock[v.id] = floor
    if trap:  # hard: one stocked vehicle meets the needs but not the budget
        stock.pop(next((vid for vid in reversed(list(stock)) if vid != target.id), ""), None)
        stock[trap[0]] = trap[1]
    order = list(stock)
    rng.shuffle(order)

    offered = rng.sample(catalog.incentives, rng.randint(1, 3))
    incentives = [{"id": i.id, "cost": _round(i.base_cost * rng.uniform(0.8, 1.2), 50)} for i in offered]
    values = {}
    for inc in catalog.incentives:
        r = rng.random()
        worth = _round(inc.base_cost * rng.uniform(1.3, 2.5), 50) if r < 0.35 else (
            _round(inc.base_cost * rng.uniform(0.3, 0.8), 50) if r < 0.55 else 0)
        if inc.id == "home_charger" and target.fuel not in ("electric", "plugin_hybrid"):
            worth = 0  # a charger is worth nothing to someone buying a car without a plug
        if inc.id == "extended_warranty" and temperament == "skeptical":
            worth = _round(worth * 1.5, 50)  # skeptics want guarantees
        if worth:
            values[inc.id] = worth

    free = [f.id for f in catalog.features if f.id not in needs["features"]]
    own = [f for f in free if f in target.features]
    nice: list[str] = []
    for _ in range(rng.randint(1, 3)):
        pool = own if own and rng.random() < 0.6 else free
        pick = rng.choice(pool)
        if pick not in nice:
            nice.append(pick)
    sensitivity = round(rng.uniform(*knobs.sensitivity), 2)

    brief = {
        "dealership": rng.choice(DEALERSHIPS),
        "inventory": [{"vehicle": vid, "floor": stock[vid]} for vid in order],
        "incentives": incentives,
    }
    persona = {
        "budget": budget,
        "reservation": reservation,
        "must_haves": needs,
        "nice_to_haves": nice,
        "nice_bonus": _round(target.list_price * 0.02 * (1 - sensitivity)),
        "incentive_values": values,
        "price_sensitivity": sensitivity,
        "patience": max(2, rng.randint(*knobs.patience) - (temperament == "hurried")),
        "temperament": temperament,
        "difficulty": tier,
    }
    return {"catalog": catalog.ref, "seller": brief, "buyer": persona}


def make_scenario(data: dict) -> Scenario:
    """A scenario from its data, validated; the id is a hash of the content."""
    Brief.model_validate(data["seller"])
    Persona.model_validate(data["buyer"])
    return Scenario(id="ts-" + content_hash(data, 10), domain=DOMAIN, data=data)


def split_of(key: str) -> str:
    """The split a generator key belongs to."""
    bucket = int(hashlib.sha256(f"{VERSION}|split|{key}".encode()).hexdigest()[:8], 16) % 1000
    return next(name for name, bound in _SPLIT_BOUNDS if bucket < bound)


@cache
def _split(split: str) -> tuple[Scenario, ...]:
    out: list[Scenario] = []
    seen: set[str] = set()
    k = 0
    while len(out) < SPLIT_SIZES[split]:
        key = str(k)
        k += 1
        if split_of(key) != split:
            continue
        scenario = make_scenario(generate(key))
        if scenario.id not in seen:
            seen.add(scenario.id)
            out.append(scenario)
    return tuple(out)


def scenario_set(split: str = "test", n: int | None = None) -> ScenarioSet:
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r} for telesales; use one of: {', '.join(SPLITS)}")
    if n is not None and n < 1:
        raise UserError(f"--scenarios must be at least 1, got {n}")
    return ScenarioSet(domain=DOMAIN, version=VERSION, split=split, scenarios=_split(split)).head(n)
