"""The metrics of one cell of the cross-play matrix: (policy, counterpart, role of the policy).

Input is one row per episode. Episodes with status `error` are infrastructure failures (timeouts,
HTTP errors): they are dropped before any metric is computed, so they never count as the policy's
failure; `cell_counts` reports how many there were. Every metric is clustered by `scenario_id`
(see `intervals.py`, the interval engine), so its estimate is the mean over scenarios of the per-scenario mean.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from ibrl_bench.domains.base import STATUSES
from ibrl_bench.runner.store import DOMAIN_PREFIX
from ibrl_bench.stats.intervals import Interval, interval_of

REQUIRED_COLUMNS: tuple[str, ...] = (
    "scenario_id", "seed", "status", "agreement", "success", "policy_score",
    "counterpart_score", "policy_violated",
)
# Columns named `m_<name>` (DOMAIN_PREFIX, from the episode row in runner/store.py) carry a domain's
# own per-episode metrics (Outcome.metrics): booleans become rates, numbers means, each over the
# scored episodes where the domain gave a value (None means "not defined here", e.g. Pareto
# optimality without a deal).


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


# The built-in metrics: (kind, how to read the per-episode value from the episode table). A
# "rate" is a mean of 0/1 outcomes, a "mean" a mean of scores (intervals.py says how each is made).
BUILTIN_METRICS: dict[str, tuple[str, Callable[[pd.DataFrame], pd.Series]]] = {
    "agreement": ("rate", lambda d: d["agreement"]),
    "success_at_1": ("rate", lambda d: d["success"]),
    "policy_score": ("mean", lambda d: d["policy_score"]),
    "counterpart_score": ("mean", lambda d: d["counterpart_score"]),
    "invalid": ("rate", lambda d: d["status"] == "invalid"),
    "policy_invalid": ("rate", lambda d: d["policy_violated"]),
    "max_turns": ("rate", lambda d: d["status"] == "max_turns"),
}


def metric_names(df: pd.DataFrame) -> list[str]:
    """Every metric the table can give: the built-in ones, then the domain's, by name."""
    domain = sorted(c[len(DOMAIN_PREFIX):] for c in df.columns if c.startswith(DOMAIN_PREFIX))
    return [*BUILTIN_METRICS, *domain]


def metric_values(df: pd.DataFrame, name: str) -> tuple[str, pd.Series]:
    """The per-episode values of one metric, as floats (NaN where the domain leaves it undefined),
    and its kind ("rate" or "mean"). `df` should hold scored episodes only (see `_scored`)."""
    if name in BUILTIN_METRICS:
        kind, read = BUILTIN_METRICS[name]
        return kind, read(df).astype(float)
    col = f"{DOMAIN_PREFIX}{name}"
    if col not in df.columns:
        raise ValueError(f"unknown metric {name!r}; metrics here: {', '.join(metric_names(df))}")
    defined = df[col].dropna()
    kind = "rate" if pd.api.types.infer_dtype(defined, skipna=True) in ("boolean", "empty") else "mean"
    return kind, df[col].astype(float)


def cell_observations(df: pd.DataFrame) -> dict[str, tuple[str, np.ndarray, np.ndarray]]:
    """What each metric of one cell is computed from: (kind, values, scenario ids), with error
    episodes and undefined values already dropped. `cell_metrics` turns each into an interval;
    `batch.matrix_metrics` does the same for every cell at once."""
    _validate(df)
    scored = _scored(df)
    out = {}
    for name in metric_names(df):
        kind, values = metric_values(scored, name)
        keep = values.notna().to_numpy()
        out[name] = (kind, values.to_numpy()[keep], scored["scenario_id"].astype(str).to_numpy()[keep])
    return out


def cell_metrics(df: pd.DataFrame, confidence: float = 0.95) -> dict[str, Interval]:
    """Rates and mean scores of one cell, each with a scenario-clustered interval.

    Keys: agreement, success_at_1, policy_score, counterpart_score, invalid (any player broke the
    protocol), policy_invalid (the policy did), max_turns, and one per domain metric column
    (`m_pareto_optimal` -> `pareto_optimal`). Denominators are the non-error episodes, except for
    domain metrics, whose denominators are the episodes where the metric is defined. An empty
    cell (or one with only errors) gives intervals whose estimate is None.
    """
    return {name: interval_of(kind, values, clusters, confidence)
            for name, (kind, values, clusters) in cell_observations(df).items()}
