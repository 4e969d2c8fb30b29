"""`openai:MODEL@URL`: any OpenAI-compatible chat endpoint (OpenAI, DeepSeek, vLLM serve, SGLang...)
through the `openai` package's async client.

Spec parameters: key_env (name of the variable holding the key; default OPENAI_API_KEY, `none`
for servers without keys), generation (temperature, top_p, max_tokens, send_seed), transport
(concurrency, timeout, max_attempts, backoff, max_backoff), pricing (price_in, price_out in USD per
million tokens). Retries and limits are the shared ones of `remote.py`; the client's own retries
are off so that they are not stacked.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from ibrl_bench.agents.base import Agent
from ibrl_bench.agents.chat import Generation, Pricing, RemoteChat, resolve_key, split_params
from ibrl_bench.agents.remote import RemoteSettings
from ibrl_bench.agents.spec import AgentSpec
from ibrl_bench.domains import get_domain
from ibrl_bench.domains.base import Domain
from ibrl_bench.errors import UserError

DEFAULT_URL = "https://api.openai.com/v1"
# Requests are spread round-robin over this many clients (connection pools) per event loop. The
# HTTP pool under the openai client checks every connection it holds each time it places a
# request, so one pool of N connections costs O(N) per call; at 256 concurrent episodes that
# bookkeeping was the largest CPU cost of a move (benchmarks/endpoint_throughput.py --profile).
CLIENT_SHARDS = 8
EXTRA = {"key_env", "observation"}


class OpenAIChat(RemoteChat):
    def __init__(self, model: str, base_url: str, key: str, domain: Domain, gen: Generation,
                 settings: RemoteSettings, pricing: Pricing, send_observation: bool = False):
        super().__init__(model, base_url, domain, gen, settings, pricing, send_observation)
        self._key = key
        self._clients: dict[int, list[Any]] = {}
        self._turn: dict[int, Any] = {}

    def _client(self):
        from openai import AsyncOpenAI

        loop = id(asyncio.get_running_loop())  # an HTTP client belongs to one event loop
        if loop not in self._clients:
            self._clients[loop] = [
                AsyncOpenAI(api_key=self._key, base_url=self.endpoint, max_retries=0, timeout=self.settings.timeout)
                for _ in range(CLIENT_SHARDS)
            ]
            self._turn[loop] = itertools.cycle(self._clients[loop])
        return next(self._turn[loop])

    async def complete(self, request: dict[str, Any]) -> Any:
        from openai.types.chat import ChatCompletion

        # The client's generic `post` (its documented way to send a body as is) rather than
        # `chat.completions.create`: `create` re-validates the whole conversation against its
        # typed schema on every call, which costs more CPU than the rest of the harness per move
        # once dialogues grow. The body is the same; responses are parsed the same way.
        body = {k: v for k, v in request.items() if k != "extra_body"} | request.get("extra_body", {})
        return await self._client().post("/chat/completions", body=body, cast_to=ChatCompletion)

    async def aclose(self) -> None:
        for clients in self._clients.values():
            for client in clients:
                await client.close()
        self._clients.clear()
        self._turn.clear()


def parse_target(spec: AgentSpec) -> tuple[str, str]:
    model, sep, url = spec.target.partition("@")
    if not model or (sep and not url.startswith(("http://", "https://"))):
        raise UserError(f"malformed spec {spec.text!r}; expected openai:MODEL or openai:MODEL@http(s)://HOST/v1")
    return model, (url or DEFAULT_URL).rstrip("/")


def from_spec(spec: AgentSpec, domain: str) -> Agent:
    try:
        import openai  # noqa: F401
    except ImportError:
        raise UserError("the openai: backend needs the openai package; pip install 'ibrl-bench[api]'") from None
    model, url = parse_target(spec)
    gen, settings, pricing, extra = split_params(spec.text, spec.params, EXTRA)
    key = resolve_key(extra.get("key_env", "OPENAI_API_KEY"), spec.text)
    return OpenAIChat(model, url, key, get_domain(domain), gen, settings, pricing,
                      send_observation=bool(extra.get("observation", False)))
