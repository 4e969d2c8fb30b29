"""What the scripted TeleSales sellers and buyers share: the roles, the per-decision RNG, their own
brief or persona read from the observation, and how they write money and lists."""

from __future__ import annotations

import json
import random
from functools import lru_cache

from ibrl_bench.agents.scripted import ScriptedAgent
from ibrl_bench.domains.base import Observation
from ibrl_bench.domains.telesales.models import Brief, Persona
from ibrl_bench.errors import FatalAgentError

SELLER, BUYER = "seller", "buyer"


def money(x: float) -> str:
    return f"${x:,.0f}"


def join(words: list[str], last: str = "and") -> str:
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
