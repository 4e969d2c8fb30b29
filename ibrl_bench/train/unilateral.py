"""Unilateral RL: one role trained with GRPO against a fixed counterpart, the paper's baseline.

The counterpart is any agent spec (`scripted:dealnodeal/boulware`, `card:NAME`, `hf:FOLDER` of a
frozen checkpoint); it plays its role in every rollout and is never updated. The run is IB-RL's
(ibrl.py), unchanged, with one argument: the other role is `fixed` to the counterpart. The same
rollouts, per-role advantages, masks and GRPO update; only the set of trainable roles differs.
That is the comparison the paper makes: the counterpart is static instead of coevolving.

    ibrl.run(config, log, fixed={other_role: counterpart})
"""

from __future__ import annotations

from pydantic import Field

from ibrl_bench.domains.base import Role
from ibrl_bench.errors import UserError
from ibrl_bench.train import ibrl
from ibrl_bench.train.ibrl import IBRLConfig, StepLogger


class UnilateralConfig(IBRLConfig):
    """IB-RL's hyperparameters, plus which role is trained and whom it faces."""

    role: str  # the trained role: a or b (dealnodeal), seller or buyer (telesales)
    counterpart: str = Field(min_length=1)  # the fixed agent spec of the other role


def run(config: UnilateralConfig, log: StepLogger | None = None) -> dict[Role, str]:
    """Train `config.role` against the counterpart; save its checkpoint; return {role: hf: spec}."""
    from ibrl_bench.domains import get_domain

    domain = get_domain(config.domain)
    if config.role not in domain.roles:
        raise UserError(f"role {config.role!r} is not a role of {config.domain}; roles are {', '.join(domain.roles)}")
    return ibrl.run(config, log, fixed={domain.other(config.role): config.counterpart})
