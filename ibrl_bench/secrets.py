"""Keys never reach disk: backends register every key they read, and everything the harness
writes (run logs, manifests, results, reports, error lines) passes through `scrub`.

Keys come only from environment variables named in specs and cards; the names are recorded,
the values never.
"""

from __future__ import annotations

import os

_SECRETS: set[str] = set()
MASK = "***"


def register(value: str | None) -> None:
    # Very short values would mask ordinary words; real keys are long.
    if value and len(value) >= 8:
        _SECRETS.add(value)


def key_from_env(name: str | None) -> str | None:
    """The value of the environment variable `name`, registered for scrubbing."""
    if not name:
        return None
    value = os.environ.get(name)
    register(value)
    return value


def scrub(text: str) -> str:
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


_SECRET_NAMES = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def register_environment() -> None:
    """Register the values of variables whose names say they hold secrets (OPENAI_API_KEY,
    HF_TOKEN ...): libraries such as litellm read them by themselves, so the harness cannot know
    which one a request used."""
    for name, value in os.environ.items():
        if any(word in name.upper() for word in _SECRET_NAMES):
            register(value)
