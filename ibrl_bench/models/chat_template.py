"""Chat messages to prompt tokens, through the tokenizer's own chat template.

Shared by the `hf:` and `vllm:` backends so both see exactly the same prompt for an observation.
Needs only a transformers tokenizer (no torch).
"""

from __future__ import annotations

from typing import Any

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
