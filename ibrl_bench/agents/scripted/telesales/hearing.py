"""How the scripted TeleSales agents read the other side's text.

A seller hears the buyer with keyword cues (`hear`: body types, fuels, seats, catalog feature and
extra aliases, money amounts in sentences about budget, complaints) and gathers them over the
dialogue into a `SellerView`; a buyer reads the seller's offers with the domain's parser into a
`BuyerView`. Reading one message is cached: every call re-reads the whole public dialogue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from ibrl_bench.agents.scripted.telesales.common import BUYER, SELLER, own_brief, own_persona
from ibrl_bench.domains.base import Observation
from ibrl_bench.domains.telesales.catalog import load_catalog
from ibrl_bench.domains.telesales.models import Brief, Offer, Persona
from ibrl_bench.domains.telesales.parser import find_incentives, money_amounts, normalize, parse_offer
from ibrl_bench.domains.telesales.rules import missing_needs

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


def read_buyer(obs: Observation, patience_delta: int) -> BuyerView:
    """What a buyer knows at one call: its persona, its messages so far, the offer on the table."""
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
                     patience=max(2, persona.patience + patience_delta),
                     table=table, mismatches=mismatches)
