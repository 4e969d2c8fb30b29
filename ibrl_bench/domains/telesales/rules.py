"""TeleSales rules: needs, willingness to pay, when an accepted offer is a sale, and the rewards.

Pure functions; docs/telesales.md states the same rules and formulas.

An accepted offer is a sale (Success@1) when it is valid on the seller's side (the vehicle is in
the inventory, the price is at or above its floor, every extra named is one the brief offers) and
on the buyer's side (the vehicle meets every must-have, the price is at or below the budget).
Otherwise the sale falls through: both sides score 0.

Rewards of a sale of vehicle v at price p with extras I (0 for both sides without a sale):
    room   = list(v) - floor(v)                       the dealer's discount room, > 0
    margin = p - floor(v) - cost(I)                   dollars the dealer keeps above its floor
    seller = 0.5 * (1 + clip(margin / room, -1, 1))   1 at list or above, 0.5 at the floor,
                                                      below 0.5 when the extras eat into the floor
    wtp    = min(budget, reservation + nice_bonus * #(nice-to-haves v has))
    buyer  = clip((wtp + value(I) - p) / room, -1, 1) surplus in units of the same room
"""

from __future__ import annotations

from dataclasses import dataclass

from ibrl_bench.domains.telesales.catalog import Catalog, Vehicle
from ibrl_bench.domains.telesales.models import Brief, MustHaves, Offer, Persona


def missing_needs(vehicle: Vehicle, needs: MustHaves, catalog: Catalog) -> list[str]:
    """The must-haves a vehicle misses, in words; empty when it meets them all."""
    missing = []
    if needs.bodies and vehicle.body not in needs.bodies:
        missing.append(f"body is {vehicle.body}, needs {' or '.join(needs.bodies)}")
    if needs.fuels and vehicle.fuel not in needs.fuels:
        missing.append(f"fuel is {vehicle.fuel}, needs {' or '.join(needs.fuels)}")
    if vehicle.seats < needs.min_seats:
        missing.append(f"{vehicle.seats} seats, needs at least {needs.min_seats}")
    for fid in needs.features:
        if fid not in vehicle.features:
            missing.append(f"no {catalog.feature_name(fid)}")
    return missing


def meets_needs(vehicle: Vehicle, needs: MustHaves) -> bool:
    return (
        (not needs.bodies or vehicle.body in needs.bodies)
        and (not needs.fuels or vehicle.fuel in needs.fuels)
        and vehicle.seats >= needs.min_seats
        and all(f in vehicle.features for f in needs.features)
    )


def willingness_to_pay(vehicle: Vehicle, persona: Persona) -> int:
    """What a vehicle that meets the needs is worth to the buyer, extras aside; never above budget."""
    nice = sum(1 for f in persona.nice_to_haves if f in vehicle.features)
    return min(persona.budget, persona.reservation + persona.nice_bonus * nice)


def extras_value(incentives: tuple[str, ...], persona: Persona) -> int:
    return sum(persona.incentive_values.get(i, 0) for i in incentives)


def extras_cost(incentives: tuple[str, ...], brief: Brief) -> int:
    """Cost to the dealer of the extras it can give (an unavailable one voids the offer anyway)."""
    return sum(brief.incentive_cost(i) or 0 for i in incentives)


def offer_problems(offer: Offer, brief: Brief) -> list[str]:
    """Why the seller may not make this offer: the seller-side validity of an offer."""
    problems = []
    floor = brief.floor(offer.vehicle)
    if floor is None:
        problems.append(f"{offer.vehicle} is not in the inventory")
    elif offer.price < floor:
        problems.append(f"price {offer.price:,.0f} is below the floor {floor:,}")
    for inc in offer.incentives:
        if brief.incentive_cost(inc) is None:
            problems.append(f"extra {inc} is not available")
    return problems


def sale_problems(offer: Offer, persona: Persona, catalog: Catalog) -> list[str]:
    """Why the buyer cannot complete this purchase: the buyer-side validity of an offer."""
    vehicle = catalog.vehicle(offer.vehicle)
    if vehicle is None:  # the parser only reads catalog ids, so this is a caller's mistake
        return [f"{offer.vehicle} is not a catalog vehicle"]
    problems = [f"misses a must-have: {m}" for m in missing_needs(vehicle, persona.must_haves, catalog)]
    if offer.price > persona.budget:
        problems.append(f"price {offer.price:,.0f} is over the budget {persona.budget:,}")
    return problems


@dataclass(frozen=True)
class Verdict:
    success: bool
    problems: tuple[str, ...]  # empty on success; otherwise why the sale falls through


def judge(offer: Offer, brief: Brief, persona: Persona, catalog: Catalog) -> Verdict:
    """Whether an accepted offer is a valid sale (the Success@1 event)."""
    problems = (*offer_problems(offer, brief), *sale_problems(offer, persona, catalog))
    return Verdict(success=not problems, problems=problems)


@dataclass(frozen=True)
class SaleTerms:
    """The numbers of a sale; shares are of the vehicle's list price."""

    seller_reward: float
    buyer_reward: float
    price_share_of_list: float
    seller_margin: float  # (price - floor - cost of extras) / list
    buyer_surplus: float  # (wtp + value of extras - price) / list


def _clip(x: float, low: float, high: float) -> float:
    return max(low, min(high, x))


def sale_terms(offer: Offer, brief: Brief, persona: Persona, catalog: Catalog) -> SaleTerms:
    """Rewards and metrics of a valid sale (call only when `judge(...).success`)."""
    vehicle = catalog.vehicle(offer.vehicle)
    floor = brief.floor(offer.vehicle)
    assert vehicle is not None and floor is not None
    room = vehicle.list_price - floor
    margin = offer.price - floor - extras_cost(offer.incentives, brief)
    surplus = willingness_to_pay(vehicle, persona) + extras_value(offer.incentives, persona) - offer.price
    return SaleTerms(
        seller_reward=0.5 * (1 + _clip(margin / room, -1.0, 1.0)),
        buyer_reward=_clip(surplus / room, -1.0, 1.0),
        price_share_of_list=offer.price / vehicle.list_price,
        seller_margin=margin / vehicle.list_price,
        buyer_surplus=surplus / vehicle.list_price,
    )
