"""Pieces shared by the chat-API backends (`openai:`, `litellm:`): the key, the request, the reply.
Their spec parameters are `params.ChatParams`."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ibrl_bench.agents.base import Agent, Reply, Usage
from ibrl_bench.agents.params import ChatSampling, Pricing
from ibrl_bench.agents.remote import EmptyReply, RemoteSettings, call
from ibrl_bench.domains.base import Domain, Observation
from ibrl_bench.errors import UserError
from ibrl_bench.secrets import key_from_env

# A dry run builds the model seats to plan their calls and never calls them: it needs no key, and
# a user pricing a run before getting one should not be asked for it.
_NO_CALLS = ContextVar("no_calls", default=False)


@contextmanager
def seats_that_never_call() -> Iterator[None]:
    """Seats built inside take a missing key for a placeholder; they must make no request."""
    token = _NO_CALLS.set(True)
    try:
        yield
    finally:
        _NO_CALLS.reset(token)


def resolve_key(key_env: str | None, spec_text: str) -> str:
    """The key in the variable named by a spec or card, registered for scrubbing; `none` (or no
    name) for servers without keys, which clients still want a value for."""
    if key_env is None or str(key_env).lower() == "none":
        return "none"
    key = key_from_env(str(key_env))
    if not key and _NO_CALLS.get():
        return "unset"
    if not key:
        raise UserError(f"{spec_text} needs a key in ${key_env}, which is not set; export it, "
                        "or pass key_env=none for a server without keys")
    return key


def reply(text: str | None, prompt_tokens: int, completion_tokens: int, pricing: Pricing,
          cost: float | None = None) -> Reply:
    usage = Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=cost if cost is not None else pricing.cost(prompt_tokens, completion_tokens),
    )
    return Reply(text=(text or "").strip(), usage=usage)


@dataclass(frozen=True)
class Completion:
    """What the harness reads from a chat response; backends fill it from their own shape."""

    text: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    raw: Any = None  # the provider's own response, for backends that price from it


class RemoteChat(Agent):
    """A chat model behind a remote API. Subclasses say how to send one request and read its
    cost; the request, the retries and the handling of empty replies are the same for all."""

    def __init__(self, model: str, endpoint: str, domain: Domain, gen: ChatSampling, settings: RemoteSettings,
                 pricing: Pricing, send_observation: bool = False):
        self.model, self.endpoint, self.domain = model, endpoint, domain
        self.gen, self.settings, self.pricing = gen, settings, pricing
        # Test hook for the fake endpoint: the observation travels with the request, so that a
        # scripted agent behind HTTP can play real games. Never on for real endpoints.
        self.send_observation = send_observation

    @abstractmethod
    async def complete(self, request: dict[str, Any]) -> Completion:
        """Send one chat request; return what it answered. A response that cannot be read raises
        ValueError, which `remote.call` retries like any transient fault."""

    def cost(self, completion: Completion) -> float | None:
        return None  # None: price from the spec's or card's pricing

    @property
    def no_key(self) -> str | None:
        """Why no key is sent, when none is (what a 401 then means); None when one is."""
        return None

    async def act(self, obs: Observation) -> Reply:
        request: dict[str, Any] = dict(
            model=self.model, messages=self.domain.chat_messages(obs), temperature=self.gen.temperature,
            top_p=self.gen.top_p, max_tokens=self.gen.max_tokens,
        )
        if self.gen.send_seed:
            request["seed"] = obs.seed
        if self.send_observation:
            request["extra_body"] = {"ibrl_observation": obs.model_dump(mode="json")}
        empties = 0

        async def attempt():
            nonlocal empties
            completion = await self.complete(request)
            if not (completion.text or "").strip():
                empties += 1
                raise EmptyReply(f"{self.endpoint} returned no text")
            return completion

        try:
            completion = await call(self.endpoint, self.settings, attempt, self.no_key)
        except EmptyReply:
            if empties < self.settings.max_attempts:
                raise  # empty among other faults: the endpoint is flaky, not the model
            if not self.settings.allow_empty:
                n = self.settings.max_attempts
                raise EmptyReply(f"{self.endpoint} returned no text on all {n} attempt{'s' if n > 1 else ''}; an "
                                 "empty reply is an infrastructure fault unless the card sets allow_empty: true "
                                 "in its params") from None
            # The card says this model may answer with nothing: that is its move, and the
            # domain's rules (not the harness) decide what an empty move means.
            return reply("", 0, 0, self.pricing)
        return reply(completion.text, completion.prompt_tokens, completion.completion_tokens, self.pricing,
                     self.cost(completion))
