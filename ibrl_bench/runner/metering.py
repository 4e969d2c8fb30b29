"""A model seat as the runner plays it: replies from the response cache where it holds them, paid
calls counted and held to the budget where it does not.

Every model seat of a run (spec kinds in MODEL_KINDS) is wrapped, cache or not, so that paid calls
are counted the same way everywhere (`Usage.calls`); a reply served from the cache carries no
tokens and no cost, only `cache_hits`, `cached_tokens` and `saved_usd`. Scripted and plugin seats
are not wrapped: they cost nothing, and a plugin may keep state a replay would skip.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ibrl_bench.agents.base import Agent, Reply, Usage
from ibrl_bench.agents.generation import request_seed
from ibrl_bench.agents.spec import Seat
from ibrl_bench.cache_home import cache_home
from ibrl_bench.domains.base import DEFAULT_PROMPT, Domain, Observation
from ibrl_bench.runner.budget import Budget, worst_call_cost
from ibrl_bench.runner.cache import (
    Cached,
    ResponseCache,
    is_greedy,
    is_model_seat,
    request_key,
    seat_identity,
)


class MeteredSeat(Agent):
    """The agent of a model seat, answering from the cache where it can and paying where not."""

    def __init__(self, seat: Seat, domain: Domain, cache: ResponseCache | None, budget: Budget | None):
        inner = seat.agent
        self.inner, self.domain, self.cache, self.budget = inner, domain, cache, budget
        self.identity = seat_identity(seat, domain)
        self.greedy = is_greedy(self.identity)
        self.prompt = getattr(inner, "prompt", DEFAULT_PROMPT)
        pricing = getattr(inner, "pricing", None)
        gen = getattr(inner, "gen", None)
        self.prices = (pricing.input_per_mtok, pricing.output_per_mtok) if pricing is not None else (0.0, 0.0)
        self.max_tokens = getattr(gen, "max_tokens", 0)

    def key(self, obs: Observation) -> tuple[str, list[dict[str, str]]]:
        messages = self.domain.chat_messages(obs, self.prompt)
        return request_key(self.identity, messages, None if self.greedy else request_seed(obs)), messages

    async def act(self, obs: Observation) -> Reply:
        if self.cache is None:
            return await self._paid(obs, None)
        key, messages = self.key(obs)
        while True:
            hit = self.cache.get(key)
            if hit is not None:
                return Reply(text=hit.text, usage=Usage(
                    cache_hits=1, cached_tokens=hit.prompt_tokens + hit.completion_tokens, saved_usd=hit.cost_usd))
            paying = self.cache.in_flight.get(key)
            if paying is None:
                break
            await paying.wait()  # the same request is being paid for now: wait for its answer
        done = self.cache.in_flight[key] = asyncio.Event()
        try:
            reply = await self._paid(obs, messages)
            u = reply.usage or Usage()
            stored = self.cache.put(key, Cached(reply.text, u.prompt_tokens, u.completion_tokens, u.cost_usd),
                                    self.identity["model"])
        finally:  # a failed call stores nothing: a waiter then finds no answer and pays for its own
            del self.cache.in_flight[key]
            done.set()
        return Reply(text=stored.text, usage=reply.usage, trace=reply.trace)

    async def _paid(self, obs: Observation, messages: list[dict[str, str]] | None) -> Reply:
        worst = 0.0
        if self.budget is not None and any(self.prices):
            messages = messages or self.domain.chat_messages(obs, self.prompt)
            chars = sum(len(m.get("content", "")) for m in messages)
            worst = worst_call_cost(chars, self.max_tokens, *self.prices)
            self.budget.reserve(worst)
        cost = 0.0
        try:
            reply = await self.inner.act(obs)
            usage = (reply.usage or Usage()).model_copy(update={"calls": 1})
            cost = usage.cost_usd
            return reply.model_copy(update={"usage": usage})
        finally:
            if self.budget is not None:
                self.budget.settle(worst, cost)

    async def aclose(self) -> None:
        await self.inner.aclose()


class Metering:
    """The cache and budget of one command, and the seats they wrap."""

    def __init__(self, domain: Domain, cache: ResponseCache | None, budget: Budget | None):
        self.domain, self.cache, self.budget = domain, cache, budget

    @classmethod
    def open(cls, config: Any, domain: Domain, budget: Budget | None) -> Metering:
        """The cache a CrossplayConfig names (`cache`, `cache_dir`), and the command's budget."""
        cache = ResponseCache(config.cache_dir or cache_home()) if config.cache else None
        return cls(domain, cache, budget)

    def seats(self, seats: dict[str, Seat]) -> dict[str, Seat]:
        """The seats with each model seat's agent metered (scripted and plugin seats as they are)."""
        return {spec: Seat(s.spec, MeteredSeat(s, self.domain, self.cache, self.budget), s.card)
                if is_model_seat(s) else s for spec, s in seats.items()}

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
