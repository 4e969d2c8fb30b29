"""`openai:MODEL@URL`: any OpenAI-compatible chat endpoint (OpenAI, DeepSeek, vLLM serve, SGLang...)
through the `openai` package's async client.

Spec parameters: key_env (name of the variable holding the key; default OPENAI_API_KEY, `none`
for servers without keys), generation (temperature, top_p, max_tokens, send_seed), transport
(concurrency, timeout, max_attempts, backoff, max_backoff), pricing (price_in, price_out in USD per
million tokens). Retries and limits are the shared ones of `remote.py`; the client's own retries
are off so that they are not stacked.

Per call, the client does what the harness needs and no more: the body goes out through the
client's generic `post` over aiohttp (the client's own `DefaultAioHttpClient`, from the
`openai[aiohttp]` extra), and the answer comes back as the raw HTTP response, of which we read the
three things a move needs (text, token counts, finish reason) with `json.loads`.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import json
from typing import Any

from ibrl_bench.agents.base import Agent
from ibrl_bench.agents.params import ChatParams, ChatSampling, Pricing, parse_params
from ibrl_bench.agents.remote import RemoteSettings
from ibrl_bench.agents.remote_chat import Completion, RemoteChat, resolve_key
from ibrl_bench.agents.spec import AgentSpec
from ibrl_bench.domains import get_domain
from ibrl_bench.domains.base import Domain
from ibrl_bench.errors import UserError

DEFAULT_URL = "https://api.openai.com/v1"
# Without aiohttp, requests are spread round-robin over this many clients (connection pools) per
# event loop: the default HTTP pool under the openai client checks every connection it holds each
# time it places a request, so one pool of N connections costs O(N) per call, and at 256
# concurrent episodes that bookkeeping was the largest CPU cost of a move. aiohttp's connector
# finds an idle connection without a scan, so one client is enough there.
CLIENT_SHARDS = 8


class OpenAIChat(RemoteChat):
    def __init__(self, model: str, base_url: str, key: str, domain: Domain, gen: ChatSampling,
                 settings: RemoteSettings, pricing: Pricing, send_observation: bool = False):
        super().__init__(model, base_url, domain, gen, settings, pricing, send_observation)
        self._key = key
        self._clients: dict[int, list[Any]] = {}
        self._turn: dict[int, Any] = {}

    @property
    def no_key(self) -> str | None:
        if self._key != "none":
            return None
        return "the spec or card says key_env=none; name the variable holding the key with key_env="

    def _client(self):
        from openai import AsyncOpenAI

        loop = id(asyncio.get_running_loop())  # an HTTP client belongs to one event loop
        if loop not in self._clients:
            transports = http_clients()
            self._clients[loop] = [
                AsyncOpenAI(api_key=self._key, base_url=self.endpoint, max_retries=0, timeout=self.settings.timeout,
                            http_client=http_client)
                for http_client in transports
            ]
            self._turn[loop] = itertools.cycle(self._clients[loop])
        return next(self._turn[loop])

    async def complete(self, request: dict[str, Any]) -> Completion:
        # The client's generic `post` (its documented way to send a body as is) rather than
        # `chat.completions.create`: `create` re-validates the whole conversation against its
        # typed schema on every call, which costs more CPU than the rest of the harness per move
        # once dialogues grow. Asking for the raw HTTP response skips building the typed
        # ChatCompletion (a pydantic model per choice, message and usage) for three fields.
        # Status errors are raised by the client before that, as openai.APIStatusError.
        body = {k: v for k, v in request.items() if k != "extra_body"} | request.get("extra_body", {})
        response = await self._client().post("/chat/completions", body=body, cast_to=raw_response_type())
        return parse_completion(response.content)

    async def aclose(self) -> None:
        for clients in self._clients.values():
            for client in clients:
                await client.close()
        self._clients.clear()
        self._turn.clear()


class MalformedResponse(ValueError):
    """A 200 whose body is not a chat completion; retried like any transient fault."""


def parse_completion(content: bytes) -> Completion:
    """Read a chat completion body. Fields we do not use are not checked: an endpoint that adds
    its own (vLLM, DeepSeek) is fine; one that lacks `choices` or sends the wrong types is not."""
    data = json.loads(content)  # a JSONDecodeError is a ValueError: retried
    try:
        choices = data.get("choices")
        usage = data.get("usage") or {}
        if choices is None:
            raise MalformedResponse("the response has no `choices`")
        choice = choices[0] if choices else {}
        text = (choice.get("message") or {}).get("content")
        if text is not None and not isinstance(text, str):
            raise MalformedResponse(f"message content is {type(text).__name__}, not text")
        return Completion(text=text, prompt_tokens=int(usage.get("prompt_tokens") or 0),
                          completion_tokens=int(usage.get("completion_tokens") or 0),
                          finish_reason=choice.get("finish_reason"))
    except (AttributeError, TypeError, KeyError, IndexError) as e:
        raise MalformedResponse(f"the response is not a chat completion ({type(e).__name__}: {e})") from None


def raw_response_type() -> type:
    """The Response class of the HTTP library this openai release is built on (httpx, or httpx2
    in later releases): as `cast_to`, the client hands back the HTTP response itself."""
    global _RAW_RESPONSE
    if _RAW_RESPONSE is None:
        import openai

        base = next(c for c in openai.DefaultAsyncHttpxClient.__mro__ if c.__name__ == "AsyncClient")
        _RAW_RESPONSE = importlib.import_module(base.__module__.split(".")[0]).Response
    return _RAW_RESPONSE


_RAW_RESPONSE: type | None = None


def http_clients() -> list[Any]:
    """HTTP clients for one event loop's openai clients: one over aiohttp where this openai
    release and aiohttp are installed (about a third less CPU per call than the default transport on
    benchmarks/endpoint_throughput.py), else CLIENT_SHARDS of the default (None: its own)."""
    import openai

    try:
        return [openai.DefaultAioHttpClient()]
    except (AttributeError, RuntimeError):  # an older openai, or aiohttp missing
        return [None] * CLIENT_SHARDS


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
    params = parse_params(ChatParams, spec.params, spec.text)
    key = resolve_key("OPENAI_API_KEY" if params.key_env is None else params.key_env, spec.text)
    return OpenAIChat(model, url, key, get_domain(domain), params.sampling(), params.settings(), params.pricing(),
                      send_observation=params.observation)
