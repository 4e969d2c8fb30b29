"""The vehicle catalog: versioned data shipped inside the package (catalog.json), read once.

The catalog is public: every participant may know every vehicle's specs and list price. What is
private is which vehicles a seller has on hand and its floor prices (the seller brief), and what a
buyer needs and will pay (the buyer persona); see models.py.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from ibrl_bench.domains.base import content_hash

Body = Literal["sedan", "hatchback", "suv", "pickup", "minivan", "wagon", "coupe"]
Fuel = Literal["petrol", "diesel", "hybrid", "plugin_hybrid", "electric"]
BODIES: tuple[str, ...] = Body.__args__  # type: ignore[attr-defined]
FUELS: tuple[str, ...] = Fuel.__args__  # type: ignore[attr-defined]
_ID = r"^[a-z0-9][a-z0-9_-]*$"


class Feature(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=_ID)
    name: str
    aliases: tuple[str, ...]  # lower-case phrases that name it in free text (scripted sellers read them)


class IncentiveKind(BaseModel):
    """An extra a seller may add to an offer: it costs the dealer `base_cost` (scaled per brief)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=_ID)
    name: str
    base_cost: int = Field(gt=0)
    aliases: tuple[str, ...]


class Vehicle(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=_ID)
    make: str
    model: str
    trim: str
    body: Body
    fuel: Fuel
    seats: int = Field(ge=2, le=9)
    consumption_l_100km: float | None = Field(None, gt=0)  # combustion engines, hybrids, plug-ins
    electric_range_km: int | None = Field(None, gt=0)  # electric and plug-in hybrid
    features: tuple[str, ...]
    list_price: int = Field(gt=0)

    @model_validator(mode="after")
    def _energy_fields_match_fuel(self) -> Vehicle:
        needs_range = self.fuel in ("electric", "plugin_hybrid")
        needs_consumption = self.fuel != "electric"
        if needs_range != (self.electric_range_km is not None):
            raise ValueError(f"{self.id}: electric_range_km is for electric and plug-in hybrid vehicles only")
        if needs_consumption != (self.consumption_l_100km is not None):
            raise ValueError(f"{self.id}: consumption_l_100km is for vehicles that burn fuel only")
        return self

    @property
    def name(self) -> str:
        return f"{self.make} {self.model} {self.trim}"

    def summary(self) -> str:
        """One line a salesperson would say: body, seats, fuel and energy use."""
        energy = []
        if self.consumption_l_100km is not None:
            energy.append(f"{self.consumption_l_100km:g} l/100 km")
        if self.electric_range_km is not None:
            energy.append(f"{self.electric_range_km} km electric range")
        fuel = self.fuel.replace("_", "-")
        return f"{self.name}: {self.body}, {self.seats} seats, {fuel}, {', '.join(energy)}"


class Catalog(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str
    currency: str
    note: str = ""
    body_types: tuple[Body, ...]
    fuels: tuple[Fuel, ...]
    features: tuple[Feature, ...]
    incentives: tuple[IncentiveKind, ...]
    vehicles: tuple[Vehicle, ...] = Field(min_length=20)
    _by_id: dict[str, Vehicle] = PrivateAttr(default_factory=dict)
    _ref: str = PrivateAttr("")

    @model_validator(mode="after")
    def _consistent(self) -> Catalog:
        for kind, items in (("vehicle", self.vehicles), ("feature", self.features), ("incentive", self.incentives)):
            ids = [x.id for x in items]
            if len(ids) != len(set(ids)):
                raise ValueError(f"duplicate {kind} ids")
        known = {f.id for f in self.features}
        for v in self.vehicles:
            unknown = set(v.features) - known
            if unknown:
                raise ValueError(f"{v.id}: unknown features {sorted(unknown)}")
        return self

    def model_post_init(self, __context: object) -> None:
        self._by_id = {v.id: v for v in self.vehicles}
        self._ref = f"{self.version}@{content_hash(self.model_dump(mode='json'), 12)}"

    def vehicle(self, vehicle_id: str) -> Vehicle | None:
        # Straight to the private dict: pydantic's attribute hook is slow on this hot path.
        return self.__pydantic_private__["_by_id"].get(vehicle_id)  # type: ignore[index]

    def incentive(self, incentive_id: str) -> IncentiveKind | None:
        return next((i for i in self.incentives if i.id == incentive_id), None)

    def feature_name(self, feature_id: str) -> str:
        return next((f.name for f in self.features if f.id == feature_id), feature_id)

    @property
    def ref(self) -> str:
        """`version@hash`: recorded in every scenario, so editing the data changes scenario hashes
        even if someone forgets to bump the version."""
        return self._ref


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """The catalog shipped with the package (importlib.resources, so it works from a wheel too)."""
    text = resources.files("ibrl_bench.domains.telesales").joinpath("catalog.json").read_text(encoding="utf-8")
    return Catalog.model_validate(json.loads(text))
