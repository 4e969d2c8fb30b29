"""The GRPO objective of DeepSeekMath (Shao et al. 2024, eq. 3), with the options researchers use.

For a group of G outputs o_1..o_G sampled for one input q, with rewards r_1..r_G:

    A_i = (r_i - mean(r)) / (std(r) + eps)          (std: the unbiased one, over the G rewards)
          (r_i - mean(r))                            with scale_rewards=False (Dr. GRPO)

    ratio_{i,t} = pi_theta(o_{i,t} | q, o_{i,<t}) / pi_old(o_{i,t} | q, o_{i,<t})
    L_{i,t}     = min(ratio * A_i, clip(ratio, 1 - clip_eps, 1 + clip_eps) * A_i)
                  - kl_coef * KL_{i,t}
    KL_{i,t}    = pi_ref / pi_theta - log(pi_ref / pi_theta) - 1     (Schulman's k3 estimator:
                  unbiased for KL(pi_theta || pi_ref), always >= 0; the paper's choice)

    J = 1/G sum_i 1/|o_i| sum_t L_{i,t}                  averaging="sequence" (the paper)
    J = 1/sum_i |o_i| sum_i sum_t L_{i,t}                averaging="token" (DAPO: long outputs
                                                         are not down-weighted per token)
    loss = -J

Here an "output" is one move of one role (a `Sample`): every move of an episode carries that
episode's advantage (outcome supervision: one reward per episode, as in the paper's section 4.1.2).
Only tokens under the action mask count: the role's own generated ids.

`pi_old` is the sampling policy, whose log-probabilities the rollout recorded (the prompt trained
on is the one sampled from: samples.truncate never cuts it); with one update per rollout batch the
ratio is 1 up to numerics and the clip matters only when a step makes several optimizer updates.
kl_coef = 0 means no reference forward at all (the caller passes None).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class GRPOOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    clip_eps: float = Field(0.2, gt=0)
    kl_coef: float = Field(0.04, ge=0)  # DeepSeekMath's beta; 0 skips the reference model
    scale_rewards: bool = True  # divide by the group's std; False: centred only (Dr. GRPO)
    averaging: Literal["sequence", "token"] = "sequence"
    adv_eps: float = Field(1e-4, gt=0)  # keeps a group of near-equal rewards from exploding


def group_advantages(rewards: list[float], scale: bool = True, eps: float = 1e-4) -> list[float]:
    """A_i for one group's rewards (see the module docstring). A group of one has advantage 0."""
    import torch

    r = torch.tensor(rewards, dtype=torch.float64)  # [G]
    if len(rewards) < 2:
        return [0.0] * len(rewards)
    centred = r - r.mean()
    if scale:
        centred = centred / (r.std(correction=1) + eps)
    return centred.tolist()


def grpo_loss(
    logprobs: Any,
    old_logprobs: Any,
    ref_logprobs: Any | None,
    advantages: Any,
    action_mask: Any,
    options: GRPOOptions,
    total_tokens: float | None = None,
    total_samples: float | None = None,
) -> tuple[Any, dict[str, float]]:
    """The GRPO loss of a (micro-)batch of samples, and its statistics.

    logprobs      [B, T]  log pi_theta of each token (with grad), aligned with input_ids
    old_logprobs  [B, T]  log pi_old, recorded at sampling
    ref_logprobs  [B, T]  log pi_ref (no grad), or None when kl_coef == 0
    advantages    [B]     A_i of the episode each sample belongs to
    action_mask   [B, T]  1 on the role's own generated tokens, else 0

    `total_tokens` / `total_samples`: the counts of the whole step when it is split into
    micro-batches, so that the micro-batch losses add up to the step's loss (default: this batch's).
    Statistics are sums over this batch's action tokens divided by its token count, as floats.
    """
    import torch

    mask = action_mask.float()  # [B, T]
    n_tokens = mask.sum(dim=1)  # [B]
    adv = advantages.float().unsqueeze(1)  # [B, 1]
    log_ratio = (logprobs - old_logprobs) * mask  # [B, T]; 0 off the mask, so exp() stays finite
    ratio = torch.exp(log_ratio)  # [B, T]
    clipped = torch.clamp(ratio, 1.0 - options.clip_eps, 1.0 + options.clip_eps)
    surrogate = torch.minimum(ratio * adv, clipped * adv)  # [B, T]
    per_token = surrogate
    kl = torch.zeros_like(logprobs)
    if options.kl_coef > 0:
        if ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs the reference log-probabilities")
        delta = (ref_logprobs - logprobs) * mask  # log(pi_ref / pi_theta); [B, T]
        kl = torch.exp(delta) - delta - 1.0  # k3, >= 0
        per_token = surrogate - options.kl_coef * kl
    per_token = per_token * mask  # [B, T]

    if options.averaging == "token":
        denominator = total_tokens if total_tokens is not None else mask.sum()
        objective = per_token.sum() / torch.clamp(torch.as_tensor(denominator, dtype=torch.float32), min=1.0)
    else:
        per_sample = per_token.sum(dim=1) / torch.clamp(n_tokens, min=1.0)  # [B]
        denominator = total_samples if total_samples is not None else float(per_sample.shape[0])
        objective = per_sample.sum() / max(float(denominator), 1.0)
    loss = -objective

    with torch.no_grad():
        count = max(float(mask.sum()), 1.0)
        is_clipped = ((ratio < 1.0 - options.clip_eps) & (adv < 0)) | ((ratio > 1.0 + options.clip_eps) & (adv > 0))
        stats = {
            "kl": float((kl * mask).sum()) / count,
            "clip_frac": float((is_clipped.float() * mask).sum()) / count,
            "ratio": float((ratio * mask).sum()) / count,
            "tokens": float(mask.sum()),
        }
    return loss, stats
