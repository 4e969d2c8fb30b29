"""What the local-model backends (`hf:`, `vllm:`) share: the role prompts they read, a seed per
request, and the request and result that travel through the batcher.

Seeds. A request's seed is a hash of (episode seed, scenario, role, phase, turn): the same move
of the same episode always samples from the same random stream, whatever other requests share
its batch and in whatever order episodes run. Greedy decoding (temperature 0, the default)
uses no randomness at all.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ibrl_bench.agents.base import Agent, Reply, Trace, Usage
from ibrl_bench.agents.batching import Batcher
from ibrl_bench.domains import get_domain
from ibrl_bench.domains.base import DEFAULT_PROMPT, Domain, Observation
from ibrl_bench.errors import UserError


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
    prompt: str = DEFAULT_PROMPT  # the role prompt's name (params.GenerationParams.prompt)

    async def act(self, obs: Observation) -> Reply:
        request = GenRequest(messages=self.domain.chat_messages(obs, self.prompt), seed=request_seed(obs),
                             role=obs.role, session=f"{obs.seed}|{obs.scenario_id}|{obs.role}")
        result = await self.batcher.submit(request)
        return Reply(
            text=result.text,
            usage=Usage(prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens),
            trace=result.trace,
        )

    async def aclose(self) -> None:
        await self.batcher.aclose()
