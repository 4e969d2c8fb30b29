"""Rollouts for both trainers: groups of G episodes per scenario, played by the runner's one
dialogue loop (`runner.episode.play_episode`), turned into per-role training samples.

A trainable role plays through an `HFAgent` built on its live policy with `trace=True` (see
`policy_agents`), or, with `rollout_engine: vllm`, a `VLLMAgent` on the base model that serves
the policies' adapters as saved after the last update (`vllm_policy_agents`), so every reply
carries the exact prompt ids the model saw, the ids it generated and their log-probabilities under
the sampling distribution. Those become the role's `Sample`s as they are: text is never
re-tokenized. A fixed counterpart (scripted, card, frozen hf:) is any agent; it does not trace and
yields no samples.

Rewards come from the domain's outcome (`Outcome.rewards[role]`), one scalar per role per
episode. The advantage computation (losses.py) sees a role's rewards within its own group only.

Seeds: episode `g` of scenario `s` at step `t` plays with a seed hashed from (run seed, t, s, g),
and the hf: and vllm: backends derive each move's sampling stream from the episode seed (agents/generation.py),
so the same run seed gives the same rollouts whatever the batching or the number of processes.

Several processes (accelerate) split a step's scenarios between them, whole groups at a time
(`shard`), so a group is always normalized where it was played.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import random
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibrl_bench.agents.base import Agent
from ibrl_bench.domains.base import DEFAULT_PROMPT, Domain, Outcome, Role, Scenario, ScenarioSet, Turn
from ibrl_bench.errors import UserError
from ibrl_bench.runner.episode import play_episode
from ibrl_bench.train.samples import Sample


@dataclass
class Rollout:
    """One episode: its outcome and, for every traced role, that role's moves in order."""

    scenario_id: str
    seed: int
    outcome: Outcome
    samples: dict[Role, list[Sample]]
    transcript: list[Turn]  # the episode as the domain recorded it, for reading and debugging

    def reward(self, role: Role) -> float:
        return self.outcome.rewards[role]


@dataclass
class Group:
    """The G rollouts of one scenario in one step: the unit of advantage normalization."""

    scenario: Scenario
    rollouts: list[Rollout]

    def rewards(self, role: Role) -> list[float]:
        return [r.reward(role) for r in self.rollouts]


def episode_seed(seed: int, step: int, scenario_id: str, index: int) -> int:
    key = f"{seed}|{step}|{scenario_id}|{index}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") >> 1


def step_scenarios(scenarios: ScenarioSet, step: int, per_step: int, seed: int) -> list[Scenario]:
    """The scenarios of `step`: the split walked in a seeded order, reshuffled every epoch."""
    pool = list(scenarios.scenarios)
    if not pool:
        raise ValueError(f"scenario set {scenarios.domain}/{scenarios.split} is empty")
    out: list[Scenario] = []
    position = step * per_step
    while len(out) < per_step:
        epoch, offset = divmod(position, len(pool))
        order = list(range(len(pool)))
        random.Random(f"{seed}|{epoch}").shuffle(order)
        out.append(pool[order[offset]])
        position += 1
    return out


def shard(items: Sequence[Any], index: int, count: int) -> list[Any]:
    """This process's share of `items` (whole items; every item goes to exactly one process)."""
    return list(items[index::count])


def collect(
    domain: Domain,
    scenarios: Sequence[Scenario],
    agents: Mapping[Role, Agent],
    group_size: int,
    seed: int,
    step: int,
    traced: Sequence[Role],
    max_turns: int | None = None,
) -> list[Group]:
    """Play `group_size` episodes of every scenario, all concurrently (so a model's batcher
    decodes moves of many episodes together), and return one group per scenario."""
    return asyncio.run(_collect(domain, scenarios, agents, group_size, seed, step, traced, max_turns))


async def _collect(domain, scenarios, agents, group_size, seed, step, traced, max_turns) -> list[Group]:
    jobs = [(i, episode_seed(seed, step, s.id, g)) for i, s in enumerate(scenarios) for g in range(group_size)]
    results = await asyncio.gather(*(play_episode(domain, scenarios[i], agents, ep_seed, max_turns)
                                     for i, ep_seed in jobs))
    groups = [Group(scenario=s, rollouts=[]) for s in scenarios]
    for (i, ep_seed), result in zip(jobs, results, strict=True):
        samples: dict[Role, list[Sample]] = {}
        for role in traced:
            moves = []
            for reply in result.replies[role]:
                if reply.trace is None:
                    raise RuntimeError(f"the agent of role {role} did not trace its moves; it cannot be trained")
                t = reply.trace
                moves.append(Sample(prompt_ids=t.prompt_ids, completion_ids=t.completion_ids, logprobs=t.logprobs))
            samples[role] = moves
        rollout = Rollout(scenarios[i].id, ep_seed, result.outcome, samples, result.state.transcript)
        groups[i].rollouts.append(rollout)
    return groups


def close_agents(agents: Mapping[Role, Agent]) -> None:
    """Release what the agents hold (batcher threads, HTTP clients of API counterparts), each once."""

    async def close() -> None:
        for agent in {id(a): a for a in agents.values()}.values():
            await agent.aclose()

    asyncio.run(close())


def policy_agents(policies: Mapping[Role, Any], domain: Domain, temperature: float, max_new_tokens: int,
                  batch_size: int, max_length: int | None = None, prompt: str = DEFAULT_PROMPT) -> dict[Role, Agent]:
    """hf: agents that play with the live policies and trace their moves, one per model.

    `max_length` (the trainer's tokens per sample) caps the context the agent cuts prompts to, so
    every traced move fits it whole and the trainer never cuts a prompt again (samples.py).

    Policies that are adapters on one shared base get ONE agent: its batches mix both roles' moves,
    each row decoded with its own role's adapter (so the roles' episodes are batched together, as
    they would be with one model). Policies that are models of their own get an agent each.
    """
    from ibrl_bench.agents.hf_local import HFAgent, HFParams

    params = HFParams(temperature=temperature, max_new_tokens=max_new_tokens, batch_size=batch_size, window_ms=5,
                      prompt=prompt)
    by_model: dict[int, list[Role]] = {}
    for role, policy in policies.items():
        by_model.setdefault(id(policy.generation_model()), []).append(role)
    agents: dict[Role, Agent] = {}
    for roles in by_model.values():
        first = policies[roles[0]]
        model = first.generation_model()
        adapters = {role: policies[role].adapter for role in roles}
        if any(a is None for a in adapters.values()):
            adapters = None  # plain models: one policy per model, nothing to pick
        max_positions = getattr(model.config, "max_position_embeddings", None)
        if max_length is not None:
            max_positions = max_length if max_positions is None else min(max_positions, max_length)
        agent = HFAgent(model, first.tokenizer, params, domain, max_positions, trace=True, adapters=adapters)
        agents.update({role: agent for role in roles})
    return agents


def vllm_policy_agents(policies: Mapping[Role, Any], domain: Domain, temperature: float, max_new_tokens: int,
                       batch_size: int, folder: str | Path, gpu_memory_utilization: float = 0.3,
                       kv_cache_gb: float | None = None, max_length: int | None = None,
                       prompt: str = DEFAULT_PROMPT) -> tuple[dict[Role, Agent], Callable[[int], None]]:
    """One vLLM agent for all the LoRA policies (their base is one frozen model), tracing its moves,
    and `sync(step)`, which the trainer calls before every step's rollouts.

    The trainer keeps the PEFT model; the engine holds the base alone. `sync` saves each role's
    adapter as it is now to FOLDER/step-N/ROLE and gives the role a new `LoRARequest` (a new id:
    vLLM caches adapters by id, so a reused id would keep serving the old weights). Each row of a
    batch is then decoded with its own role's adapter, as `policy_agents` does with PEFT. The
    previous step's adapters are deleted once replaced: the engine has read them.
    """
    from ibrl_bench.agents.vllm_local import VLLMAgent, VLLMParams, eos_ids, import_vllm, load_engine
    from ibrl_bench.models.loading import dtype_name

    import_vllm()
    from vllm.lora.request import LoRARequest

    if any(p.adapter is None for p in policies.values()):
        raise UserError("vLLM rollouts need LoRA policies (a model.lora block); full fine-tuning rolls out with hf")
    first = next(iter(policies.values()))
    folder = Path(folder)
    base = rollout_base(first, folder / "base")
    model = first.generation_model()
    dtype = dtype_name(model)
    params = VLLMParams(temperature=temperature, max_new_tokens=max_new_tokens, batch_size=batch_size, window_ms=5,
                        dtype=dtype, gpu_memory_utilization=gpu_memory_utilization, kv_cache_gb=kv_cache_gb,
                        max_lora_rank=max(p.lora_rank() or 1 for p in policies.values()),
                        # prompts cut as the trainer's samples are (samples.py)
                        max_model_len=max_length, prompt=prompt)
    llm, tokenizer = load_engine(base, params, first.base_target, loras=len(policies))
    adapters: dict[Role, Any] = {}
    agent = VLLMAgent(llm, params, domain, tokenizer, eos_ids(base, tokenizer), trace=True, adapters=adapters)
    ids = itertools.count(1)

    def sync(step: int) -> None:
        for role, policy in policies.items():
            path = policy.save_adapter(folder / f"step-{step}" / role)
            adapters[role] = LoRARequest(f"{role}-step-{step}", next(ids), str(path))
        for old in folder.glob("step-*"):
            if old.name != f"step-{step}":
                shutil.rmtree(old, ignore_errors=True)

    return {role: agent for role in policies}, sync


def rollout_base(policy: Any, folder: Path) -> Path:
    """The checkpoint folder of the frozen base that the policies' adapters sit on."""
    from ibrl_bench.models.loading import converted_gguf, dtype_name, load_model, resolve_source

    source = resolve_source(policy.base_target, policy.base_params.get("gguf_file"))
    if policy.warm_adapter is None:
        return converted_gguf(source) if source.gguf_file else source.folder
    # Training from a warm-start adapter runs on base + that adapter merged, which is on no disk.
    if not (folder / "config.json").is_file():
        dtype = dtype_name(policy.generation_model())
        merged = load_model(source, policy.warm_adapter, "cpu", dtype)
        merged.model.merge_and_unload().save_pretrained(folder)
        merged.tokenizer.save_pretrained(folder)
    return folder
