"""Rule-based agents: offline, deterministic given the episode seed, speaking the text protocol."""

from __future__ import annotations

from typing import Any, ClassVar

from ibrl_bench.agents.base import Agent
from ibrl_bench.agents.params import Params, parse_params
from ibrl_bench.errors import UserError


class ScriptedAgent(Agent):
    """A rule-based agent whose spec parameters are the fields of its `params_model`; each is set as
    an attribute of the agent, except those left None, which keep the class's own value."""

    params_model: ClassVar[type[Params]] = Params

    def __init__(self, params: Params | None = None):
        for name, value in params if params is not None else self.params_model():
            if value is not None:
                setattr(self, name, value)


def registry(domain: str) -> dict[str, type[ScriptedAgent]]:
    if domain == "dealnodeal":
        from ibrl_bench.agents.scripted.dealnodeal import NEGOTIATORS

        return NEGOTIATORS
    if domain == "telesales":
        from ibrl_bench.agents.scripted.telesales import AGENTS

        return AGENTS
    return {}


def build_scripted(domain: str, name: str, params: dict[str, Any]) -> ScriptedAgent:
    agents = registry(domain)
    if not agents:
        raise UserError(f"no scripted agents for domain {domain!r}")
    if name not in agents:
        raise UserError(
            f"unknown scripted agent {domain}/{name}; available: {', '.join(sorted(agents))}"
        )
    cls = agents[name]
    return cls(parse_params(cls.params_model, params, f"scripted:{domain}/{name}"))
