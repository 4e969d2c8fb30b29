"""Scripted TeleSales sellers. They pick a stocked vehicle and a price from what they heard
(hearing.py) and speak the canonical offer tag; never a vehicle out of stock, never below its floor.
Strategies (class docstrings say more):
  consultative    asks about needs first, offers the best fit, meets counters halfway
  discount_led    opens with a discounted offer at once, concedes fast, takes any counter above floor
  pushy_upseller  offers the dearest vehicle that fits, above list with an accessory pack; slow
  by_the_book     asks, then quotes the best fit at its published price; never haggles
"""

from __future__ import annotations

import math
import random

from pydantic import Field

from ibrl_bench.agents.base import Reply
from ibrl_bench.agents.params import Params
from ibrl_bench.agents.scripted.telesales.common import SELLER, Scripted, join, money
from ibrl_bench.agents.scripted.telesales.hearing import SellerView, read_seller
from ibrl_bench.domains.base import Observation
from ibrl_bench.domains.telesales.catalog import Vehicle, load_catalog
from ibrl_bench.domains.telesales.models import Offer
from ibrl_bench.domains.telesales.parser import format_offer


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
            extras = f", including {join(names)}"
        lead = self.lead(view, vehicle, offer, rng)
        return (f"{lead}The {vehicle.summary()}; it comes with {join(shown)}. "
                f"I can offer it at {money(offer.price)}{extras}.")

    def lead(self, view: SellerView, vehicle: Vehicle, offer: Offer, rng: random.Random) -> str:
        """A few words on how this offer answers the buyer's last message."""
        if view.last_price(vehicle.id) is None:
            return ""
        c = view.counter
        if c is not None and c < (view.brief.floor(vehicle.id) or 0):
            return f"I can't go as low as {money(c)} on this one, but I can move a little. "
        if c is not None and offer.price <= c:
            return f"You've got it: {money(offer.price)}. "
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


class FirmSeller(Seller):
    """A seller that holds to its own prices: it ignores counters and the stated budget, and does not
    drop to the floor on its last message."""

    counters = "never"
    respects_budget = False
    final_floor = False


class PushyUpseller(FirmSeller):
    """Pushy upseller: offers the dearest stocked vehicle that fits what the buyer said, ignoring
    the budget, at 3% over list with the accessory pack priced in; concedes slowly (15% of the gap
    per offer), ignores counters, and steps down to a cheaper vehicle only after two price
    complaints about the current one."""

    name = "pushy_upseller"
    ask_first = False
    markup = 1.03
    concession = 0.15
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


class ByTheBook(FirmSeller):
    """By the book: asks about needs, then quotes the best-fitting vehicle at its published price
    (list less a 2% internet discount) and never haggles; when the buyer says that vehicle does not
    fit or is too dear, it quotes the next-best fit that the stated budget covers at that price."""

    name = "by_the_book"
    markup = 0.98
    concession = 0.0
    opening = "Good day, {dealer} sales desk."

    def pick(self, view: SellerView) -> Vehicle:
        cands = self.candidates(view)
        published = [(v, f) for v, f in cands if view.budget is None or v.list_price * self.markup <= view.budget]
        pool = [(v, f) for v, f in (published or cands) if view.too_dear.get(v.id, 0) < 1] or published or cands
        return max(pool, key=lambda vf: (self.feature_score(view, vf[0]), -vf[0].list_price, vf[0].id))[0]


SELLERS: dict[str, type[Seller]] = {cls.name: cls for cls in (Consultative, DiscountLed, PushyUpseller, ByTheBook)}
