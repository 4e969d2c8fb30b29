"""SFT: a warm start by imitation of transcripts, so that a model learns to speak a domain's protocol
before RL.

Data. Episodes come from cross-play run folders (e.g. scripted policies against scripted
counterparts). Each episode is replayed through its domain: the game restarts from the recorded
scenario and seed, and at every recorded move of an imitated role the sample is

    prompt     = prompt_ids(tokenizer, domain.chat_messages(domain.observe(state, role)), budget)
                 exactly the ids an hf: agent feeds the model for that move (same template, same cut)
    completion = the recorded message, tokenized once, + the end-of-turn (eos) token

and then the recorded text is applied. A replay (runner/replay.py) that does not reproduce the
recorded transcript and outcome (another harness version, another scenario set) is skipped and
counted, never trained on. The recipe picks what to imitate: which roles, which agents' moves, which episodes
(all, agreements only, successes only), and, with `min_own_reward`, only the moves of a role that
scored at least that much in its episode (a warm start that learns deals that pay, not give-aways).

Loss. The mean negative log-likelihood of the completion tokens, over all completion tokens of the
batch (token-level: long messages weigh by their length), with the action mask of `collate`:

    loss = - sum_t mask[b,t] * log p(x[b,t] | x[b,<t]) / sum_t mask[b,t]

Nothing else: no KL, no reward. The checkpoint is a full HF folder (or an adapter with `lora`) that
`hf:` specs load directly; the loss on held-out episodes before and after training is written to
`<out>/sft_summary.json`.

Several GPUs: the same code runs under `accelerate launch`; each process takes its share of every
batch, and gradients are averaged by accelerate (each process's loss is its own token mean).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ibrl_bench.domains.base import DEFAULT_PROMPT, Domain, Observation, Role
from ibrl_bench.errors import UserError
from ibrl_bench.models.tiny import TinyConfig
from ibrl_bench.runner.replay import ReplayMismatch, replay_moves
from ibrl_bench.runner.store import EpisodeRecord
from ibrl_bench.train.policy import ModelOptions
from ibrl_bench.train.samples import Sample

logger = logging.getLogger(__name__)


class FromScratch(BaseModel):
    """A tiny random model built from a config (models/tiny.py): nothing is downloaded."""

    model_config = ConfigDict(extra="forbid")

    seed: int | None = None  # None: the recipe's seed
    # Unset, max_position_embeddings is the recipe's max_length (see _build_from_scratch).
    shape: TinyConfig = Field(default_factory=TinyConfig)


class SFTConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    domain: Literal["dealnodeal", "telesales"]
    transcripts: list[str] = Field(min_length=1)  # cross-play run folders to imitate
    out: str  # output folder: checkpoint/, train_log.jsonl, sft_summary.json
    # The model: either an existing one (`model: {model: hf:PATH, lora: ...}`) or a tiny one built
    # from a shape (`from_scratch: {shape: {hidden_size: 64}}`); exactly one of the two.
    model: ModelOptions | None = None
    from_scratch: FromScratch | None = None
    # What to imitate.
    roles: list[str] | None = None  # None: every role of the domain
    agents: list[str] | None = None  # only moves made by these specs (e.g. scripted:dealnodeal/fair); None: all
    episodes: Literal["all", "agreement", "success"] = "all"
    # Imitate a role's moves only in episodes where that role scored at least this much: deals
    # that pay the speaker, not give-aways (None: no filter).
    min_own_reward: float | None = None
    heldout_share: float = Field(0.1, ge=0, lt=1)  # episodes kept out of training, to measure the loss on
    # Optimization.
    steps: int = Field(200, ge=1)
    batch_size: int = Field(16, ge=1)  # samples (moves) per optimizer step, over all processes
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    # Tokens per sample. Prompts are cut to max_length - max_new_tokens by the one rule of
    # models.chat_template.prompt_ids (system prompt and latest turns kept), as the RL trainers'
    # rollouts cut them; a recorded message longer than max_new_tokens is cut from its end.
    max_length: int = Field(1024, ge=16)
    max_new_tokens: int = Field(64, ge=1)  # set it to what the checkpoint will be played with
    mixed_precision: Literal["no", "bf16", "fp16"] = "no"
    # The role prompt the model reads (domains/*/prompts.py); the checkpoint's spec carries it.
    prompt: str = DEFAULT_PROMPT
    seed: int = 0

    @model_validator(mode="after")
    def _one_model(self) -> SFTConfig:
        if (self.model is None) == (self.from_scratch is None):
            raise ValueError("give exactly one of model (an hf: checkpoint) and from_scratch (a tiny model)")
        if self.max_new_tokens >= self.max_length:
            raise ValueError(f"max_new_tokens={self.max_new_tokens} leaves no room for a prompt "
                             f"in max_length={self.max_length}")
        return self


# -- samples from transcripts -----------------------------------------------------------------


@dataclass
class Move:
    role: Role
    obs: Observation
    text: str
    agent: str  # the spec that made the move


def replay(domain: Domain, record: EpisodeRecord, scenario: Any, max_turns: int) -> list[Move]:
    """Every move of `record`, with the observation its role had, or ReplayMismatch."""
    return [Move(turn.role, obs, turn.text, record.agents[turn.role])
            for group in replay_moves(domain, scenario, record, max_turns) for obs, turn in group]


def completion_ids(tokenizer: Any, text: str) -> list[int]:
    """The message as the model should write it: its tokens, then the end-of-turn token.

    Control tokens written inside a message are split into plain text, as the chat template does
    for prompts, so a transcript cannot teach the model to emit one mid-message.
    """
    ids = tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    return list(ids) + [tokenizer.eos_token_id]


def move_sample(tokenizer: Any, domain: Domain, move: Move, prompt_budget: int | None,
                role_prompt: str = DEFAULT_PROMPT) -> Sample:
    from ibrl_bench.models.chat_template import prompt_ids

    prompt = prompt_ids(tokenizer, domain.chat_messages(move.obs, role_prompt), prompt_budget)
    return Sample(prompt_ids=prompt, completion_ids=completion_ids(tokenizer, move.text))


@dataclass
class Dataset:
    train: list[Sample] = field(default_factory=list)
    heldout: list[Sample] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)  # episodes used, filtered out, skipped, by reason


def build_dataset(config: SFTConfig, tokenizer: Any, prompt_budget: int | None) -> Dataset:
    """Samples of every imitated move of every selected episode of the run folders."""
    from ibrl_bench.domains import get_domain

    domain = get_domain(config.domain)
    domain.role_prompt(config.prompt)
    roles = config.roles or list(domain.roles)
    for role in roles:
        domain.other(role)  # one line on an unknown role
    data = Dataset()
    for folder in config.transcripts:
        for record, scenario, max_turns in _episodes(folder, domain, data.counts):
            if record.outcome.status == "error":
                data.counts["error episodes (skipped)"] += 1
                continue
            if config.episodes != "all" and not getattr(record.outcome, config.episodes):
                data.counts[f"not {config.episodes} (filtered out)"] += 1
                continue
            try:
                moves = replay(domain, record, scenario, max_turns)
            except ReplayMismatch as e:
                data.counts["replay mismatch (skipped)"] += 1
                logger.warning("episode %s of %s does not replay (%s); skipped", record.key, folder, e)
                continue
            floor = config.min_own_reward
            chosen = [m for m in moves if m.role in roles and (config.agents is None or m.agent in config.agents)
                      and (floor is None or record.outcome.rewards[m.role] >= floor)]
            if not chosen:
                data.counts["no imitated move (filtered out)"] += 1
                continue
            data.counts["episodes used"] += 1
            samples = [move_sample(tokenizer, domain, m, prompt_budget, config.prompt) for m in chosen]
            heldout = _hash_share(f"{record.key}|{record.scenario_id}|{record.seed}") < config.heldout_share
            (data.heldout if heldout else data.train).extend(samples)
    if not data.train:
        raise UserError(
            f"no training samples in {', '.join(config.transcripts)} ({_describe_counts(data.counts)}); "
            "check the domain, roles, agents and episodes options"
        )
    return data


def _episodes(folder: str, domain: Domain, counts: Counter):
    """(record, scenario, max_turns) for every finished episode of a run folder of `domain`."""
    run = _open_run(folder, domain.name)
    by_id = run.scenarios
    max_turns = run.manifest.identity.get("max_turns") or domain.default_max_turns
    for record in run.records:
        scenario = by_id.get(record.scenario_id)
        if scenario is None or scenario.hash != record.scenario_hash:
            counts["scenario not found or changed (skipped)"] += 1
            continue
        yield record, scenario, max_turns


def _open_run(folder: str, domain: str) -> Any:
    from ibrl_bench.runs import Run

    run = Run(folder)
    if run.manifest.domain != domain:
        raise UserError(f"{folder} is a {run.manifest.domain} run; this recipe trains {domain}")
    return run


def _hash_share(key: str) -> float:
    """A number in [0, 1) fixed by `key`: the same episodes are held out on every run."""
    import hashlib

    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64


def _describe_counts(counts: Counter) -> str:
    return ", ".join(f"{n} {what}" for what, n in sorted(counts.items())) or "no episodes"


# -- training -----------------------------------------------------------------------------------


def imitation_loss(model: Any, batch: Any) -> tuple[Any, Any]:
    """(mean NLL over completion tokens, number of completion tokens) for a collated batch."""
    from ibrl_bench.train.samples import token_logprobs

    logprobs = token_logprobs(model, batch)  # [B, T], aligned with input_ids
    mask = batch.action_mask  # [B, T], 1 on the completion tokens
    n_tokens = mask.sum()
    return -(logprobs * mask).sum() / n_tokens.clamp(min=1), n_tokens


def mean_loss(model: Any, samples: list[Sample], pad_id: int, max_length: int, batch_size: int,
              device: Any) -> float | None:
    """Token-level mean NLL of `samples` under `model`, without gradients (None when there are none)."""
    import torch

    from ibrl_bench.train.samples import collate

    if not samples:
        return None
    total, tokens = 0.0, 0.0
    with torch.no_grad():
        for i in range(0, len(samples), batch_size):
            batch = collate(samples[i:i + batch_size], pad_id, max_length).to(device)
            loss, n = imitation_loss(model, batch)
            total += float(loss) * float(n)
            tokens += float(n)
    return total / max(tokens, 1.0)


def run(config: SFTConfig, log: Any) -> str:
    """Train by imitation; return the hf: spec of the checkpoint in `<out>/checkpoint`.

    `log` is the StepLog (train/steplog.py) the caller opened for `config.steps` steps; under
    several processes only the first one writes to it, and only the first returns the spec.
    """
    import torch
    from accelerate import Accelerator

    from ibrl_bench.train.policy import load_policy, with_prompt
    from ibrl_bench.train.samples import collate, prompt_budget

    out = Path(config.out)
    for folder in config.transcripts:
        _open_run(folder, config.domain)  # a wrong folder fails now, not after the model is built
    accelerator = Accelerator(mixed_precision=config.mixed_precision)
    torch.manual_seed(config.seed)
    model_options = config.model or _build_from_scratch(config, out, accelerator)
    policy = load_policy(model_options, lr=config.lr, reference=False, weight_decay=config.weight_decay)
    tokenizer = policy.tokenizer
    budget = prompt_budget(model_context(policy.model), config.max_length, config.max_new_tokens)
    data = build_dataset(config, tokenizer, budget)
    logger.info("sft data: %d train and %d held-out samples; %s", len(data.train), len(data.heldout),
                _describe_counts(data.counts))

    model, optimizer = accelerator.prepare(policy.model, policy.optimizer)
    policy.model = model  # save() unwraps it
    device = accelerator.device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    def heldout_loss() -> float | None:
        with policy.active(), accelerator.autocast():
            return mean_loss(model, data.heldout, pad_id, config.max_length, config.batch_size, device)

    heldout_before = heldout_loss()

    order = _Shuffler(len(data.train), config.seed)
    rank, world = accelerator.process_index, accelerator.num_processes
    if config.batch_size < world:
        raise UserError(f"batch_size={config.batch_size} is smaller than the {world} processes; "
                        f"raise it to at least {world}")
    start = time.perf_counter()
    for step in range(1, config.steps + 1):
        # Every process draws the same global batch (same seed, same order) and takes its share.
        indices = order.take(config.batch_size)[rank::world]
        batch = collate([data.train[i] for i in indices], pad_id, config.max_length).to(device)
        tick = time.perf_counter()
        with policy.active(), accelerator.autocast():
            loss, n_tokens = imitation_loss(model, batch)
            accelerator.backward(loss)
        # None under DeepSpeed, which clips inside its engine (gradient_clipping in its config).
        grad_norm = accelerator.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        # The step's loss and tokens over all processes (each process's loss is its own token mean).
        summed = accelerator.reduce(torch.stack([loss.detach() * n_tokens, n_tokens.float()]), reduction="sum")
        seconds = time.perf_counter() - tick
        if accelerator.is_main_process:
            tokens = float(summed[1])
            log.log(step, loss=float(summed[0]) / max(tokens, 1.0),
                    grad_norm=None if grad_norm is None else float(grad_norm), tokens=int(tokens),
                    tokens_per_s=tokens / max(seconds, 1e-9), samples=config.batch_size)

    heldout_after = heldout_loss()
    accelerator.wait_for_everyone()
    spec = ""
    if accelerator.is_main_process:
        spec = with_prompt(policy.save(out / "checkpoint"), config.prompt)
        summary = {
            "spec": spec,
            "train_samples": len(data.train),
            "heldout_samples": len(data.heldout),
            "prompt": _prompt_record(config),
            "heldout_loss_before": heldout_before,
            "heldout_loss_after": heldout_after,
            "episodes": dict(data.counts),
            "seconds": round(time.perf_counter() - start, 2),
        }
        (out / "sft_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return spec


def _prompt_record(config: SFTConfig) -> dict[str, str]:
    from ibrl_bench.domains import get_domain

    p = get_domain(config.domain).role_prompt(config.prompt)
    return {"name": p.name, "version": p.version, "hash": p.hash}


def _build_from_scratch(config: SFTConfig, out: Path, accelerator: Any) -> ModelOptions:
    from ibrl_bench.models.tiny import build_tiny_model

    scratch = config.from_scratch
    assert scratch is not None
    shape = scratch.shape
    if "max_position_embeddings" not in shape.model_fields_set:
        # The model declares the context it is trained on: every hf: agent cuts its prompts to the
        # model's context, so cross-play plays it on the contexts SFT and the RL rollouts cut to,
        # never at positions no training step reached (2048 by default, against a max_length of 256-1024).
        shape = shape.model_copy(update={"max_position_embeddings": config.max_length})
    folder = out / "init"
    if accelerator.is_main_process:
        build_tiny_model(folder, seed=config.seed if scratch.seed is None else scratch.seed, config=shape)
    accelerator.wait_for_everyone()
    return ModelOptions(model=f"hf:{folder.resolve()}")


class _Shuffler:
    """Endless passes over range(n), each in a fresh seeded order."""

    def __init__(self, n: int, seed: int):
        self.n, self.rng, self.queue = n, random.Random(seed), []

    def take(self, k: int) -> list[int]:
        while len(self.queue) < k:
            epoch = list(range(self.n))
            self.rng.shuffle(epoch)
            self.queue.extend(epoch)
        taken, self.queue = self.queue[:k], self.queue[k:]
        return taken



def model_context(model: Any) -> int | None:
    """The model's context length, as an hf: agent reads it (models/loading.py, agents/hf_local.py)."""
    config = getattr(model, "config", None)
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
