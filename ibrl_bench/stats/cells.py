"""The metrics of one cell of the cross-play matrix: (policy, counterpart, role of the policy).

Input is one row per episode. Episodes with status `error` are infrastructure failures (timeouts,
HTTP errors): they are dropped before any metric is computed, so they never count as the policy's
failure; `cell_counts` reports how many there were. Every metric is clustered by `scenario_id`
(see `intervals.py`), so its estimate is the mean over scenarios of the per-scenario mean.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ibrl_bench.domains.base import STATUSES
from ibrl_bench.stats.intervals import Interval, mean_interval, rate_interval

REQUIRED_COLUMNS: tuple[str, ...] = (
    "scenario_id", "seed", "status", "agreement", "success", "policy_score",
    "counterpart_score", "policy_violated",
)
# Columns named `m_<name>` carry a domain's own per-episode metrics (Outcome.metrics): booleans
# become rates, numbers means, each over the scored episodes where the domain gave a value (None
# means "not defined here", e.g. Pareto optimality without a deal).
DOMAIN_PREFIX = "m_"


def _validate(df: pd.DataFrame) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"episode table lacks column(s) {missing}; expected {list(REQUIRED_COLUMNS)}")
    unknown = sorted(set(df["status"]) - set(STATUSES))
    if unknown:
        raise ValueError(f"unknown episode status(es) {unknown}; expected one of {list(STATUSES)}")


def _scored(df: pd.DataFrame) -> pd.DataFrame:
    """The episodes that count: everything but infrastructure errors."""
    return df[df["status"] != "error"]


def cell_counts(df: pd.DataFrame) -> dict[str, int]:
    """How many episodes the cell holds, and how many of them were scored.

    `n_scenarios` counts every scenario attempted; `n_scenarios_scored` those with at least one
    non-error episode (a scenario with only errors drops out of every mean).
    """
    _validate(df)
    scored = _scored(df)
    return {
        "n_episodes": len(df),
        "n_errors": int((df["status"] == "error").sum()),
        "n_scored": len(scored),
        "n_scenarios": int(df["scenario_id"].nunique()),
        "n_scenarios_scored": int(scored["scenario_id"].nunique()),
    }


def cell_metrics(df: pd.DataFrame, confidence: float = 0.95, n_resamples: int = 2000,
                 seed: int = 0) -> dict[str, Interval]:
    """Rates and mean scores of one cell, each with a scenario-clustered interval.

    Keys: agreement, success_at_1, policy_score, counterpart_score, invalid (any player broke the
    protocol), policy_invalid (the policy did), max_turns, and one per domain metric column
    (`m_pareto_optimal` -> `pareto_optimal`). Denominators are the non-error episodes, except for
    domain metrics, whose denominators are the episodes where the metric is defined. An empty
    cell (or one with only errors) gives intervals whose estimate is None.
    """
    _validate(df)
    scored = _scored(df)
    clusters = scored["scenario_id"].astype(str).to_numpy()
    kw = dict(confidence=confidence, n_resamples=n_resamples, seed=seed)

    def rate(flags: pd.Series, groups=clusters) -> Interval:
        return rate_interval(flags.astype(bool).to_numpy(dtype=float), groups, **kw)

    def mean(col: str) -> Interval:
        return mean_interval(scored[col].to_numpy(dtype=float), clusters, **kw)

    metrics = {
        "agreement": rate(scored["agreement"]),
        "success_at_1": rate(scored["success"]),
        "policy_score": mean("policy_score"),
        "counterpart_score": mean("counterpart_score"),
        "invalid": rate(scored["status"] == "invalid"),
        "policy_invalid": rate(scored["policy_violated"]),
        "max_turns": rate(scored["status"] == "max_turns"),
    }
    for col in sorted(c for c in df.columns if c.startswith(DOMAIN_PREFIX)):
        defined = scored[scored[col].notna()]
        values, groups = defined[col], defined["scenario_id"].astype(str).to_numpy()
        if all(isinstance(v, (bool, np.bool_)) for v in values):
            metrics[col[len(DOMAIN_PREFIX):]] = rate(values, groups)
        else:
            metrics[col[len(DOMAIN_PREFIX):]] = mean_interval(values.to_numpy(dtype=float), groups, **kw)
    return metrics
