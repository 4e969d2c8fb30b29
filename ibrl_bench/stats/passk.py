"""pass@k and pass^k over the seeds of each scenario.

With n seeds of a scenario, c of them successes:

- pass@k, the chance that at least one of k attempts succeeds, estimated without bias by
  1 - C(n - c, k) / C(n, k) (Chen et al. 2021): the share of the k-subsets of the n seeds that
  hold a success;
- pass^k, the chance that all k attempts succeed (reliability; Yao et al. 2024, tau-bench), by
  C(c, k) / C(n, k): the share of k-subsets that are all successes.

Both are averaged over scenarios. Each is a proportion per scenario, so its interval is the engine's
rate interval (`intervals.proportion_interval`, the episodes of each scenario as its size): pass@1,
pass^1 and the cell table's Success@1 are the same interval on the same data. Only scenarios with
at least k scored seeds count for k.
"""

from __future__ import annotations

from math import comb

import numpy as np
import pandas as pd
from pydantic import BaseModel

from ibrl_bench.errors import UserError
from ibrl_bench.stats.intervals import Interval, proportion_interval
from ibrl_bench.stats.paired import scored_with_metric

CELL = ["policy", "counterpart", "policy_role"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n attempts with c successes (exact integer arithmetic)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k (all k attempts succeed) from n attempts with c successes."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return comb(c, k) / comb(n, k)


class PassK(BaseModel):
    policy: str
    counterpart: str
    policy_role: str
    metric: str
    k: int
    pass_at_k: Interval
    pass_hat_k: Interval


def passk_table(frame: pd.DataFrame, metric: str = "success_at_1", ks: list[int] | None = None,
                confidence: float = 0.95) -> list[PassK]:
    """pass@k and pass^k of every cell for k = 1 .. the largest number of seeds (or `ks`)."""
    data, kind = scored_with_metric(frame, metric)
    if kind != "rate":
        raise UserError(f"pass@k needs a success/failure metric; {metric} is a score")
    out = []
    for (policy, counterpart, role), rows in data.groupby(CELL, sort=False):
        per = rows.groupby(rows["scenario_id"].astype(str))["y"].agg(["size", "sum"])
        n_s, c_s = per["size"].to_numpy(), per["sum"].to_numpy().astype(int)
        for k in ks or range(1, int(n_s.max()) + 1):
            ok = n_s >= k
            at = np.array([pass_at_k(n, c, k) for n, c in zip(n_s[ok], c_s[ok], strict=True)])
            hat = np.array([pass_hat_k(n, c, k) for n, c in zip(n_s[ok], c_s[ok], strict=True)])
            out.append(PassK(policy=policy, counterpart=counterpart, policy_role=role, metric=metric, k=k,
                             pass_at_k=proportion_interval(at, n_s[ok], confidence),
                             pass_hat_k=proportion_interval(hat, n_s[ok], confidence)))
    return out
