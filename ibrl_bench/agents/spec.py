"""Agent specs: the one place that turns a string into an agent.

Grammar: `KIND:TARGET[?key=value&key=value]`, for example

    scripted:dealnodeal/boulware?beta=0.1   a rule-based agent (the domain may be left out)
    python:my_pkg.agents:make_agent?temp=1   a user's own agent: module, then a factory or class
    openai:MODEL@URL  litellm:MODEL  hf:PATH  vllm:PATH  card:NAME   model backends and cards

Parameter values that read as numbers or booleans are converted; everything else stays a string.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import math
import os
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict

from ibrl_bench.agents.base import Agent
from ibrl_bench.errors import UserError

if TYPE_CHECKING:
    from ibrl_bench.agents.cards import Card

KINDS = ("scripted", "python", "openai", "litellm", "hf", "vllm", "card", "panel")
MODEL_KINDS = ("openai", "litellm", "hf", "vllm", "card")  # agents that read the domain's prompts
# Model backends live in their own modules, imported only when a spec names them: their
# libraries (openai, litellm, torch, vllm) stay off the import path of the core. Each module
# has `from_spec(spec: AgentSpec, domain: str) -> Agent`.
_BACKENDS = {
    "openai": "ibrl_bench.agents.openai_api",
    "litellm": "ibrl_bench.agents.litellm_api",
    "hf": "ibrl_bench.agents.hf_local",
    "vllm": "ibrl_bench.agents.vllm_local",
}
_SPEC_RE = re.compile(r"^(?P<kind>[a-z_]+):(?P<target>[^?\s]+)(?:\?(?P<query>\S*))?$")


class AgentSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: str
    target: str
    params: dict[str, Any] = {}
    text: str


def _coerce(value: str) -> Any:
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def parse_spec(text: str) -> AgentSpec:
    text = text.strip()
    m = _SPEC_RE.match(text)
    if not m:
        raise UserError(
            f"malformed agent spec {text!r}; expected KIND:TARGET[?key=value], "
            "e.g. scripted:dealnodeal/boulware"
        )
    kind, target, query = m["kind"], m["target"], m["query"] or ""
    if kind not in KINDS:
        raise UserError(f"unknown agent kind {kind!r} in {text!r}; known kinds: {', '.join(KINDS)}")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise UserError(f"malformed parameters {query!r} in spec {text!r}; use key=value&key=value") from None
    if any(not k for k, _ in pairs):
        raise UserError(f"malformed parameters {query!r} in spec {text!r}; every parameter needs a name: key=value")
    params = {k: _coerce(v) for k, v in pairs}
    for k, v in params.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise UserError(f"parameter {k}={v} in spec {text!r} is not a finite number; give a number such as {k}=0.5")
    return AgentSpec(kind=kind, target=target, params=params, text=text)


@dataclass(frozen=True)
class Seat:
    """An agent with what it was built from: the spec as written, and the card it stands for (the
    card's hash goes into the run's identity, its roles limit where it may sit)."""

    spec: str
    agent: Agent
    card: Card | None = None


def build_agent(spec: str | AgentSpec, domain: str) -> Seat:
    """Make the agent a spec names, for a run of `domain`."""
    parsed = parse_spec(spec) if isinstance(spec, str) else spec
    if parsed.kind == "card":
        from ibrl_bench.agents.cards import card_for

        if parsed.params:
            raise UserError(f"{parsed.text}: a card pins its parameters; edit the card (and its version) instead")
        card = card_for(parsed.target, domain)
        return Seat(parsed.text, build_agent(card.spec(), domain).agent, card)
    if parsed.kind == "scripted":
        agent = _scripted(parsed, domain)
    elif parsed.kind == "python":
        agent = _plugin(parsed)
    elif parsed.kind == "panel":
        raise UserError(f"{parsed.text} names several agents; use it with --counterpart or --policy")
    else:
        try:
            backend = importlib.import_module(_BACKENDS[parsed.kind])
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("ibrl_bench"):
                raise UserError(
                    f"agent kind {parsed.kind!r} ({parsed.text}) is not available in this version of "
                    "ibrl-bench; use scripted: or python:module:factory"
                ) from None
            raise
        agent = backend.from_spec(parsed, domain)
    return Seat(parsed.text, agent)


def _scripted(spec: AgentSpec, domain: str) -> Agent:
    from ibrl_bench.agents.scripted import build_scripted

    agent_domain, _, name = spec.target.rpartition("/")
    if agent_domain and agent_domain != domain:
        raise UserError(f"{spec.text} is an agent for {agent_domain}, but this run plays {domain}")
    return build_scripted(domain, name, dict(spec.params))


def _plugin(spec: AgentSpec) -> Agent:
    module_name, sep, attr = spec.target.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"malformed plugin spec {spec.text!r}; expected python:package.module:factory")
    import_from_cwd()
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UserError(f"cannot import {module_name!r} for {spec.text}: {e}") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's module failed while loading
        raise UserError(f"importing {module_name!r} for {spec.text} raised {_one_line(e)}; fix the module") from None
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise UserError(f"{module_name} has no callable {attr!r} (from {spec.text})")
    agent = call_with_params(factory, spec.params, spec.text)
    act = getattr(agent, "act", None)
    if act is None or not inspect.iscoroutinefunction(act):
        raise UserError(
            f"{spec.text} returned {type(agent).__name__}, which has no `async def act(obs)`; "
            "subclass ibrl_bench.agents.base.Agent"
        )
    return agent


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:300] if text else type(e).__name__


def import_from_cwd() -> None:
    """Let a user's package in the current folder import, as `python -m` would: the `ibrl-bench`
    script, unlike `python -m`, does not put the current folder on the import path."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)


def call_with_params(factory: Any, params: dict[str, Any], what: str) -> Any:
    """`factory(**params)`, the parameters first checked against the factory's signature (names and
    annotated types) by the same path as every backend's (agents/params.py)."""
    from ibrl_bench.agents.params import parse_params, signature_model

    model = signature_model(factory, getattr(factory, "__name__", "Factory"))
    if model is not None:
        checked = parse_params(model, params, what)
        params = {name: getattr(checked, name) for name in params}
    try:
        return factory(**params)
    except UserError:
        raise
    except TypeError as e:
        raise UserError(f"bad parameters for {what}: {_one_line(e)}") from None
    except (Exception, SystemExit, asyncio.CancelledError) as e:  # noqa: BLE001 - the user's factory failed
        raise UserError(f"{what} raised {_one_line(e)} while building the agent; fix the factory "
                        "or its parameters") from None
