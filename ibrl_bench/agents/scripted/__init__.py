"""Rule-based agents: offline, deterministic given the episode seed, speaking the text protocol."""

from __future__ import annotations

from typing import Any

from ibrl_bench.agents.base import Agent
from ibrl_bench.errors import UserError


def registry(domain: str) -> dict[str, type]:
    if domain == "dealnodeal":
        from ibrl_bench.agents.scripted.dealnodeal import NEGOTIATORS

        return NEGOTIATORS
    if domain == "telesales":
        from ibrl_bench.agents.scripted.telesales import AGENTS

        return AGENTS
    return {}


def build_scripted(domain: str, name: str, params: dict[str, Any]) -> Agent:
    agents = registry(domain)
    if not agents:
        raise UserError(f"no scripted agents for domain {domain!r}")
    if name not in agents:
        raise UserError(
            f"unknown scripted agent {domain}/{name}; available: {', '.join(sorted(agents))}"
        )
    from ibrl_bench.agents.spec import call_with_params

    return call_with_params(agents[name], params, f"scripted:{domain}/{name}")
