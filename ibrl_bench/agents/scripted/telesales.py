"""Scripted TeleSales sellers and buyers: offline counterparts, deterministic given the seed.

Every agent is stateless (one object serves many concurrent episodes): it reads its own brief from
`obs.private` and re-reads the public dialogue on each call; per-message reading is cached.
Randomness (only the wording) comes from an RNG seeded with the episode seed, scenario, role,
turn and agent name.

Sellers read what the buyer said with keyword cues (body types, fuels, seats, catalog feature
and extra aliases, money amounts in sentences about budget, complaints), pick a stocked vehicle
and a price, and speak the canonical offer tag. They never offer a vehicle out of stock or below
its floor. Strategies (class docstrings say more):
  consultative    asks about needs first, offers the best fit, meets counters halfway
  discount_led    opens with a discounted offer at once, concedes fast, takes any counter above floor
  pushy_upseller  offers the dearest vehicle that fits, above list with an accessory pack; slow
  by_the_book     asks, then quotes the best fit at its published price; never haggles

Buyers read their persona and the offer on the table, accept only offers that meet their needs
within budget and at or below their current limit, which rises from below their willingness to
pay toward it as their patience runs out; they counter in words and leave when patience ends.
One per temperament: hurried, skeptical, friendly, analytical; `persona` plays whichever
temperament the scenario gives its buyer.

The main knobs can be set in the spec: sellers take `markup` and `concession`
(`scripted:telesales/consultative?concession=0.5`), buyers `depth` and `curve`.
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass, field
from functools import lru_cache

from pydantic import Field

from ibrl_bench.agents.base import Reply
from ibrl_bench.agents.params import Params
from ibrl_bench.agents.scripted import ScriptedAgent
from ibrl_bench.domains.base import Observation
from ibrl_bench.domains.telesales.catalog import Vehicle, load_catalog
from ibrl_bench.domains.telesales.models import TEMPERAMENTS, Brief, Offer, Persona
from ibrl_bench.domains.telesales.parser import (
    ACCEPT,
    LEAVE,
    find_incentives,
    format_offer,
    money_amounts,
    normalize,
    parse_offer,
)
from ibrl_bench.domains.telesales.rules import extras_value, missing_needs, willingness_to_pay
from ibrl_bench.errors import FatalAgentError

SELLER, BUYER = "seller", "buyer"


def _money(x: float) -> str:
    return f"${x:,.0f}"


def _join(words: list[str], last: str = "and") -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + f" {last} " + words[-1]


class Scripted(ScriptedAgent):
    """What sellers and buyers share: the role check and the per-decision RNG."""

    name = ""
    role = ""

    def check_role(self, obs: Observation) -> None:
        if obs.role != self.role:
            raise FatalAgentError(
                f"scripted:telesales/{self.name} is a {self.role}; it cannot play the {obs.role} role "
                f"(choose --role so that it plays the {self.role})"
            )

    def rng(self, obs: Observation, purpose: str = "") -> random.Random:
        return random.Random(f"{obs.seed}|{obs.scenario_id}|{obs.role}|{obs.turn}|{self.name}|{purpose}")


@lru_cache(maxsize=1024)
def _brief(text: str) -> Brief:
    return Brief.model_validate_json(text)


@lru_cache(maxsize=1024)
def _persona(text: str) -> Persona:
    return Persona.model_validate_json(text)


def own_brief(obs: Observation) -> Brief:
    """The seller's brief, validated once per distinct content."""
    return _brief(json.dumps(obs.private["brief"], sort_keys=True))


def own_persona(obs: Observation) -> Persona:
    return _persona(json.dumps(obs.private["persona"], sort_keys=True))


# --- what a seller hears ---------------------------------------------------------------------

_BODY_CUES = {
    "sedan": ("sedan", "saloon"), "hatchback": ("hatchback", "hatch"), "suv": ("suv", "crossover", "sport utility"),
    "pickup": ("pickup", "pick-up", "truck"), "minivan": ("minivan", "mpv", "people carrier", "van"),
    "wagon": ("wagon", "estate"), "coupe": ("coupe",),
}
# Plug-in first: its words would otherwise also read as "hybrid" and "electric".
_FUEL_CUES = (
    ("plugin_hybrid", ("plug-in hybrid", "plugin hybrid", "plugin_hybrid", "plug-in", "phev")),
    ("hybrid", ("hybrid",)), ("electric", ("electric", "ev", "bev", "battery")),
    ("diesel", ("diesel",)), ("petrol", ("petrol", "gasoline", "gas")),
)
_NUMBER_WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
_SEATS = re.compile(r"\b([2-9]|two|three|four|five|six|seven|eight|nine)\s?(?:\+\s?)?-?\s?seat|"
                    r"\bseats?\s?(?:>=|=>|:|of|at least|minimum|min)?\s?([2-9])\b")
_SENTENCE = re.compile(r"[.!?;\n]+(?:\s|$)")
_BUDGET_CUE = re.compile(r"\b(?:budget|max(?:imum)?|afford|spend|up to|at most|no more than|limit|cap)\b")
_MISMATCH_CUE = re.compile(r"\b(?:doesn't work|does not work|won't work|not what i need|no good|won't do|"
                           r"doesn't have|does not have|lacks|missing|wrong)\b|\bi need\b")
_PRICE_CUE = re.compile(r"\b(?:over my budget|above my budget|too expensive|too much|too high|too steep|"
                        r"can't afford|cannot afford|out of my budget|over budget)\b")


def _cue_pattern(words: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(r"(?<![a-z0-9])(?:" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
                      + r")(?![a-z0-9])")


_BODY_RE = {body: _cue_pattern(cues) for body, cues in _BODY_CUES.items()}
_FUEL_RE = [(fuel, _cue_pattern(cues)) for fuel, cues in _FUEL_CUES]


@lru_cache(maxsize=4)
def _feature_res(ref: str) -> list[tuple[str, re.Pattern[str]]]:
    return [(f.id, _cue_pattern((*f.aliases, f.name.lower()))) for f in load_catalog().features]


@dataclass(frozen=True)
class Said:
    """What one buyer message says, as far as keyword cues can tell."""

    bodies: frozenset[str]
    fuels: frozenset[str]
    seats: int
    features: frozenset[str]
    extras: frozenset[str]
    budget: float | None  # an amount in a sentence about budget
    counter: float | None  # the last amount elsewhere
    mismatch: bool  # says the vehicle does not meet a need
    too_dear: bool  # says the price is too high


@lru_cache(maxsize=16384)
def hear(text: str) -> Said:
    norm = normalize(text)
    features = set()
    for fid, pattern in _feature_res(load_catalog().ref):
        if pattern.search(norm):
            features.add(fid)
            norm = pattern.sub(" ", norm)  # "electric tailgate" must not read as a fuel
    fuels = set()
    for fuel, pattern in _FUEL_RE:
        if pattern.search(norm):
            fuels.add(fuel)
            norm = pattern.sub(" ", norm)
    bodies = {body for body, pattern in _BODY_RE.items() if pattern.search(norm)}
    seats = 0
    for m in _SEATS.finditer(norm):
        word = m.group(1) or m.group(2)
        seats = max(seats, int(word) if word.isdigit() else _NUMBER_WORDS[word])
    budget = counter = None
    for sentence in _SENTENCE.split(norm):
        amounts = money_amounts(sentence)
        if not amounts:
            continue
        if _BUDGET_CUE.search(sentence):
            budget = max(amounts)  # "$900 over my budget of $23,500": the budget is the larger
        else:
            counter = amounts[-1]
    return Said(
        bodies=frozenset(bodies), fuels=frozenset(fuels), seats=seats, features=frozenset(features),
        extras=frozenset(find_incentives(text)), budget=budget, counter=counter,
        mismatch=bool(_MISMATCH_CUE.search(norm)), too_dear=bool(_PRICE_CUE.search(norm)),
    )


@dataclass
class SellerView:
    """What a seller knows at one call, all derived from the observation."""

    obs: Observation
    brief: Brief
    bodies: set[str] = field(default_factory=set)
    fuels: set[str] = field(default_factory=set)
    seats: int = 0
    features: set[str] = field(default_factory=set)
    extras: set[str] = field(default_factory=set)  # extras the buyer asked about
    budget: float | None = None
    counter: float | None = None  # in the buyer's latest message
    rejected: set[str] = field(default_factory=set)  # vehicles the buyer said do not meet its needs
    too_dear: dict[str, int] = field(default_factory=dict)  # price complaints per vehicle
    offers: list[Offer] = field(default_factory=list)  # own offers, oldest first
    questions: int = 0  # own messages without an offer

    @property
    def needs_known(self) -> bool:
        return bool(self.bodies or self.fuels or self.seats or self.features)

    @property
    def last_message(self) -> bool:
        """This is the seller's last message before the turn limit."""
        return self.obs.turn >= self.obs.max_turns - 2

    def last_price(self, vehicle: str) -> float | None:
        return next((o.price for o in reversed(self.offers) if o.vehicle == vehicle), None)


def read_seller(obs: Observation) -> SellerView:
    view = SellerView(obs=obs, brief=own_brief(obs))
    table: Offer | None = None
    for msg in obs.dialogue:
        if msg.role == SELLER:
            read = parse_offer(msg.text)
            if read is None:
                view.questions += 1
            else:
                table = read.offer
                if table is not None:
                    view.offers.append(table)
            continue
        said = hear(msg.text)
        view.bodies |= said.bodies
        view.fuels |= said.fuels
        view.seats = max(view.seats, said.seats)
        view.features |= said.features
        view.extras |= said.extras
        if said.budget is not None:
            view.budget = said.budget
        view.counter = said.counter
        if table is not None:
            if said.mismatch and not said.too_dear:
                view.rejected.add(table.vehicle)
            if said.too_dear:
                view.too_dear[table.vehicle] = view.too_dear.get(table.vehicle, 0) + 1
    return view


# --- sellers ---------------------------------------------------------------------------------


class SellerParams(Params):
    """Knobs a spec may set; None keeps the strategy's own."""

    markup: float | None = Field(None, ge=0.5, le=1.5)
    concession: float | None = Field(None, ge=0.0, le=1.0)


class Seller(Scripted):
    """The shared seller; a strategy sets the knobs below and may override `pick` and `price`."""

    role = SELLER
    ask_first = True  # ask about needs before the first offer
    markup = 1.0  # first price as a multiple of list
    concession = 0.3  # share of the gap to the floor given up with each new offer
    counters = "split"  # "match": take a counter at or above floor; "split": meet halfway; "never"
    respects_budget = True  # never quote above a stated budget that the floor allows
    final_floor = True  # on its last message, offer at the floor
    opening = "Hello, this is {dealer}. Thanks for taking my call! What are you looking for in your next vehicle?"

    params_model = SellerParams

    async def act(self, obs: Observation) -> Reply:
        self.check_role(obs)
        view = read_seller(obs)
        rng = self.rng(obs)
        if not view.offers and self.ask_first and not view.needs_known and view.questions < 2:
            if view.questions == 0:
                return Reply(text=self.opening.format(dealer=view.brief.dealership) + " " + self.needs_question())
            return Reply(text="Could you tell me a bit more: body style, fuel, how many seats, any features you "
                              "can't do without, and your budget?")
        vehicle = self.pick(view)
        extras = self.extras(view, vehicle)
        floor = float(view.brief.floor(vehicle.id) or 0)
        cost = sum(view.brief.incentive_cost(i) or 0 for i in extras)
        if self.respects_budget and view.budget is not None and floor + cost > view.budget >= floor:
            extras, cost = set(), 0  # extras the budget cannot carry would only lose the sale
        reserve = floor + cost  # never sell for less than the floor plus what the extras cost
        price = self.adjust_for_extras(view, vehicle, self.price(view, vehicle, reserve), extras)
        price = max(reserve, math.ceil(price / 50) * 50)
        offer = Offer(vehicle=vehicle.id, price=price, incentives=tuple(sorted(extras)))
        words = self.pitch(view, vehicle, offer, rng)
        if not obs.dialogue:
            words = self.opening.format(dealer=view.brief.dealership) + " " + words
        return Reply(text=f"{words} {format_offer(offer)}")

    def needs_question(self) -> str:
        return "Which body style, fuel and number of seats do you need, which features matter, and what is your budget?"

    # -- choices ------------------------------------------------------------------------------

    def candidates(self, view: SellerView) -> list[tuple[Vehicle, int]]:
        """Stocked vehicles not rejected, that fit what the buyer said (all of them if none fit)."""
        catalog = load_catalog()
        stock = [(catalog.vehicle(i.vehicle), i.floor) for i in view.brief.inventory]
        stock = [(v, f) for v, f in stock if v is not None and v.id not in view.rejected] or \
                [(v, f) for v, f in ((catalog.vehicle(i.vehicle), i.floor) for i in view.brief.inventory) if v]
        fits = [(v, f) for v, f in stock if self.fits(view, v)]
        return fits or stock

    @staticmethod
    def fits(view: SellerView, v: Vehicle) -> bool:
        return ((not view.bodies or v.body in view.bodies) and (not view.fuels or v.fuel in view.fuels)
                and v.seats >= view.seats)

    @staticmethod
    def feature_score(view: SellerView, v: Vehicle) -> int:
        return sum(1 for f in view.features if f in v.features)

    def affordable(self, view: SellerView, floor: int) -> bool:
        return view.budget is None or floor <= view.budget

    def pick(self, view: SellerView) -> Vehicle:
        """Best fit: within the stated budget, not twice called too dear, most features asked for,
        the vehicle already on the table, then the most room above the floor."""
        cands = self.candidates(view)
        current = view.offers[-1].vehicle if view.offers else None

        def key(vf: tuple[Vehicle, int]) -> tuple:
            v, floor = vf
            return (self.affordable(view, floor), view.too_dear.get(v.id, 0) < 2, self.feature_score(view, v),
                    v.id == current, v.list_price - floor, v.id)

        return max(cands, key=key)[0]

    def price(self, view: SellerView, vehicle: Vehicle, floor: float) -> float:
        """The next price of `vehicle`, never below `floor` (its floor plus the extras' cost)."""
        last = view.last_price(vehicle.id)
        if last is None:
            price = vehicle.list_price * self.markup
        else:
            price = last - self.concession * (last - floor)
            c = view.counter
            if c is not None and floor <= c < last:
                if self.counters == "match":
                    price = c
                elif self.counters == "split":
                    price = max(c, min(price, (c + last) / 2))
        if self.respects_budget and view.budget is not None and view.budget >= floor:
            price = min(price, view.budget)
        if self.final_floor and view.last_message:
            price = floor
        return max(price, floor)

    def extras(self, view: SellerView, vehicle: Vehicle) -> set[str]:
        """Extras the buyer asked about that the brief holds."""
        return {i.id for i in view.brief.incentives if i.id in view.extras}

    def adjust_for_extras(self, view: SellerView, vehicle: Vehicle, price: float, extras: set[str]) -> float:
        return price

    # -- words --------------------------------------------------------------------------------

    def pitch(self, view: SellerView, vehicle: Vehicle, offer: Offer, rng: random.Random) -> str:
        catalog = load_catalog()
        asked = [catalog.feature_name(f) for f in vehicle.features if f in view.features]
        shown = asked or [catalog.feature_name(f) for f in vehicle.features[:3]]
        extras = ""
        if offer.incentives:
            names = [(catalog.incentive(i).name if catalog.incentive(i) else i) for i in offer.incentives]
            extras = f", including {_join(names)}"
        lead = self.lead(view, vehicle, offer, rng)
        return (f"{lead}The {vehicle.summary()}; it comes with {_join(shown)}. "
                f"I can offer it at {_money(offer.price)}{extras}.")


    def lead(self, view: SellerView, vehicle: Vehicle, offer: Offer, rng: random.Random) -> str:
        """A few words on how this offer answers the buyer's last message."""
        if view.last_price(vehicle.id) is None:
            return ""
        c = view.counter
        if c is not None and c < (view.brief.floor(vehicle.id) or 0):
            return f"I can't go as low as {_money(c)} on this one, but I can move a little. "
        if c is not None and offer.price <= c:
            return f"You've got it: {_money(offer.price)}. "
        if c is not None and c < offer.price:
            return "Let's meet in the middle. " if self.counters == "split" else "This is already a sharp price. "
        return rng.choice(["Let me sharpen the price. ", "Here's a better number. ", "I've spoken to my manager. "])


class Consultative(Seller):
    """Needs first: asks what the buyer needs and spends, offers the stocked vehicle that fits
    best within the budget, adds the extras the buyer asked about, concedes steadily (30% of the
    gap to the floor per offer) and meets counters halfway; offers the floor on its last message."""

    name = "consultative"


class DiscountLed(Seller):
    """Discount-led: opens at once with an offer 5% below list on the vehicle with the most room
    (or, once it knows them, the best fit to the buyer's needs), halves the gap to the floor with
    each offer, and takes any counter at or above the floor."""

    name = "discount_led"
    ask_first = False
    markup = 0.95
    concession = 0.5
    counters = "match"
    opening = "Hi, {dealer} here with a deal you'll like!"

    def extras(self, view: SellerView, vehicle: Vehicle) -> set[str]:
        return set()  # it sells on price alone


class PushyUpseller(Seller):
    """Pushy upseller: offers the dearest stocked vehicle that fits what the buyer said, ignoring
    the budget, at 3% over list with the accessory pack priced in; concedes slowly (15% of the gap
    per offer), ignores counters, and steps down to a cheaper vehicle only after two price
    complaints about the current one."""

    name = "pushy_upseller"
    ask_first = False
    markup = 1.03
    concession = 0.15
    counters = "never"
    respects_budget = False
    final_floor = False
    opening = "Good news from {dealer}: I have exactly the car for you."

    def pick(self, view: SellerView) -> Vehicle:
        cands = self.candidates(view)
        fresh = [(v, f) for v, f in cands if view.too_dear.get(v.id, 0) < 2] or cands
        return max(fresh, key=lambda vf: (self.feature_score(view, vf[0]), vf[0].list_price, vf[0].id))[0]

    def extras(self, view: SellerView, vehicle: Vehicle) -> set[str]:
        return {i.id for i in view.brief.incentives if i.id == "accessory_pack"}

    def adjust_for_extras(self, view: SellerView, vehicle: Vehicle, price: float, extras: set[str]) -> float:
        if view.last_price(vehicle.id) is None:  # price the pack in on the first quote of a vehicle
            price += sum(view.brief.incentive_cost(i) or 0 for i in extras) * 1.5
        return price


class ByTheBook(Seller):
    """By the book: asks about needs, then quotes the best-fitting vehicle at its published price
    (list less a 2% internet discount) and never haggles; when the buyer says that vehicle does not
    fit or is too dear, it quotes the next-best fit that the stated budget covers at that price."""

    name = "by_the_book"
    markup = 0.98
    concession = 0.0
    counters = "never"
    respects_budget = False
    final_floor = False
    opening = "Good day, {dealer} sales desk."

    def pick(self, view: SellerView) -> Vehicle:
        cands = self.candidates(view)
        published = [(v, f) for v, f in cands if view.budget is None or v.list_price * self.markup <= view.budget]
        pool = [(v, f) for v, f in (published or cands) if view.too_dear.get(v.id, 0) < 1] or published or cands
        return max(pool, key=lambda vf: (self.feature_score(view, vf[0]), -vf[0].list_price, vf[0].id))[0]


# --- buyers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuyerView:
    obs: Observation
    persona: Persona
    sent: int  # own messages so far
    patience: int  # own messages it will send in all
    table: Offer | None
    mismatches: int  # offers so far whose vehicle misses a must-have

    @property
    def last_chance(self) -> bool:
        """This message is its last: accept or leave."""
        return self.sent + 1 >= self.patience or self.obs.turn >= self.obs.max_turns - 1

    @property
    def tau(self) -> float:
        """Share of its patience used, 0 at its first message, 1 at its last."""
        return min(1.0, self.sent / max(1, self.patience - 1))


class BuyerParams(Params):
    """Knobs a spec may set; None keeps the temperament's own."""

    depth: float | None = Field(None, ge=0.0, le=0.5)
    curve: float | None = Field(None, ge=0.1, le=10.0)


class Buyer(Scripted):
    """The shared buyer; a temperament sets the knobs below and the words."""

    role = BUYER
    depth = 0.08  # first limit: this share below its willingness to pay
    curve = 1.0  # exponent of the limit's rise over its patience (<1 early, >1 late)
    patience_delta = 0  # added to the persona's patience
    shares_budget = True
    leave_after_mismatches = 3  # leave once this many offers missed a must-have

    params_model = BuyerParams

    async def act(self, obs: Observation) -> Reply:
        self.check_role(obs)
        view = self.read(obs)
        rng = self.rng(obs)
        if view.table is None:
            if view.sent == 0:
                return Reply(text=self.introduce(view, rng))
            if view.last_chance:
                return Reply(text=f"{self.goodbye(rng)} {LEAVE}")
            return Reply(text=self.nudge(view, rng))
        text = self.respond(view, view.table, rng)
        if view.sent == 0 and ACCEPT not in text and LEAVE not in text:
            text = f"{self.introduce(view, rng)} {text}"  # the seller offered before asking
        return Reply(text=text)

    def read(self, obs: Observation) -> BuyerView:
        persona = own_persona(obs)
        catalog = load_catalog()
        sent = sum(1 for m in obs.dialogue if m.role == BUYER)
        mismatches, table = 0, None
        for msg in obs.dialogue:  # the table, by the domain's rule, and how many offers missed a need
            read = parse_offer(msg.text) if msg.role == SELLER else None
            if read is None:
                continue
            table = read.offer
            vehicle = catalog.vehicle(table.vehicle) if table is not None else None
            mismatches += bool(vehicle and missing_needs(vehicle, persona.must_haves, catalog))
        return BuyerView(obs=obs, persona=persona, sent=sent,
                         patience=max(2, persona.patience + self.patience_delta),
                         table=table, mismatches=mismatches)

    def limit(self, view: BuyerView, value: float) -> float:
        """The most it will pay now: rises from (1 - depth) * value to value over its patience."""
        return value * (1 - self.depth * (1 - view.tau) ** self.curve)

    def respond(self, view: BuyerView, offer: Offer, rng: random.Random) -> str:
        catalog = load_catalog()
        p = view.persona
        vehicle = catalog.vehicle(offer.vehicle)
        assert vehicle is not None  # the parser reads catalog vehicles only
        missing = missing_needs(vehicle, p.must_haves, catalog)
        if missing:
            if view.last_chance or view.mismatches >= self.leave_after_mismatches:
                return f"{self.goodbye(rng)} {LEAVE}"
            return self.mismatch(view, vehicle, missing, rng)
        value = willingness_to_pay(vehicle, p) + extras_value(offer.incentives, p)
        cap = min(float(p.budget), value)
        if offer.price <= min(self.limit(view, value), p.budget):
            return f"{self.agree(view, offer, rng)} {ACCEPT}"
        if view.last_chance:
            if offer.price <= cap:
                return f"{self.agree(view, offer, rng)} {ACCEPT}"
            return f"{self.goodbye(rng)} {LEAVE}"
        counter = math.floor(min(self.limit(view, value), p.budget, offer.price - 100) / 100) * 100
        return self.haggle(view, offer, counter, rng)

    # -- words (temperaments override) ------------------------------------------------------

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
        return (head + (f" with {_join(words)}" if words else "")).rstrip(",")

    def nice_words(self, p: Persona) -> list[str]:
        return [load_catalog().feature_name(f) for f in p.nice_to_haves]

    def wanted_extras(self, p: Persona) -> list[str]:
        """The extras worth the most to it, by name (it does not know which the seller has)."""
        catalog = load_catalog()
        best = sorted(((v, i) for i, v in p.incentive_values.items() if v >= 500), reverse=True)[:2]
        return [catalog.incentive(i).name for _, i in best if catalog.incentive(i)]

    def introduce(self, view: BuyerView, rng: random.Random) -> str:
        p = view.persona
        text = f"Hi. I need {self.needs_phrase(p)}."
        if p.nice_to_haves:
            text += f" Nice to have: {_join(self.nice_words(p))}."
        if self.shares_budget:
            text += f" My budget is {_money(p.budget)}."
        return text

    def nudge(self, view: BuyerView, rng: random.Random) -> str:
        return f"I need {self.needs_phrase(view.persona)}. What can you offer me, and at what price?"

    def mismatch(self, view: BuyerView, vehicle: Vehicle, missing: list[str], rng: random.Random) -> str:
        if view.sent == 0:  # its introduction, said in the same message, names the needs
            return f"That one doesn't work for me: {missing[0]}."
        return f"That doesn't work for me: I need {self.needs_phrase(view.persona)}."

    def haggle(self, view: BuyerView, offer: Offer, counter: float, rng: random.Random) -> str:
        over = " That's over my budget." if offer.price > view.persona.budget else ""
        return f"{over} Could you do {_money(counter)}?".strip()

    def agree(self, view: BuyerView, offer: Offer, rng: random.Random) -> str:
        return "Deal."

    def goodbye(self, rng: random.Random) -> str:
        return "I'll look elsewhere, thanks."


class Hurried(Buyer):
    """Hurried: short on time. Two messages less patience than its persona (at least 2), concedes
    early (its limit starts 4% below what the car is worth to it and rises fast), states needs and
    budget in one line, and leaves if it has no offer by its second message."""

    name = "hurried"
    depth = 0.04
    curve = 0.5
    patience_delta = -2

    def introduce(self, view: BuyerView, rng: random.Random) -> str:
        return f"Quick one: need {self.needs_phrase(view.persona)}. Max {_money(view.persona.budget)}."

    def nudge(self, view: BuyerView, rng: random.Random) -> str:
        return f"No time for chat. I'm leaving unless you name a car and a price. {LEAVE}"

    def haggle(self, view: BuyerView, offer: Offer, counter: float, rng: random.Random) -> str:
        too = "Over my budget. " if offer.price > view.persona.budget else ""
        return f"{too}{_money(counter)} and we're done."

    def agree(self, view: BuyerView, offer: Offer, rng: random.Random) -> str:
        return "Fine, done."

    def goodbye(self, rng: random.Random) -> str:
        return "Out of time, bye."


class Skeptical(Buyer):
    """Skeptical: distrusts salespeople. Keeps its budget to itself, opens 12% below what the car is
    worth to it and concedes late, asks for the extras it values most, and hangs up after the second
    offer of a vehicle that misses its needs ("you're not listening")."""

    name = "skeptical"
    depth = 0.12
    curve = 2.0
    shares_budget = False
    leave_after_mismatches = 2

    def introduce(self, view: BuyerView, rng: random.Random) -> str:
        ask = "" if view.table else " What do you actually have?"
        return f"I need {self.needs_phrase(view.persona)}. I'm not discussing my budget.{ask}"

    def haggle(self, view: BuyerView, offer: Offer, counter: float, rng: random.Random) -> str:
        ask = self.wanted_extras(view.persona)
        missing = [a for a in ask if not offer.incentives]
        extra = f" And I'd want {_join(missing, 'or')} thrown in." if missing else ""
        return f"That's too much. {_money(counter)} is what it's worth to me.{extra}"

    def mismatch(self, view: BuyerView, vehicle: Vehicle, missing: list[str], rng: random.Random) -> str:
        if view.sent == 0:
            return f"And that one doesn't work: {missing[0]}."
        return f"That doesn't work: {missing[0]}. I told you: I need {self.needs_phrase(view.persona)}."

    def agree(self, view: BuyerView, offer: Offer, rng: random.Random) -> str:
        return "All right. I'll take it."

    def goodbye(self, rng: random.Random) -> str:
        return "I've heard enough. Goodbye."


class Friendly(Buyer):
    """Friendly: open and easy-going. One message more patience than its persona, shares its needs,
    nice-to-haves, the extras it likes and its budget, opens 5% below what the car is worth to it
    and concedes evenly."""

    name = "friendly"
    depth = 0.05
    curve = 1.0
    patience_delta = 1

    def introduce(self, view: BuyerView, rng: random.Random) -> str:
        p = view.persona
        text = rng.choice(["Hi there, thanks for calling!", "Hello! Good timing, I'm shopping for a car."])
        text += f" I'm looking for {self.needs_phrase(p)}."
        if p.nice_to_haves:
            text += f" It would be lovely to have {_join(self.nice_words(p))}."
        extras = self.wanted_extras(p)
        if extras:
            text += f" Something like {_join(extras, 'or')} would be a nice bonus."
        return text + f" My budget is about {_money(p.budget)}."

    def haggle(self, view: BuyerView, offer: Offer, counter: float, rng: random.Random) -> str:
        over = "That's a bit over my budget. " if offer.price > view.persona.budget else "I like it! "
        return over + rng.choice([f"Could you do {_money(counter)}?", f"Would {_money(counter)} work for you?"])

    def agree(self, view: BuyerView, offer: Offer, rng: random.Random) -> str:
        return "Wonderful, you've got a deal!"


class Analytical(Buyer):
    """Analytical: states its requirements as a spec sheet with its budget, opens 8% below what the
    car is worth to it, concedes evenly, justifies each counter with numbers, and declines an offer
    that is worse for it than an earlier one (it asks for the earlier terms instead)."""

    name = "analytical"
    depth = 0.08
    curve = 1.0

    def introduce(self, view: BuyerView, rng: random.Random) -> str:
        p = view.persona
        lines = [f"Requirements: {'; '.join(self.needs_words(p))}."]
        if p.nice_to_haves:
            lines.append(f"Nice to have: {', '.join(self.nice_words(p))}.")
        ask = "" if view.table else " Please quote a specific vehicle and price."
        lines.append(f"Budget: {_money(p.budget)}.{ask}")
        return " ".join(lines)

    def respond(self, view: BuyerView, offer: Offer, rng: random.Random) -> str:
        best = self.best_earlier(view)
        if best is not None and not view.last_chance and self.surplus(view, best) > self.surplus(view, offer) + 1:
            v = load_catalog().vehicle(best.vehicle)
            name = v.name if v else best.vehicle
            return (f"Your earlier quote for the {name} at {_money(best.price)} was better value for me. "
                    f"Can you do at least that?")
        return super().respond(view, offer, rng)

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

    def haggle(self, view: BuyerView, offer: Offer, counter: float, rng: random.Random) -> str:
        budget = view.persona.budget
        over = ""
        if offer.price > budget:
            over = f"That is {_money(offer.price - budget)} over my budget of {_money(budget)}. "
        return f"{over}By my numbers {_money(counter)} is a fair price for it."

    def agree(self, view: BuyerView, offer: Offer, rng: random.Random) -> str:
        return "The numbers work. Accepted."

    def goodbye(self, rng: random.Random) -> str:
        return "The numbers don't work for me. I'll pass."


class PersonaBuyer(Buyer):
    """Plays the temperament the scenario gives its buyer (the persona's `temperament`), so a panel
    of it follows the scenario set's mix of temperaments instead of fixing one."""

    name = "persona"

    params_model = Params  # the knobs are those of the temperament it plays

    async def act(self, obs: Observation) -> Reply:
        self.check_role(obs)
        temperament = str(obs.private.get("persona", {}).get("temperament", "friendly"))
        return await _BY_TEMPERAMENT.get(temperament, _BY_TEMPERAMENT["friendly"]).act(obs)


SELLERS: dict[str, type[Seller]] = {cls.name: cls for cls in (Consultative, DiscountLed, PushyUpseller, ByTheBook)}
BUYERS: dict[str, type[Buyer]] = {cls.name: cls for cls in (Hurried, Skeptical, Friendly, Analytical, PersonaBuyer)}
AGENTS: dict[str, type[Scripted]] = {**SELLERS, **BUYERS}
_BY_TEMPERAMENT: dict[str, Buyer] = {name: BUYERS[name]() for name in TEMPERAMENTS}
