"""From a run's episode records to the results of each cell of the matrix."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pandas as pd
from pydantic import BaseModel

from ibrl_bench import __version__
from ibrl_bench.agents.base import Usage
from ibrl_bench.runner.store import EpisodeRecord
from ibrl_bench.stats.batch import matrix_metrics
from ibrl_bench.stats.cells import DOMAIN_PREFIX, cell_counts
from ibrl_bench.stats.intervals import Interval

CELL = ["policy", "counterpart", "policy_role"]


class CellResult(BaseModel):
    policy: str
    counterpart: str
    policy_role: str
    n_episodes: int
    n_errors: int
    n_scored: int
    n_scenarios: int
    metrics: dict[str, Interval]
    # Token and cost totals of the cell's recorded episodes, per seat ("policy", "counterpart"),
    # failed attempts not included (their usage is not reported by the failed call).
    usage: dict[str, Usage] = {}
    # Faults the remote layer retried within the cell's episodes, by kind (the failed attempts of
    # error episodes included).
    retries: dict[str, int] = {}


class Results(BaseModel):
    harness_version: str
    domain: str
    scenario_set: dict
    confidence: float
    complete: bool  # every planned episode finished without error
    n_planned: int
    error_kinds: dict[str, int] = {}  # the final error of each error episode, most common first
    cells: list[CellResult]

    def cells_csv(self) -> str:
        """cells.csv: one row per cell (`cells_frame`)."""
        return cells_frame(self).to_csv(index=False)


def episodes_frame(records: Iterable[EpisodeRecord]) -> pd.DataFrame:
    """One row per episode, from the policy's point of view."""
    rows = []
    for r in records:
        other = next(role for role in r.agents if role != r.policy_role)
        o = r.outcome
        rows.append(
            {
                "key": r.key,
                "policy": r.policy,
                "counterpart": r.counterpart,
                "policy_role": r.policy_role,
                "scenario_id": r.scenario_id,
                "seed": r.seed,
                "status": o.status,
                "agreement": o.agreement,
                "success": o.success,
                "policy_score": o.rewards.get(r.policy_role, 0.0),
                "counterpart_score": o.rewards.get(other, 0.0),
                "policy_violated": r.policy_role in o.violators,
                "turns": o.turns,
                "attempts": r.attempts,
                **{f"{DOMAIN_PREFIX}{k}": v for k, v in o.metrics.items()},
            }
        )
    columns = ["key", *CELL, "scenario_id", "seed", "status", "agreement", "success", "policy_score",
               "counterpart_score", "policy_violated", "turns", "attempts"]
    extra = sorted({k for row in rows for k in row} - set(columns))
    return pd.DataFrame(rows, columns=columns + extra)


def summarize(
    records: Iterable[EpisodeRecord],
    *,
    domain: str,
    scenario_set: dict,
    n_planned: int,
    confidence: float = 0.95,
    identity: dict | None = None,
) -> Results:
    records = list(records) if identity is None else in_matrix_order(records, identity)
    frame = episodes_frame(records)
    kinds = Counter(r.outcome.detail or "unknown" for r in records if r.outcome.status == "error")
    # Every interval of the matrix in one pass (see stats/batch.py); the same intervals as cell_metrics.
    metrics = matrix_metrics(frame, CELL, confidence=confidence)
    usage = cell_usage(records)
    retries: dict[tuple[str, str, str], Counter] = {}
    for r in records:
        retries.setdefault((r.policy, r.counterpart, r.policy_role), Counter()).update(r.retries)
    cells = []
    for (policy, counterpart, role), group in frame.groupby(CELL, sort=False):
        counts = cell_counts(group)
        cells.append(
            CellResult(
                policy=policy,
                counterpart=counterpart,
                policy_role=role,
                metrics=metrics[(policy, counterpart, role)],
                usage=usage.get((policy, counterpart, role), {}),
                retries=dict(sorted(retries.get((policy, counterpart, role), {}).items())),
                **counts,
            )
        )
    n_scored = int((frame["status"] != "error").sum()) if len(frame) else 0
    return Results(
        harness_version=__version__,
        domain=domain,
        scenario_set=scenario_set,
        confidence=confidence,
        complete=n_scored == n_planned,
        n_planned=n_planned,
        error_kinds=dict(kinds.most_common(10)),
        cells=cells,
    )


def in_matrix_order(records: Iterable[EpisodeRecord], identity: dict) -> list[EpisodeRecord]:
    """The records in the order of the run's matrix (a run manifest's identity: policies, then
    counterparts, then roles, then scenario and seed), whatever order they finished in: the cells and
    every sum over them come out the same for a run played in one process or by several workers."""
    rank = {name: {x: i for i, x in enumerate(identity.get(name, []))}
            for name in ("policies", "counterparts", "roles")}
    last = len  # a seat the identity does not list (an older folder) goes after those it does

    def key(r: EpisodeRecord) -> tuple:
        return (rank["policies"].get(r.policy, last(rank["policies"])),
                rank["counterparts"].get(r.counterpart, last(rank["counterparts"])),
                rank["roles"].get(r.policy_role, last(rank["roles"])), r.scenario_id, r.seed)

    return sorted(records, key=key)


def cell_usage(records: list[EpisodeRecord]) -> dict[tuple[str, str, str], dict[str, Usage]]:
    totals: dict[tuple[str, str, str], dict[str, Usage]] = {}
    for r in records:
        seats = totals.setdefault((r.policy, r.counterpart, r.policy_role), {"policy": Usage(), "counterpart": Usage()})
        for role, u in r.usage.items():
            seats["policy" if role == r.policy_role else "counterpart"].add(u)
    return totals


def cells_frame(results: Results) -> pd.DataFrame:
    """Flat table for cells.csv: estimate, bounds, method and sample sizes of every metric, and the
    confidence level."""
    rows = []
    for cell in results.cells:
        row = cell.model_dump(exclude={"metrics", "usage", "retries"})
        row["n_retries"] = sum(cell.retries.values())
        for seat, u in cell.usage.items():
            row[f"{seat}_prompt_tokens"] = u.prompt_tokens
            row[f"{seat}_completion_tokens"] = u.completion_tokens
            row[f"{seat}_cost_usd"] = round(u.cost_usd, 6)
            row[f"{seat}_calls"] = u.calls
            row[f"{seat}_cache_hits"] = u.cache_hits
        row["confidence"] = results.confidence
        for name, iv in cell.metrics.items():
            row[name] = iv.estimate
            row[f"{name}_low"] = iv.low
            row[f"{name}_high"] = iv.high
            row[f"{name}_method"] = iv.method
            row[f"{name}_n"] = iv.n
            row[f"{name}_n_clusters"] = iv.n_clusters
        rows.append(row)
    return pd.DataFrame(rows)
