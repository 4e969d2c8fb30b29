"""What the local-model backends (`hf:`, `vllm:`) share: the generation parameters a spec may
set, a seed per request, and the request and result that travel through the batcher.

Seeds. A request's seed is a hash of (episode seed, scenario, role, phase, turn): the same move
of the same episode always samples from the same random stream, whatever other requests share
its batch and in whatever order episodes run. Greedy decoding (temperature 0, the default)
uses no randomness at all.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ibrl_bench.agents.base import Agent, Reply, Trace, Usage
from ibrl_bench.agents.batching import Batcher
from ibrl_bench.agents.spec import AgentSpec
from ibrl_bench.domains import get_domain
from ibrl_bench.domains.base import DEFAULT_PROMPT, Domain, Observation
from ibrl_bench.errors import UserError

_DEVICE = re.compile(r"^(auto|cpu|cuda(:[0-9]+)?)$")


class GenerationParams(BaseModel):
    """Spec parameters common to the local backends; each backend adds its own."""

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int = Field(64, ge=1, le=8192)  # a move is one or two sentences, or one split
    temperature: float = Field(0.0, ge=0)  # 0 = greedy
    top_p: float = Field(1.0, gt=0, le=1)
    batch_size: int = Field(8, ge=1, le=1024)  # requests decoded together, at most
    window_ms: float = Field(5.0, ge=0, le=10_000)  # how long the oldest request waits for company
    adapter: str | None = None  # a PEFT (LoRA) adapter folder
    prompt: str = DEFAULT_PROMPT  # which of the domain's versioned role prompts the model reads


class DeviceParams(BaseModel):
    device: str = "auto"

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not _DEVICE.match(v):
            raise ValueError("device must be auto, cpu, cuda or cuda:N")
        return v


P = TypeVar("P", bound=BaseModel)


def parse_params(spec: AgentSpec, model: type[P]) -> P:
    """The spec's parameters as `model`, or one line that says which one is wrong."""
    try:
        return model(**spec.params)
    except ValidationError as e:
        err = e.errors()[0]
        name = ".".join(str(x) for x in err["loc"]) or "?"
        if err["type"] == "extra_forbidden":
            known = ", ".join(model.model_fields)
            raise UserError(f"unknown parameter {name!r} in {spec.text}; known: {known}") from None
        raise UserError(f"bad parameter {name}={spec.params.get(name)!r} in {spec.text}: {err['msg']}") from None


def require_prompts(domain: str, prompt: str = DEFAULT_PROMPT) -> Domain:
    """The domain, if it has role prompts for language models (`Domain.chat_messages`) and one
    called `prompt`."""
    game = get_domain(domain)
    if type(game).chat_messages is Domain.chat_messages:
        raise UserError(f"domain {domain} has no prompts for language-model agents yet; use scripted: agents")
    game.role_prompt(prompt)
    return game


def request_seed(obs: Observation) -> int:
    """A 63-bit seed for one move, independent of batching and scheduling."""
    key = f"{obs.seed}|{obs.scenario_id}|{obs.role}|{obs.phase}|{obs.turn}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") >> 1


@dataclass(frozen=True)
class GenRequest:
    messages: list[dict[str, str]]  # the chat the model sees (Domain.chat_messages)
    seed: int
    role: str = ""  # whose move: picks the adapter when one model serves several roles
    # Which dialogue the move belongs to (episode seed, scenario, role): a backend may keep what it
    # computed for this dialogue's last prompt and reuse it, since the next prompt extends it.
    session: str = ""


@dataclass(frozen=True)
class GenResult:
    text: str
    prompt_tokens: int
    completion_tokens: int
    trace: Trace | None = None  # only from a backend asked to trace


class BatchedAgent(Agent):
    """A local model whose moves from concurrent episodes are decoded together: subclasses set
    `domain` and `batcher` (whose worker runs their `generate_batch`)."""

    domain: Domain
    batcher: Batcher[GenRequest, GenResult]
    prompt: str = DEFAULT_PROMPT  # the role prompt's name (GenerationParams.prompt)

    async def act(self, obs: Observation) -> Reply:
        request = GenRequest(messages=self.domain.chat_messages(obs, self.prompt), seed=request_seed(obs), role=obs.role,
                             session=f"{obs.seed}|{obs.scenario_id}|{obs.role}")
        result = await self.batcher.submit(request)
        return Reply(
            text=result.text,
            usage=Usage(prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens),
            trace=result.trace,
        )

    async def aclose(self) -> None:
        await self.batcher.aclose()
