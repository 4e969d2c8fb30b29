"""IB-RL: Isolated Bilateral Reinforcement Learning (arXiv 2608.06735), with GRPO per role.

Both roles of a domain are trainable policies that coevolve: every step they play joint rollouts
against each other, each sampling from its current policy. Each role then optimizes its own
reward through a fully separate path:

    for each step t:
        S_t  = the step's scenarios (train split)                       rollout.step_scenarios
        for s in S_t, g in 1..G: episode(s, g) played by pi_a vs pi_b    rollout.collect
        for role in (a, b):                      <- the two update paths part here
            A_role[s, g] = normalize_g(r_role[s, 1..G])[g]               role_batch: own rewards,
                                                                          own group, nothing of
                                                                          the other role
            mask_role    = 1 on the ids role generated, else 0           samples.collate
            loss_role    = GRPO(pi_role, A_role, mask_role, pi_ref)       losses.grpo_loss
            step role's own optimizer on role's own parameters          update_role

Isolation. A role's samples are its own moves only (the other side's messages are in its prompt,
under mask 0), its advantages come from its own rewards only, and its loss is backpropagated
through its own policy only: with LoRA on a shared base, the other role's adapter is switched off
and frozen during the forward (policy.Policy.active); without LoRA, the roles are two models. The
optimizers hold disjoint parameters. No gradient is shared.

Unilateral RL is the same run with one argument: `run(config, fixed={other_role: spec})` trains
the remaining role against that fixed agent (unilateral.py only checks its options and makes the
call). IB-RL is `fixed={}`: every role trains.

Scale. The plumbing lives in distributed.py (accelerate, DDP, FSDP): each process plays its share of
the step's scenarios (whole groups, so the group normalization is local), and the update is the
one a single process would make on all the step's groups: each process divides its loss by the
step's sample (or token) count over all processes (`over_processes`), and runs as many
micro-batches as the process with the most (`empty_batch`). Every logged metric is over all
processes.

Rollouts (`rollout_engine`). `hf` (the default): HF `generate` on the live policy through the
project's hf: agent; with two adapters on one base, one `generate` call decodes both roles' moves,
each row with its own role's adapter (rollout.policy_agents). `vllm` (LoRA runs in one process): a
vLLM engine on the frozen base decodes them through the vllm: agent; before every step's rollouts
each role's adapter is saved and handed to the engine as a new LoRA request (`sync`,
rollout.vllm_policy_agents). Either way the episodes are played by the one dialogue loop
(`rollout.collect`) and every move records its log-probabilities under the sampling distribution
(logits / temperature), which the GRPO ratio recomputes. Full fine-tuning is refused with vLLM:
every step would have to copy all the weights into the engine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ibrl_bench.domains.base import DEFAULT_PROMPT, Domain, Role, ScenarioSet
from ibrl_bench.errors import UserError
from ibrl_bench.train import resume
from ibrl_bench.train.distributed import (
    clip_gradients,
    counterpart_on_device,
    empty_batch,
    gather,
    gradient_sync,
    make_accelerator,
    on_device,
    over_processes,
    prepare,
    rollout_weights,
    save,
    seed_everything,
)
from ibrl_bench.train.losses import GRPOOptions, group_advantages, grpo_loss
from ibrl_bench.train.policy import ModelOptions, Policy, describe, load_policies
from ibrl_bench.train.rollout import (
    Group,
    close_agents,
    collect,
    policy_agents,
    shard,
    step_scenarios,
    vllm_policy_agents,
)
from ibrl_bench.train.samples import (
    Sample,
    collate,
    token_logprobs,
    token_logprobs_and_entropy,
)

logger = logging.getLogger(__name__)


class IBRLConfig(BaseModel):
    """Hyperparameters of an IB-RL run (a recipe in training/ is one of these, as YAML)."""

    model_config = ConfigDict(extra="forbid")

    model: ModelOptions  # what both roles start from (an hf: model; LoRA or full fine-tuning)
    domain: str = "dealnodeal"
    split: str = "train"  # scenarios to train on (train or dev; the test split is held out)
    scenario_limit: int | None = Field(None, ge=1)  # use only the first N scenarios of the split
    out: str  # output folder: one checkpoint folder per role, train_log.jsonl
    # Rollouts.
    steps: int = Field(100, ge=1)
    scenarios_per_step: int = Field(8, ge=1)  # over all processes
    group_size: int = Field(8, ge=2)  # G: episodes per scenario, the group of GRPO
    temperature: float = Field(1.0, gt=0)  # sampling temperature of the rollouts (top_p is 1)
    max_new_tokens: int = Field(64, ge=1)  # per move
    # The domain's role prompt the policies read (domains/*/prompts.py); the saved checkpoints'
    # specs carry it (`?prompt=compact`), so cross-play plays them as they were trained.
    prompt: str = DEFAULT_PROMPT
    max_turns: int | None = Field(None, ge=1)  # None: the domain's default
    rollout_batch_size: int = Field(64, ge=1)  # moves decoded together by one generate call
    # hf: HF generate on the live policy. vllm: a vLLM engine on the frozen base that loads each
    # role's adapter anew after every update (LoRA only; see rollout.vllm_policy_agents).
    rollout_engine: Literal["hf", "vllm"] = "hf"
    # The share of the GPU's memory (on a CPU, of the RAM) the vLLM engine may take; the rest is the trainer's.
    vllm_memory_utilization: float = Field(0.3, gt=0, lt=1)
    vllm_kv_cache_gb: float | None = Field(None, gt=0)  # a fixed KV cache size instead (handy on a CPU)
    # GRPO.
    lr: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    clip_eps: float = Field(0.2, gt=0)
    kl_coef: float = Field(0.04, ge=0)  # 0: no reference model, no reference forward
    scale_rewards: bool = True  # False: advantages are centred, not divided by the group std
    averaging: Literal["sequence", "token"] = "sequence"  # per-move token mean (the paper) or all tokens
    updates_per_step: int = Field(1, ge=1)  # optimizer steps on one rollout batch (>1: the clip acts)
    micro_batch_size: int = Field(8, ge=1)  # samples per forward/backward
    # Tokens per sample: rollout prompts are cut to max_length - max_new_tokens (system prompt and
    # latest turns kept: samples.py), so the trainer sees exactly what the policy acted on.
    max_length: int | None = Field(None, ge=16)
    max_grad_norm: float | None = Field(1.0, gt=0)
    # bf16 autocast on GPUs that have it; no fp16: its loss scaler would be shared by two optimizers
    mixed_precision: Literal["no", "bf16"] = "no"
    seed: int = 0
    # Write out/resume/state.pt every N steps and after the last; a rerun continues from it (resume.py).
    save_every: int = Field(10, ge=1)

    @field_validator("split")
    @classmethod
    def _not_test(cls, v: str) -> str:
        if v == "test":
            raise ValueError("the test split is held out for evaluation and the leaderboard; train on train (or dev)")
        return v

    @field_validator("max_length")
    @classmethod
    def _room_for_a_prompt(cls, v: int | None, info: ValidationInfo) -> int | None:
        new = info.data.get("max_new_tokens")
        if v is not None and new is not None and new >= v:
            raise ValueError(f"max_new_tokens={new} leaves no room for a prompt in max_length={v}")
        return v

    @field_validator("rollout_engine")
    @classmethod
    def _vllm_needs_lora(cls, v: str, info: ValidationInfo) -> str:
        model = info.data.get("model")
        # Full fine-tuning would have to copy every updated weight into the engine after every
        # step; vLLM loads new LoRA adapters cheaply, so only LoRA runs roll out with it.
        if v == "vllm" and model is not None and model.lora is None:
            raise ValueError("vLLM rollouts need LoRA (a model.lora block); full fine-tuning rolls out with hf")
        return v

    def grpo(self) -> GRPOOptions:
        return GRPOOptions(clip_eps=self.clip_eps, kl_coef=self.kl_coef, scale_rewards=self.scale_rewards,
                           averaging=self.averaging)


class StepLogger(Protocol):
    def log(self, step: int, **metrics: Any) -> None: ...


def run(config: IBRLConfig, log: StepLogger | None = None, fixed: Mapping[Role, str] | None = None) -> dict[Role, str]:
    """Train every role of the domain except those in `fixed` ({role: agent spec}, played by that
    agent, never updated); save one checkpoint per trained role under `out`; return each trained
    role's hf: spec. IB-RL: `fixed` empty. Unilateral RL: one role fixed (unilateral.py)."""
    from ibrl_bench.agents.spec import build_agent
    from ibrl_bench.domains import get_domain

    check_rollout_engine(config)
    domain = get_domain(config.domain)
    domain.role_prompt(config.prompt)  # an unknown prompt fails before any model loads
    fixed = dict(fixed or {})
    for role in fixed:
        domain.other(role)  # one line on an unknown role
    trained = [r for r in domain.roles if r not in fixed]
    if not trained:
        raise UserError(f"every role of {config.domain} is fixed; leave at least one to train")
    accelerator = make_accelerator(config)
    scenarios = domain.scenario_set(config.split, config.scenario_limit)
    seed_everything(config.seed)
    policies = load_policies(on_device(config.model, accelerator), trained, config.lr,
                             reference=config.kl_coef > 0, weight_decay=config.weight_decay)
    logger.info("training %s", describe(policies))
    prepare(accelerator, policies, config.mixed_precision)
    agents, sync = make_agents(policies, domain, config, accelerator)  # one agent for both roles on one base
    for role, spec in fixed.items():
        agents[role] = build_agent(counterpart_on_device(spec, accelerator), config.domain).agent
    try:
        train(config, accelerator, domain, scenarios, policies, agents, log, sync)
    finally:
        close_agents(agents)
    return save(accelerator, policies, config.out, config.prompt)


def train(config: IBRLConfig, accelerator: Any, domain: Domain, scenarios: ScenarioSet,
          policies: dict[Role, Policy], agents: dict[Role, Any], log: StepLogger | None,
          sync: Callable[[int], None] | None = None) -> None:
    """The loop: joint rollouts, then one isolated update per trainable role (the roles in
    `policies`; the others' agents are fixed). `sync(step)`, when given, hands the rollout engine
    the policies as they are before the step."""
    if config.scenarios_per_step % accelerator.num_processes:
        # Every process must hold whole groups and take part in every backward (DDP waits for all).
        raise UserError(f"scenarios_per_step={config.scenarios_per_step} does not split evenly over "
                        f"{accelerator.num_processes} processes; make it a multiple of the process count")
    done = resume.restore(config, policies)  # 0 unless out/ holds a state of this recipe
    if done:
        logger.info("resuming %s after step %d of %d", config.out, done, config.steps)
    for step in range(done + 1, config.steps + 1):
        started = time.perf_counter()
        step_set = step_scenarios(scenarios, step, config.scenarios_per_step, config.seed)
        mine = shard(step_set, accelerator.process_index, accelerator.num_processes)
        if sync is not None:
            sync(step)
        with rollout_weights(policies):
            groups = collect(domain, mine, agents, config.group_size, config.seed, step, list(policies),
                             config.max_turns)
        # The slowest process's rollouts: the update cannot start before they end.
        rollout_s = over_processes(accelerator, [time.perf_counter() - started], first_max=True)[0]
        metrics: dict[str, Any] = {"reward": mean_rewards(groups, domain.roles, accelerator),
                                   "reward_groups": group_rewards(groups, list(policies), accelerator),
                                   "signal_groups": signal_groups(groups, list(policies), accelerator)}
        metrics.update(update_all(policies, groups, config, accelerator))
        trained_tokens = metrics.pop("tokens")
        seconds = time.perf_counter() - started
        metrics.update(rollout_s=rollout_s, update_s=seconds - rollout_s,
                       tokens=trained_tokens, tokens_per_s=trained_tokens / max(seconds, 1e-9))
        if log is not None and accelerator.is_main_process:
            log.log(step, **metrics)
        if step % config.save_every == 0 or step == config.steps:
            resume.save(config, step, policies, accelerator)


def update_all(policies: dict[Role, Policy], groups: list[Group], config: IBRLConfig,
               accelerator: Any) -> dict[str, Any]:
    """One GRPO update per trainable role on the same rollouts; per-role statistics, over all
    processes (tokens: the sum over roles and processes)."""
    metrics: dict[str, Any] = {"tokens": 0}
    for role, policy in policies.items():  # the update paths part: nothing crosses roles below
        samples, advantages = role_batch(groups, role, config.grpo())
        stats = update_role(policy, samples, advantages, config, accelerator)
        metrics["tokens"] += int(stats.pop("tokens", 0))
        for key, value in stats.items():
            metrics.setdefault(key, {})[role] = value
    return metrics


def role_batch(groups: list[Group], role: Role, options: GRPOOptions) -> tuple[list[Sample], list[float]]:
    """Role's moves and their advantages. Where the per-role advantages are computed: from
    `role`'s rewards only, normalized within each scenario's group only."""
    samples: list[Sample] = []
    advantages: list[float] = []
    for group in groups:
        adv = group_advantages(group.rewards(role), options.scale_rewards, options.adv_eps)  # [G]
        for rollout, a in zip(group.rollouts, adv, strict=True):
            for sample in rollout.samples[role]:  # every move of the episode shares its advantage
                samples.append(sample)
                advantages.append(a)
    return samples, advantages


def update_role(policy: Policy, samples: list[Sample], advantages: list[float], config: IBRLConfig,
                accelerator: Any) -> dict[str, float]:
    """GRPO on one role's samples, one role's optimizer. Returns loss, kl, entropy, clip fraction,
    ratio, the share of samples cut by max_length, and the tokens trained on: all over every
    process (token-weighted means, sums of counts), the same on every process."""
    import torch

    options = config.grpo()
    world = accelerator.num_processes
    pad_id = policy.tokenizer.pad_token_id
    # The action mask is built here (collate: 1 on the role's generated ids, from lengths).
    chunks = [range(i, min(i + config.micro_batch_size, len(samples)))
              for i in range(0, len(samples), config.micro_batch_size)]
    batches = [collate([samples[i] for i in c], pad_id, config.max_length) for c in chunks]
    adv = [torch.tensor([advantages[i] for i in c], dtype=torch.float32) for c in chunks]
    # Prompts were built to fit max_length (rollout.policy_agents); only a completion can be cut.
    limit = config.max_length
    truncated = sum(1 for s in samples if limit is not None and _length(s) > limit)
    local_tokens = float(sum(b.action_mask.sum() for b in batches))
    count, step_tokens, step_samples = over_processes(accelerator, [len(batches), local_tokens, len(samples)],
                                                      first_max=True)
    if count == 0:
        return {}  # no process has a move of this role in this step
    while len(batches) < count:  # every process runs as many forwards and backwards (distributed.py)
        batches.append(empty_batch(pad_id))
        adv.append(torch.zeros(1))
    batches = [b.to(accelerator.device) for b in batches]
    adv = [a.to(accelerator.device) for a in adv]
    refs: list[Any] = [None] * len(batches)
    if options.kl_coef > 0:  # kl_coef == 0: no reference forward at all
        with policy.reference() as reference, accelerator.autocast():
            refs = [token_logprobs(reference, b, config.temperature) for b in batches]
    # Gradients are averaged over processes, so each divides its sum by 1/world of the step's
    # counts: their mean is then the loss of the whole step, as one process would compute it.
    share_tokens, share_samples = step_tokens / world, step_samples / world
    sums: dict[str, float] = {}  # token-weighted sums of this process, over all updates
    loss_sum = 0.0
    with policy.active() as model:
        for _ in range(config.updates_per_step):
            policy.optimizer.zero_grad(set_to_none=True)
            for k, (batch, a, ref) in enumerate(zip(batches, adv, refs, strict=True)):
                with accelerator.autocast():
                    logprobs, entropy = token_logprobs_and_entropy(model, batch, config.temperature)
                loss, stats = grpo_loss(logprobs, batch.old_logprobs, ref, a, batch.action_mask, options,
                                        total_tokens=share_tokens, total_samples=share_samples)
                with gradient_sync(accelerator, model, last=k == len(batches) - 1):
                    accelerator.backward(loss)
                # Statistics weighted by tokens, so the step's value is the mean over its tokens.
                n = stats["tokens"]
                stats["entropy"] = float((entropy * batch.action_mask).sum()) / max(n, 1.0)
                for key in ("kl", "clip_frac", "ratio", "entropy"):
                    sums[key] = sums.get(key, 0.0) + stats[key] * n
                loss_sum += float(loss.detach())
            if config.max_grad_norm is not None:
                clip_gradients(accelerator, policy, config.max_grad_norm)
            policy.optimizer.step()
    keys = ("kl", "clip_frac", "ratio", "entropy")
    totals = over_processes(accelerator, [sums.get(k, 0.0) for k in keys] + [loss_sum, float(truncated)])
    divisor = max(step_tokens, 1.0) * config.updates_per_step
    metrics = {k: v / divisor for k, v in zip(keys, totals, strict=False)}
    # Each process's loss is world x its part of the step's (see above): their mean is the step's.
    metrics["loss"] = totals[len(keys)] / world / config.updates_per_step
    metrics["tokens"] = step_tokens  # distinct tokens trained on, however many updates reuse them
    metrics["truncated"] = totals[len(keys) + 1] / max(step_samples, 1)
    return metrics


def _length(sample: Sample) -> int:
    return len(sample.prompt_ids) + len(sample.completion_ids)


def mean_rewards(groups: list[Group], roles: tuple[Role, ...], accelerator: Any) -> dict[Role, float]:
    """Each role's mean reward over the step's rollouts on all processes."""
    rollouts = [r for g in groups for r in g.rollouts]
    local = [sum(r.reward(role) for r in rollouts) for role in roles] + [len(rollouts)]
    *sums, count = over_processes(accelerator, local)
    return {role: total / max(count, 1) for role, total in zip(roles, sums, strict=True)}


def group_rewards(groups: list[Group], roles: list[Role], accelerator: Any) -> dict[Role, list[float]]:
    """Each trained role's mean reward per group (one per scenario of the step, over all
    processes): what a learning curve's interval resamples, scenarios being the clusters."""
    return {role: [round(x, 6) for x in gather(accelerator, [sum(g.rewards(role)) / len(g.rollouts) for g in groups])]
            for role in roles}


def signal_groups(groups: list[Group], roles: list[Role], accelerator: Any) -> dict[Role, float]:
    """Each trained role's share of the step's groups (over all processes) whose rewards are not all
    equal: only those carry an advantage, so the share is how much of the step can teach anything."""
    shares = {}
    for role in roles:
        flags = gather(accelerator, [float(len(set(g.rewards(role))) > 1) for g in groups])
        shares[role] = sum(flags) / max(len(flags), 1)
    return shares


def check_rollout_engine(config: IBRLConfig) -> None:
    """Fail before any model loads when the rollout engine is not installed."""
    if config.rollout_engine == "vllm":
        from ibrl_bench.agents.vllm_local import import_vllm

        import_vllm()


def make_agents(policies: dict[Role, Policy], domain: Domain, config: IBRLConfig,
                accelerator: Any) -> tuple[dict[Role, Any], Callable[[int], None] | None]:
    """The trainable roles' rollout agents, and the hook that keeps a vLLM engine's adapters current."""
    if config.rollout_engine == "hf":
        agents = policy_agents(policies, domain, config.temperature, config.max_new_tokens, config.rollout_batch_size,
                               config.max_length, config.prompt)
        return agents, None
    if accelerator.num_processes > 1:
        # Each process would need its own engine on its own GPU beside its trainer; not written.
        raise UserError("rollout_engine vllm runs in one process; launch without several processes, or use hf")
    return vllm_policy_agents(policies, domain, config.temperature, config.max_new_tokens, config.rollout_batch_size,
                              Path(config.out) / "rollout-adapters", config.vllm_memory_utilization,
                              config.vllm_kv_cache_gb, config.max_length, config.prompt)
