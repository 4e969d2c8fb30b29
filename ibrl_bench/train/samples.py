"""What the trainers learn from: one move of one role as token ids, and the padded batches of them.

A `Sample` is one move: the exact prompt ids the role's model was fed (chat template applied,
already cut to fit its context) and the exact ids it generated, with their log-probabilities under
the policy that sampled them. Rollouts record both at generation time; nothing is re-tokenized
from text, because decode-then-encode does not round-trip (merges differ, special tokens vanish).
A whole episode of a role is the list of its moves; the moves share the episode's advantage.
SFT builds samples from transcripts instead, where the completion is the transcript's message
tokenized once, followed by the end-of-turn token.

`collate` packs samples into right-padded tensors. The action mask is 1 exactly on completion
tokens: it is built from lengths, never from token values, so it stays right when the pad token
equals the end-of-sequence token (the eos a role generated is an action; padding is not), and
the prompt (system text, the other side's messages, template tokens) is always 0.

Truncation has one rule, applied where prompts are built (`models.chat_template.prompt_ids`, by the rollout
agent and by SFT alike): keep the system prompt (rules and private values) and the latest turns,
dropping the oldest turns whole. Both build prompts to fit `max_length - max_new_tokens`
(`prompt_budget`), so a sample's prompt is never cut again here: `truncate` only shortens a
completion longer than the room left (an SFT target longer than `max_new_tokens`), from the right,
with its log-probabilities. The kept tokens were generated from the same prefix, so their recorded
log-probabilities stay exact. A prompt that alone fills `max_length` was built for another budget,
and is refused rather than trained on a context the policy never acted in.

Alignment: position t of `action_mask` / `old_logprobs` refers to token t of `input_ids`; a causal
model predicts it from the logits at t - 1 (see `token_logprobs`), so column 0 is always 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Sample:
    prompt_ids: list[int]
    completion_ids: list[int]
    # Per completion token, under the sampling policy; None for imitation targets.
    logprobs: list[float] | None = None

    def __post_init__(self) -> None:
        if self.logprobs is not None and len(self.logprobs) != len(self.completion_ids):
            raise ValueError(
                f"{len(self.logprobs)} log-probabilities for {len(self.completion_ids)} completion tokens"
            )


@dataclass
class Batch:
    input_ids: Any  # LongTensor [B, T]
    attention_mask: Any  # LongTensor [B, T]: 1 on real tokens, 0 on padding
    action_mask: Any  # FloatTensor [B, T]: 1 on completion tokens
    old_logprobs: Any  # FloatTensor [B, T]: sampling log-probabilities where action_mask is 1, else 0

    def to(self, device: Any) -> Batch:
        return Batch(*(t.to(device)
                       for t in (self.input_ids, self.attention_mask, self.action_mask, self.old_logprobs)))


def prompt_budget(max_positions: int | None, max_length: int | None, max_new_tokens: int) -> int | None:
    """The most prompt tokens a move may have: the model's context (or `max_length`, if smaller)
    minus the room for the move. The rollout agents and SFT cut prompts to it, with one rule."""
    limits = [n for n in (max_positions, max_length) if n is not None]
    return min(limits) - max_new_tokens if limits else None


def truncate(sample: Sample, max_length: int) -> Sample:
    """`sample` with its completion cut from the right to fit `max_length`; the prompt is never cut."""
    if max_length < 1:
        raise ValueError("max_length must be at least 1")
    prompt, completion, logprobs = sample.prompt_ids, sample.completion_ids, sample.logprobs
    excess = len(prompt) + len(completion) - max_length
    if excess <= 0:
        return sample
    if len(prompt) >= max_length:
        raise ValueError(
            f"a {len(prompt)}-token prompt leaves no room in max_length={max_length}: prompts must be "
            "built with prompt_budget(..., max_length, max_new_tokens), which keeps the system prompt"
        )
    completion = completion[: len(completion) - excess]
    logprobs = None if logprobs is None else logprobs[: len(completion)]
    return Sample(prompt_ids=list(prompt), completion_ids=list(completion), logprobs=logprobs)


def collate(samples: list[Sample], pad_id: int, max_length: int | None = None) -> Batch:
    import torch

    if not samples:
        raise ValueError("no samples to collate")
    if max_length is not None:
        samples = [truncate(s, max_length) for s in samples]
    width = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    shape = (len(samples), width)
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    attention_mask = torch.zeros(shape, dtype=torch.long)
    action_mask = torch.zeros(shape, dtype=torch.float32)
    old_logprobs = torch.zeros(shape, dtype=torch.float32)
    for i, s in enumerate(samples):
        p, n = len(s.prompt_ids), len(s.completion_ids)
        input_ids[i, : p + n] = torch.tensor(s.prompt_ids + s.completion_ids, dtype=torch.long)
        attention_mask[i, : p + n] = 1
        action_mask[i, p : p + n] = 1.0
        if s.logprobs is not None:
            old_logprobs[i, p : p + n] = torch.tensor(s.logprobs, dtype=torch.float32)
    # Column 0 has nothing to be predicted from (an empty prompt, as in `_empty_batch`).
    action_mask[:, 0] = 0.0
    old_logprobs[:, 0] = 0.0
    return Batch(input_ids=input_ids, attention_mask=attention_mask, action_mask=action_mask, old_logprobs=old_logprobs)


def token_logprobs(model: Any, batch: Batch, temperature: float = 1.0) -> Any:
    """Log-probability of every token of the batch under `model`, aligned with `input_ids`.

    Returns [B, T] with column 0 set to 0 (the first token has no prediction). `temperature`
    divides the logits as the sampler did, so the ratio against the recorded log-probabilities
    compares like with like.
    """
    return token_logprobs_and_entropy(model, batch, temperature, entropy=False)[0]


def token_logprobs_and_entropy(model: Any, batch: Batch, temperature: float = 1.0,
                               entropy: bool = True) -> tuple[Any, Any]:
    """`token_logprobs`, and the entropy [B, T] of the predicted distribution at every position
    (column 0 = 0; no grad: a statistic), or None when `entropy` is False."""
    import torch

    # No KV cache: nothing is generated here, and the cache would only hold memory.
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    logits = out.logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = batch.input_ids[:, 1:].unsqueeze(-1)
    # log_softmax then gather: the logsumexp is done once per position, in float32.
    log_probs = torch.log_softmax(logits, dim=-1)  # [B, T-1, V]
    picked = log_probs.gather(-1, targets).squeeze(-1)  # [B, T-1]
    out = torch.nn.functional.pad(picked, (1, 0), value=0.0)
    if not entropy:
        return out, None
    with torch.no_grad():
        h = -(log_probs.exp() * log_probs).sum(-1)  # [B, T-1]
    return out, torch.nn.functional.pad(h, (1, 0), value=0.0)
