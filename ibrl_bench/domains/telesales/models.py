"""The private briefs of the two roles, and an offer.

`Persona` is the buyer's and only the buyer's; `Brief` is the seller's and only the seller's. A
scenario holds both (Scenario.data = {"catalog", "seller", "buyer"}); the domain shows each role
its own. Both are validated at the boundary (scenario data, an agent reading its observation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ibrl_bench.domains.telesales.catalog import Body, Fuel, load_catalog

Tier = Literal["easy", "medium", "hard"]
Temperament = Literal["hurried", "skeptical", "friendly", "analytical"]
TIERS: tuple[str, ...] = Tier.__args__  # type: ignore[attr-defined]
TEMPERAMENTS: tuple[str, ...] = Temperament.__args__  # type: ignore[attr-defined]


class MustHaves(BaseModel):
    """Hard needs: a vehicle that misses any of them will not do (the sale falls through).
    An empty tuple (or 0 seats) means no constraint of that kind."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bodies: tuple[Body, ...] = ()
    fuels: tuple[Fuel, ...] = ()
    min_seats: int = Field(0, ge=0, le=9)
    features: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        """How many separate constraints there are (each body/fuel list counts once)."""
        return bool(self.bodies) + bool(self.fuels) + bool(self.min_seats) + len(self.features)


class Persona(BaseModel):
    """The buyer: what it needs, what it will pay, how it behaves. Private to the buyer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    budget: int = Field(gt=0)  # the most it can pay; above it the financing fails
    reservation: int = Field(gt=0)  # hidden: the most it will pay for a vehicle that just meets its needs
    must_haves: MustHaves
    nice_to_haves: tuple[str, ...] = ()
    nice_bonus: int = Field(0, ge=0)  # extra it will pay per nice-to-have the vehicle has
    incentive_values: dict[str, int] = {}  # what each extra is worth to it (absent: 0)
    price_sensitivity: float = Field(ge=0, le=1)
    patience: int = Field(ge=1)  # how many of its own messages before it leaves
    temperament: Temperament
    difficulty: Tier

    @model_validator(mode="after")
    def _consistent(self) -> Persona:
        if self.reservation > self.budget:
            raise ValueError("reservation must not exceed budget")
        catalog = load_catalog()
        known = {f.id for f in catalog.features}
        for fid in (*self.must_haves.features, *self.nice_to_haves):
            if fid not in known:
                raise ValueError(f"unknown feature {fid!r}")
        extras = {i.id for i in catalog.incentives}
        if set(self.incentive_values) - extras:
            raise ValueError(f"unknown incentives {sorted(set(self.incentive_values) - extras)}")
        return self


class StockItem(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    vehicle: str  # a catalog id
    floor: int = Field(gt=0)  # the lowest price it may sell this vehicle for


class IncentiveOffer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str  # a catalog incentive id
    cost: int = Field(ge=0)  # what it costs the dealer when included in a sale


class Brief(BaseModel):
    """The seller: what is on the lot, the floor of each vehicle, the extras it may give."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dealership: str
    inventory: tuple[StockItem, ...] = Field(min_length=1)
    incentives: tuple[IncentiveOffer, ...] = ()

    @model_validator(mode="after")
    def _known_ids(self) -> Brief:
        catalog = load_catalog()
        for item in self.inventory:
            vehicle = catalog.vehicle(item.vehicle)
            if vehicle is None:
                raise ValueError(f"inventory names unknown vehicle {item.vehicle!r}")
            if item.floor >= vehicle.list_price:  # the rewards divide by list - floor
                raise ValueError(f"floor of {item.vehicle} must be below its list price")
        if len({i.vehicle for i in self.inventory}) != len(self.inventory):
            raise ValueError("a vehicle is listed twice in the inventory")
        for inc in self.incentives:
            if catalog.incentive(inc.id) is None:
                raise ValueError(f"unknown incentive {inc.id!r}")
        return self

    def floor(self, vehicle_id: str) -> int | None:
        return next((i.floor for i in self.inventory if i.vehicle == vehicle_id), None)

    def incentive_cost(self, incentive_id: str) -> int | None:
        return next((i.cost for i in self.incentives if i.id == incentive_id), None)


@dataclass(frozen=True)
class Offer:
    """A formal offer as read from a seller's `<offer>` tag."""

    vehicle: str  # a catalog id
    price: float  # dollars
    incentives: tuple[str, ...] = ()  # catalog incentive ids, sorted, no duplicates
