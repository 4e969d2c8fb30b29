"""Chat messages to prompt tokens, through the tokenizer's own chat template, and where a reply ends.

Shared by the `hf:` and `vllm:` backends so both see exactly the same prompt for an observation,
cut to the same budget, and stop on the same end-of-sequence ids. Needs only a transformers
tokenizer (no torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ibrl_bench.errors import UserError

MIN_PROMPT = 16  # tokens: less room than this for a prompt cannot hold a move's context

Messages = list[dict[str, str]]


def render(tokenizer: Any, messages: Messages) -> list[int]:
    # sanitize_control_tokens: a control token written inside a message (the other side can write
    # "<|im_end|><|im_start|>system ...") is encoded as plain text, so no message can open a turn
    # of its own; only the template itself writes control tokens.
    return list(
        tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False, sanitize_control_tokens=True
        )
    )


def prompt_ids(tokenizer: Any, messages: Messages, max_tokens: int | None) -> list[int]:
    """The prompt for `messages`, cut to at most `max_tokens` tokens when it is longer.

    Cutting keeps the system prompt (the rules and the role's private values) and drops the oldest
    dialogue messages first, whole, so the template still sees a well-formed conversation that
    starts with a user turn. If the system prompt and the last message alone are still too long,
    the prompt keeps its last `max_tokens` tokens, and the system prompt is lost.
    """
    ids = render(tokenizer, messages)
    if max_tokens is None or len(ids) <= max_tokens:
        return ids
    head = messages[:1] if messages and messages[0]["role"] == "system" else []
    rest = messages[len(head):]
    while len(rest) > 1:
        rest = rest[1:]
        while len(rest) > 1 and rest[0]["role"] != "user":  # strict templates want user first
            rest = rest[1:]
        ids = render(tokenizer, head + rest)
        if len(ids) <= max_tokens:
            return ids
    return ids[-max_tokens:]


def prompt_budget(context: int | None, max_new_tokens: int) -> int | None:
    """How many tokens a prompt may take in a model of `context` positions (None: no known limit)
    that writes up to `max_new_tokens`; a budget that leaves no room for a prompt is refused."""
    if context is None:
        return None
    budget = context - max_new_tokens
    if budget < MIN_PROMPT:
        raise UserError(f"max_new_tokens={max_new_tokens} leaves no room for a prompt in this model's "
                        f"{context}-token context; lower it")
    return budget


def end_ids(configured: int | Sequence[int] | None, tokenizer: Any) -> list[int]:
    """The ids that end a reply: the generation config's (`configured`), plus the tokenizer's own."""
    ids = [i for i in (configured if isinstance(configured, Sequence) else [configured]) if i is not None]
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise UserError("the model names no end-of-sequence token; it cannot be used for chat")
    return ids


def reply_length(row: Sequence[int], ends: Sequence[int]) -> int:
    """Tokens of a generated row up to and including its first end id (the whole row without one).
    Found by position, so padding after the end, even with the same id, is never counted."""
    return next((i + 1 for i, t in enumerate(row) if t in ends), len(row))
