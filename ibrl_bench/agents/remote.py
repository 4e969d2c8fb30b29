"""What every remote backend shares, written once: per-endpoint concurrency limits, request
timeouts, retries with exponential backoff and jitter (honouring Retry-After), the classification
of errors, and token and cost accounting.

Classification:
- retryable: 429, 408/409, 5xx, timeouts, dropped connections, malformed responses, empty replies;
- fatal for the run (FatalAgentError, one clear line): a rejected key (401/403), an unknown model
  or URL (404);
- anything else (a 400 such as an over-long prompt) fails this episode, which the runner retries
  and then records as `error`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, Field

from ibrl_bench.errors import FatalAgentError
from ibrl_bench.secrets import scrub

log = logging.getLogger(__name__)
T = TypeVar("T")


class RemoteSettings(BaseModel):
    concurrency: int = Field(16, ge=1)  # requests in flight to one endpoint, across all episodes
    timeout: float = Field(60.0, gt=0)  # seconds for one request
    max_attempts: int = Field(6, ge=1)
    backoff: float = Field(0.5, gt=0)  # first retry delay in seconds; doubles each attempt
    max_backoff: float = Field(30.0, gt=0)


class EmptyReply(Exception):
    """The endpoint answered with no text; retried like a transient fault."""


@dataclass(frozen=True)
class Verdict:
    kind: str  # "retry" | "fatal" | "fail"
    reason: str
    retry_after: float | None = None


def _status(e: BaseException) -> int | None:
    code = getattr(e, "status_code", None)
    return code if isinstance(code, int) else None


def _retry_after(e: BaseException) -> float | None:
    response = getattr(e, "response", None)
    headers = getattr(response, "headers", None)
    value = headers.get("retry-after") if headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date; fall back to backoff


def classify(e: BaseException, endpoint: str) -> Verdict:
    """Works for the openai client's errors and litellm's (which subclass them)."""
    import openai  # the remote backends depend on it; imported only when one is used

    status = _status(e)
    name = type(e).__name__
    if isinstance(e, (openai.AuthenticationError, openai.PermissionDeniedError)) or status in (401, 403):
        return Verdict("fatal", f"{endpoint} rejected the key ({status}, {name}); check the key variable named in the spec or card")
    if isinstance(e, openai.NotFoundError) or status == 404:
        return Verdict("fatal", f"{endpoint} does not know this model or URL (404); check the model name and base URL")
    if isinstance(e, (asyncio.TimeoutError, TimeoutError, openai.APITimeoutError, openai.APIConnectionError,
                      openai.APIResponseValidationError, EmptyReply, ValueError)):
        return Verdict("retry", name)
    if status is not None and (status in (408, 409, 429) or status >= 500):
        return Verdict("retry", f"{status} {name}", _retry_after(e))
    return Verdict("fail", name)


_LIMITS: dict[tuple[int, str], asyncio.Semaphore] = {}


def limiter(endpoint: str, concurrency: int) -> asyncio.Semaphore:
    """One semaphore per endpoint and event loop, shared by every agent that calls it."""
    key = (id(asyncio.get_running_loop()), endpoint)
    sem = _LIMITS.get(key)
    if sem is None:
        sem = _LIMITS[key] = asyncio.Semaphore(concurrency)
    return sem


def backoff_delay(attempt: int, settings: RemoteSettings, rng: random.Random) -> float:
    """Exponential backoff with full jitter: uniform in [0, base * 2**attempt], capped."""
    return rng.uniform(0, min(settings.max_backoff, settings.backoff * 2**attempt))


_jitter = random.Random()
MAX_RETRY_AFTER = 300.0


async def call(endpoint: str, settings: RemoteSettings, request: Callable[[], Awaitable[T]]) -> T:
    """Run `request` under the endpoint's limit and the request timeout, retrying what is
    transient. A fatal error raises FatalAgentError; the last transient error is re-raised."""
    sem = limiter(endpoint, settings.concurrency)
    for attempt in range(settings.max_attempts):
        try:
            async with sem:
                return await asyncio.wait_for(request(), settings.timeout)
        except Exception as e:  # noqa: BLE001 - classified below
            verdict = classify(e, endpoint)
            if verdict.kind == "fatal":
                raise FatalAgentError(scrub(verdict.reason)) from None
            if verdict.kind == "fail" or attempt + 1 == settings.max_attempts:
                raise
            if verdict.retry_after is not None:  # the server knows best; only absurd waits are cut
                delay = min(verdict.retry_after, MAX_RETRY_AFTER)
            else:
                delay = backoff_delay(attempt, settings, _jitter)
            log.info("retrying %s after %s (attempt %d, %.2fs)", endpoint, verdict.reason, attempt + 1, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")
