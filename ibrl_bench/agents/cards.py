"""Counterpart cards: YAML files in counterparts/ that pin whom a number was measured against.

A card names the backend, the model and its snapshot or revision, the base URL, the *name* of the
environment variable holding the key (never the key), generation and transport parameters, the
prompt version per domain, and the domains and roles it may play. `card:NAME` works wherever a
spec does; the card's content hash is recorded in the run manifest and is part of a run's
identity, so a changed card never mixes into a resumed run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ibrl_bench.domains import get_domain
from ibrl_bench.domains.base import content_hash
from ibrl_bench.errors import UserError
from ibrl_bench.yaml_files import read_yaml

Backend = Literal["openai", "litellm", "hf", "vllm", "scripted"]


class Prices(BaseModel):
    """What the provider charged, in USD per million tokens, on the date it was read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)
    as_of: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")  # the date the prices were read (YYYY-MM-DD)


class Card(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = Field(ge=1)
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    description: str = ""
    backend: Backend
    model: str
    revision: str | None = None  # snapshot, dated model id, or hub commit
    base_url: str | None = None
    key_env: str | None = None  # the NAME of the variable that holds the key
    params: dict[str, Any] = {}  # generation and transport parameters of the backend
    pricing: dict[str, float] = {}  # input_per_mtok, output_per_mtok (USD), where known; `prices` is preferred
    # The provider's prices with their date: what cost estimates and budgets use. Prices change
    # without the model changing, so they stay out of the card's hash, as `fidelity` does.
    prices: Prices | None = None
    prompt_versions: dict[str, str] = {}  # domain -> the prompt version this card is pinned to
    domains: list[str]
    roles: dict[str, list[str]] = {}  # domain -> roles it may play; a domain not listed: any
    # domain -> what `ibrl-bench counterparts check NAME --gate` measured (leaderboard/fidelity.py).
    # A measurement of the card, not part of what it pins: left out of its hash.
    fidelity: dict[str, dict[str, Any]] = {}

    @field_validator("key_env")
    @classmethod
    def _a_name_not_a_key(cls, v: str | None) -> str | None:
        if v is not None and not v.replace("_", "").isalnum():
            raise ValueError("key_env must be the name of an environment variable, not a key")
        return v

    @property
    def hash(self) -> str:
        return content_hash(self.model_dump(mode="json", exclude={"fidelity", "prices"}))

    def spec(self) -> str:
        """The backend spec this card stands for (no key: only the variable's name)."""
        params = dict(self.params)
        if self.backend in ("openai", "litellm"):
            if self.key_env or self.backend == "openai":
                params["key_env"] = self.key_env or "none"
            prices = self.prices.model_dump() if self.prices is not None else self.pricing
            if prices.get("input_per_mtok"):
                params["price_in"] = prices["input_per_mtok"]
            if prices.get("output_per_mtok"):
                params["price_out"] = prices["output_per_mtok"]
        target = self.model + (f"@{self.base_url}" if self.base_url else "")
        query = urlencode({k: str(v).lower() if isinstance(v, bool) else v for k, v in params.items()})
        return f"{self.backend}:{target}" + (f"?{query}" if query else "")


def counterparts_dir() -> Path:
    """$IBRL_BENCH_COUNTERPARTS, else ./counterparts, else the one next to the package source."""
    env = os.environ.get("IBRL_BENCH_COUNTERPARTS")
    if env:
        return Path(env)
    here = Path.cwd() / "counterparts"
    if here.is_dir():
        return here
    return Path(__file__).resolve().parents[2] / "counterparts"


def card_path(name: str) -> Path:
    return counterparts_dir() / f"{name}.yaml"


def available_cards() -> list[str]:
    folder = counterparts_dir()
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def load_card(name: str) -> Card:
    path = card_path(name)
    if not path.is_file():
        known = ", ".join(available_cards()) or "none found"
        raise UserError(f"unknown card {name!r} (looked in {path.parent}); available: {known}")
    card = read_yaml(path, Card, "card", "counterparts/README.md")
    if card.id != name:
        raise UserError(f"{path} has id {card.id!r}; the file name and `id` must match")
    return card


def check_card_for(card: Card, domain: str) -> None:
    if domain not in card.domains:
        raise UserError(f"card {card.id} is for {', '.join(card.domains)}, not {domain}")
    pinned = card.prompt_versions.get(domain)
    current = get_domain(domain).prompt_version
    if pinned and current and pinned != current:
        raise UserError(
            f"card {card.id} is pinned to prompt {pinned}, but this harness speaks {current}; "
            "re-pin the card (new version) after checking the counterpart under the new prompt"
        )


def card_for(name: str, domain: str) -> Card:
    """The card NAME, checked for `domain`."""
    card = load_card(name)
    check_card_for(card, domain)
    return card
