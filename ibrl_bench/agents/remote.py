"""What every remote backend shares, written once: per-endpoint concurrency limits, request
timeouts, retries with exponential backoff and jitter (honouring Retry-After), the classification
of errors, and token and cost accounting.

Classification:
- retryable: 429, 408/409, 5xx, timeouts, dropped connections, malformed responses, empty replies;
- fatal for the run (FatalAgentError, one clear line): a rejected key (401/403), an unknown model
  or URL (404);
- anything else (a 400 such as an over-long prompt) fails this episode, which the runner retries
  and then records as `error`.

Every retry is counted by kind in the counter of the episode being played (`current_retries`, set
by the runner), so a run folder shows the faults the remote layer absorbed. When the last attempt
fails too, the error raised names the request timeout or the root cause (a refused connection),
not the client library's wrapper of it.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import random
import socket
from collections import Counter
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
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
    # A model that may legitimately answer with nothing (a card says so): an empty reply on every
    # attempt is then its move. Otherwise it is an infrastructure fault, like any other.
    allow_empty: bool = False


class EmptyReply(Exception):
    """The endpoint answered with no text; retried like a transient fault."""


class RemoteFailure(Exception):
    """The last attempt at a request failed with a transient fault; the message names the cause."""


# The retries of the episode being played in this task, by kind (the runner sets it per episode).
current_retries: ContextVar[Counter | None] = ContextVar("remote_retries", default=None)


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


def root_cause(e: BaseException) -> str | None:
    """A plain name for the cause of a transport failure buried in a chain of wrappers."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        for err in (cur, getattr(cur, "os_error", None)):
            code = getattr(err, "errno", None)
            if isinstance(err, ConnectionRefusedError) or code == errno.ECONNREFUSED:
                return "connection refused"
            if isinstance(err, ConnectionResetError) or code == errno.ECONNRESET:
                return "connection reset"
            if code in (errno.EHOSTUNREACH, errno.ENETUNREACH):
                return "host unreachable"
        if isinstance(cur, socket.gaierror):
            return "unknown host name"
        cur = cur.__cause__ or cur.__context__
    return None


def classify(e: BaseException, endpoint: str, no_key: str | None = None) -> Verdict:
    """Works for the openai client's errors and litellm's (which subclass them). `no_key` says
    why no key was sent, when none was: a 401 then means a key is missing, not rejected."""
    import openai  # the remote backends depend on it; imported only when one is used

    status = _status(e)
    name = type(e).__name__
    if isinstance(e, (openai.AuthenticationError, openai.PermissionDeniedError)) or status in (401, 403):
        if no_key:
            return Verdict("fatal", f"{endpoint} refused the request for want of a key ({status}, {name}); {no_key}")
        return Verdict("fatal", f"{endpoint} rejected the key ({status}, {name}); "
                                "check the key variable named in the spec or card")
    if isinstance(e, openai.NotFoundError) or status == 404:
        return Verdict("fatal", f"{endpoint} does not know this model or URL (404); check the model name and base URL")
    if isinstance(e, (asyncio.TimeoutError, TimeoutError, openai.APITimeoutError, openai.APIConnectionError,
                      openai.APIResponseValidationError, EmptyReply, ValueError)):
        return Verdict("retry", name)
    if status is not None and (status in (408, 409, 429) or status >= 500):
        return Verdict("retry", f"{status} {name}", _retry_after(e))
    return Verdict("fail", name)


# (loop id, endpoint) -> (the loop, its semaphore). The loop is held so that its id cannot be reused
# by a new loop while the entry stands; entries of closed loops go at the next call, so the table
# holds the loops alive now, not one entry per loop ever run (the trainers run one per step).
_LIMITS: dict[tuple[int, str], tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = {}


def limiter(endpoint: str, concurrency: int) -> asyncio.Semaphore:
    """One semaphore per endpoint and event loop, shared by every agent that calls it."""
    loop = asyncio.get_running_loop()
    for key in [k for k, (other, _) in _LIMITS.items() if other.is_closed()]:
        del _LIMITS[key]
    entry = _LIMITS.get((id(loop), endpoint))
    if entry is None:
        entry = _LIMITS[(id(loop), endpoint)] = (loop, asyncio.Semaphore(concurrency))
    return entry[1]


def backoff_delay(attempt: int, settings: RemoteSettings, rng: random.Random) -> float:
    """Exponential backoff with full jitter: uniform in [0, base * 2**attempt], capped."""
    return rng.uniform(0, min(settings.max_backoff, settings.backoff * 2**attempt))


_jitter = random.Random()
MAX_RETRY_AFTER = 300.0


def _timed_out(e: BaseException) -> bool:
    import openai

    return isinstance(e, (asyncio.TimeoutError, TimeoutError, openai.APITimeoutError))


def _last_failure(e: BaseException, endpoint: str, settings: RemoteSettings) -> BaseException:
    """What the last failed attempt raises: the request timeout or the root cause by name."""
    n = settings.max_attempts
    tries = f"{n} attempt{'s' if n > 1 else ''}"
    if isinstance(e, EmptyReply):
        return e
    cause = root_cause(e)
    if cause:
        return RemoteFailure(f"{endpoint}: {cause} ({type(e).__name__}) on all {tries}; check that the server is up "
                             "and the base URL is right")
    if _timed_out(e):
        return RemoteFailure(f"{endpoint} gave no answer within the request timeout of {settings.timeout:g} s "
                             f"on all {tries}; raise timeout= in the spec or card, or check the server")
    return e


async def call(endpoint: str, settings: RemoteSettings, request: Callable[[], Awaitable[T]],
               no_key: str | None = None) -> T:
    """Run `request` under the endpoint's limit and the request timeout, retrying what is
    transient. A fatal error raises FatalAgentError; the last transient error is re-raised, as a
    RemoteFailure that names its cause where one is known."""
    sem = limiter(endpoint, settings.concurrency)
    for attempt in range(settings.max_attempts):
        try:
            async with sem:
                return await asyncio.wait_for(request(), settings.timeout)
        except Exception as e:  # noqa: BLE001 - classified below
            verdict = classify(e, endpoint, no_key)
            if verdict.kind == "fatal":
                raise FatalAgentError(scrub(verdict.reason)) from None
            if verdict.kind == "fail":
                raise
            if attempt + 1 == settings.max_attempts:
                last = _last_failure(e, endpoint, settings)
                if last is e:
                    raise
                raise last from e
            counts = current_retries.get()
            if counts is not None:
                counts[verdict.reason] += 1
            if verdict.retry_after is not None:  # the server knows best; only absurd waits are cut
                delay = min(verdict.retry_after, MAX_RETRY_AFTER)
            else:
                delay = backoff_delay(attempt, settings, _jitter)
            log.info("retrying %s after %s (attempt %d, %.2fs)", endpoint, verdict.reason, attempt + 1, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")
