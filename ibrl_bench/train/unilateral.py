"""Unilateral RL: one role trained with GRPO against a fixed counterpart, the paper's baseline.

The counterpart is any agent spec (`scripted:dealnodeal/boulware`, `card:NAME`, `hf:FOLDER` of a
frozen checkpoint); it plays its role in every rollout and is never updated. Everything else is
IB-RL's code, unchanged (ibrl.py): the same rollouts (`rollout.collect` through the runner's
dialogue loop), the same per-role advantages, masks and GRPO update; only the set of trainable
roles differs. That is the comparison the paper makes: the counterpart is static instead of
coevolving.

    for each step: G episodes per scenario, pi_role vs the fixed counterpart
                   A = normalize_g(r_role); GRPO on role's own tokens; one optimizer step
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import Field

from ibrl_bench.domains.base import Role
from ibrl_bench.errors import UserError
from ibrl_bench.train.ibrl import (
    IBRLConfig,
    StepLogger,
    check_rollout_engine,
    make_accelerator,
    make_agents,
    on_device,
    prepare,
    save,
    seed_everything,
    train,
)
from ibrl_bench.train.policy import describe, load_policies
from ibrl_bench.train.rollout import close_agents

logger = logging.getLogger(__name__)


class UnilateralConfig(IBRLConfig):
    """IB-RL's hyperparameters, plus which role is trained and whom it faces."""

    role: str  # the trained role: a or b (dealnodeal), seller or buyer (telesales)
    counterpart: str = Field(min_length=1)  # the fixed agent spec of the other role


def run(config: UnilateralConfig, log: StepLogger | None = None) -> dict[Role, str]:
    """Train `config.role` against the counterpart; save its checkpoint; return {role: hf: spec}."""
    from ibrl_bench.agents.spec import build_agent
    from ibrl_bench.domains import get_domain

    check_rollout_engine(config)
    domain = get_domain(config.domain)
    domain.role_prompt(config.prompt)
    if config.role not in domain.roles:
        raise UserError(f"role {config.role!r} is not a role of {config.domain}; roles are {', '.join(domain.roles)}")
    accelerator = make_accelerator(config)
    scenarios = domain.scenario_set(config.split, config.scenario_limit)
    seed_everything(config.seed)
    policies = load_policies(on_device(config.model, accelerator), [config.role], config.lr,
                             reference=config.kl_coef > 0, weight_decay=config.weight_decay)
    logger.info("training %s", describe(policies))
    prepare(accelerator, policies, config.mixed_precision)
    agents, sync = make_agents(policies, domain, config, accelerator)
    agents[domain.other(config.role)] = build_agent(counterpart_on_device(config.counterpart, accelerator), config.domain).agent
    try:
        train(config, accelerator, domain, scenarios, policies, agents, log, sync)
    finally:
        close_agents(agents)
    return save(accelerator, policies, config.out, config.prompt)


def counterpart_on_device(spec: str, accelerator: Any) -> str:
    """A frozen hf: counterpart goes on this process's GPU unless its spec names a device
    (`device=auto` would put every process's copy on cuda:0)."""
    from ibrl_bench.agents.spec import parse_spec

    parsed = parse_spec(spec)
    if parsed.kind != "hf" or "device" in parsed.params or accelerator.device.type != "cuda":
        return spec
    return f"{spec}{'&' if '?' in spec else '?'}device={accelerator.device}"
