"""Scripted TeleSales buyers, one per temperament (hurried, skeptical, friendly, analytical), and
`persona`, which plays whichever temperament the scenario gives its buyer.

A buyer reads its persona and the offer on the table (hearing.py) and accepts only offers that meet
its needs within budget and at or below its current limit, which rises from below its willingness
to pay toward it as its patience runs out; it counters in words and leaves when patience ends. A
temperament is knobs and wording (temperaments.py, data); the logic is one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from ibrl_bench.agents.base import Reply
from ibrl_bench.agents.params import Params
from ibrl_bench.agents.scripted.telesales.common import BUYER, SELLER, Scripted, join, money
from ibrl_bench.agents.scripted.telesales.hearing import BuyerView, read_buyer
from ibrl_bench.agents.scripted.telesales.temperaments import PROFILES, Part, Wording
from ibrl_bench.domains.base import Observation
from ibrl_bench.domains.telesales.catalog import load_catalog
from ibrl_bench.domains.telesales.models import TEMPERAMENTS, Offer, Persona
from ibrl_bench.domains.telesales.parser import ACCEPT, LEAVE, parse_offer
from ibrl_bench.domains.telesales.rules import extras_value, missing_needs, willingness_to_pay


class BuyerParams(Params):
    """Knobs a spec may set; None keeps the temperament's own."""

    depth: float | None = Field(None, ge=0.0, le=0.5)
    curve: float | None = Field(None, ge=0.1, le=10.0)


class Buyer(Scripted):
    """The one buyer logic; a subclass named after a temperament takes that temperament's knobs
    and wording (temperaments.py) as its class attributes."""

    role = BUYER
    depth: float
    curve: float
    patience_delta: int
    leave_after_mismatches: int
    holds_to_earlier_quote: bool
    wording: Wording

    params_model = BuyerParams

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        profile = PROFILES.get(cls.name)
        if profile is not None:
            for knob, value in profile:
                setattr(cls, knob, value)

    async def act(self, obs: Observation) -> Reply:
        self.check_role(obs)
        view = read_buyer(obs, self.patience_delta)
        rng = self.rng(obs)
        if view.table is None:
            if view.sent == 0:
                return Reply(text=self.say(self.wording.introduce, view, rng))
            if view.last_chance:
                return Reply(text=f"{self.say(self.wording.goodbye, view, rng)} {LEAVE}")
            return Reply(text=self.say(self.wording.nudge, view, rng))
        text = self.respond(view, view.table, rng)
        if view.sent == 0 and ACCEPT not in text and LEAVE not in text:
            text = f"{self.say(self.wording.introduce, view, rng)} {text}"  # the seller offered before asking
        return Reply(text=text)

    def limit(self, view: BuyerView, value: float) -> float:
        """The most it will pay now: rises from (1 - depth) * value to value over its patience."""
        return value * (1 - self.depth * (1 - view.tau) ** self.curve)

    def respond(self, view: BuyerView, offer: Offer, rng: random.Random) -> str:
        if self.holds_to_earlier_quote and not view.last_chance:
            best = self.best_earlier(view)
            if best is not None and self.surplus(view, best) > self.surplus(view, offer) + 1:
                v = load_catalog().vehicle(best.vehicle)
                return self.say(self.wording.better_earlier, view, rng,
                                vehicle=v.name if v else best.vehicle, price=money(best.price))
        catalog = load_catalog()
        p = view.persona
        vehicle = catalog.vehicle(offer.vehicle)
        assert vehicle is not None  # the parser reads catalog vehicles only
        missing = missing_needs(vehicle, p.must_haves, catalog)
        if missing:
            if view.last_chance or view.mismatches >= self.leave_after_mismatches:
                return f"{self.say(self.wording.goodbye, view, rng)} {LEAVE}"
            said = self.wording.mismatch_first if view.sent == 0 else self.wording.mismatch
            return self.say(said, view, rng, missing=missing[0])
        value = willingness_to_pay(vehicle, p) + extras_value(offer.incentives, p)
        cap = min(float(p.budget), value)
        if offer.price <= min(self.limit(view, value), p.budget):
            return f"{self.say(self.wording.agree, view, rng)} {ACCEPT}"
        if view.last_chance:
            if offer.price <= cap:
                return f"{self.say(self.wording.agree, view, rng)} {ACCEPT}"
            return f"{self.say(self.wording.goodbye, view, rng)} {LEAVE}"
        counter = math.floor(min(self.limit(view, value), p.budget, offer.price - 100) / 100) * 100
        return self.say(self.wording.haggle, view, rng, offer=offer, counter=money(counter))

    def surplus(self, view: BuyerView, offer: Offer) -> float:
        v = load_catalog().vehicle(offer.vehicle)
        if v is None or missing_needs(v, view.persona.must_haves, load_catalog()) or offer.price > view.persona.budget:
            return -math.inf
        return willingness_to_pay(v, view.persona) + extras_value(offer.incentives, view.persona) - offer.price

    def best_earlier(self, view: BuyerView) -> Offer | None:
        offers = [r.offer for m in view.obs.dialogue[:-1] if m.role == SELLER
                  for r in [parse_offer(m.text)] if r is not None and r.offer is not None]
        offers = [o for o in offers if self.surplus(view, o) > -math.inf]
        return max(offers, key=lambda o: self.surplus(view, o), default=None)

    # -- words ---------------------------------------------------------------------------------

    def say(self, message: tuple[Part, ...], view: BuyerView, rng: random.Random, offer: Offer | None = None,
            **fields: str) -> str:
        """A message of its wording: the parts whose condition holds, each filled in; a part with
        several templates draws one from `rng`."""
        values = _Fields(self, view, offer, fields)
        text = ""
        for part in message:
            if part.when is not None and not self.holds(part.when, view, offer):
                continue
            template = part.say if isinstance(part.say, str) else rng.choice(part.say)
            text += template.format_map(values)
        return text

    def holds(self, condition: str, view: BuyerView, offer: Offer | None) -> bool:
        p = view.persona
        if condition == "nice":
            return bool(p.nice_to_haves)
        if condition == "extras":
            return bool(self.wanted_extras(p))
        if condition == "no_table":
            return view.table is None
        if condition in ("over", "within"):
            assert offer is not None
            return (offer.price > p.budget) == (condition == "over")
        if condition == "no_extras_offered":
            assert offer is not None
            return bool(self.wanted_extras(p)) and not offer.incentives
        raise ValueError(f"unknown wording condition {condition!r}")

    def needs_words(self, p: Persona) -> list[str]:
        catalog = load_catalog()
        n = p.must_haves
        words = []
        if n.bodies:
            words.append(" or ".join("an SUV" if b == "suv" else f"a {b}" for b in n.bodies))
        if n.fuels:
            words.append(" or ".join(f.replace("plugin_hybrid", "plug-in hybrid") for f in n.fuels))
        if n.min_seats:
            words.append(f"at least {n.min_seats} seats")
        words += [catalog.feature_name(f) for f in n.features]
        return words

    def needs_phrase(self, p: Persona) -> str:
        """The must-haves as a phrase: "an SUV or a wagon, hybrid, with at least 7 seats and AWD"."""
        n = p.must_haves
        words = self.needs_words(p)
        if n.bodies:
            head = words.pop(0) + (f", {words.pop(0)}," if n.fuels else "")
        elif n.fuels:
            fuel = words.pop(0)
            head = f"{'an' if fuel[0] in 'aeiou' else 'a'} {fuel} vehicle"
        else:
            head = "a vehicle"
        return (head + (f" with {join(words)}" if words else "")).rstrip(",")

    def nice_words(self, p: Persona) -> list[str]:
        return [load_catalog().feature_name(f) for f in p.nice_to_haves]

    def wanted_extras(self, p: Persona) -> list[str]:
        """The extras worth the most to it, by name (it does not know which the seller has)."""
        catalog = load_catalog()
        best = sorted(((v, i) for i, v in p.incentive_values.items() if v >= 500), reverse=True)[:2]
        return [catalog.incentive(i).name for _, i in best if catalog.incentive(i)]


class _Fields(Mapping[str, Any]):
    """The values a wording template may name (temperaments.py), each worked out only
    when named."""

    def __init__(self, buyer: Buyer, view: BuyerView, offer: Offer | None, given: dict[str, str]):
        self.buyer, self.view, self.offer, self.given = buyer, view, offer, given

    def __getitem__(self, key: str) -> str:
        if key in self.given:
            return self.given[key]
        b, p = self.buyer, self.view.persona
        if key == "needs":
            return b.needs_phrase(p)
        if key == "needs_list":
            return "; ".join(b.needs_words(p))
        if key == "nice":
            return join(b.nice_words(p))
        if key == "nice_list":
            return ", ".join(b.nice_words(p))
        if key == "extras_or":
            return join(b.wanted_extras(p), "or")
        if key == "budget":
            return money(p.budget)
        if key == "over_by":
            assert self.offer is not None
            return money(self.offer.price - p.budget)
        if key == "leave":
            return LEAVE
        raise KeyError(key)

    def __iter__(self):
        return iter(self.given)

    def __len__(self) -> int:
        return len(self.given)


class Hurried(Buyer):
    """Hurried: short on time. Two messages less patience than its persona (at least 2), concedes
    early (its limit starts 4% below what the car is worth to it and rises fast), states needs and
    budget in one line, and leaves if it has no offer by its second message."""

    name = "hurried"


class Skeptical(Buyer):
    """Skeptical: distrusts salespeople. Keeps its budget to itself, opens 12% below what the car is
    worth to it and concedes late, asks for the extras it values most, and hangs up after the second
    offer of a vehicle that misses its needs ("you're not listening")."""

    name = "skeptical"


class Friendly(Buyer):
    """Friendly: open and easy-going. One message more patience than its persona, shares its needs,
    nice-to-haves, the extras it likes and its budget, opens 5% below what the car is worth to it
    and concedes evenly."""

    name = "friendly"


class Analytical(Buyer):
    """Analytical: states its requirements as a spec sheet with its budget, opens 8% below what the
    car is worth to it, concedes evenly, justifies each counter with numbers, and declines an offer
    that is worse for it than an earlier one (it asks for the earlier terms instead)."""

    name = "analytical"


class PersonaBuyer(Buyer):
    """Plays the temperament the scenario gives its buyer (the persona's `temperament`), so a panel
    of it follows the scenario set's mix of temperaments instead of fixing one."""

    name = "persona"
    params_model = Params  # the knobs are those of the temperament it plays

    async def act(self, obs: Observation) -> Reply:
        self.check_role(obs)
        temperament = str(obs.private.get("persona", {}).get("temperament", "friendly"))
        return await _BY_TEMPERAMENT.get(temperament, _BY_TEMPERAMENT["friendly"]).act(obs)


BUYERS: dict[str, type[Buyer]] = {cls.name: cls for cls in (Hurried, Skeptical, Friendly, Analytical, PersonaBuyer)}
_BY_TEMPERAMENT: dict[str, Buyer] = {name: BUYERS[name]() for name in TEMPERAMENTS}
