"""From a run's episode table (one row per episode, `episodes_table`) to the results of each cell of the matrix."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pandas as pd
from pydantic import BaseModel

from ibrl_bench import __version__
from ibrl_bench.agents.base import Usage
from ibrl_bench.runner.store import EpisodeSummary, episode_row
from ibrl_bench.stats.batch import matrix_metrics
from ibrl_bench.stats.cells import cell_counts
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


COLUMNS = ["key", *CELL, "scenario_id", "seed", "status", "agreement", "success", "policy_score",
           "counterpart_score", "policy_violated", "turns", "attempts"]
# What an episode table holds beside the episode frame's columns (see runner/store.py's episode_row):
# the error's kind, token usage by seat, retried faults, and where the record's line starts.
EXTRAS = ["detail", "usage", "retries", "at"]


def episodes_table(rows: list[dict]) -> pd.DataFrame:
    """Episode rows (`runner.store.episode_row`) as a table: the episode frame's columns, then the
    domain's metrics, then EXTRAS."""
    metrics = sorted({k for row in rows for k in row} - set(COLUMNS) - set(EXTRAS))
    return pd.DataFrame(rows, columns=COLUMNS + metrics + EXTRAS)


def frame_of(table: pd.DataFrame) -> pd.DataFrame:
    """The episode frame: one row per episode, from the policy's point of view (no EXTRAS)."""
    return table.drop(columns=EXTRAS)


def episodes_frame(records: Iterable[EpisodeSummary]) -> pd.DataFrame:
    """One row per episode, from the policy's point of view."""
    return frame_of(episodes_table([episode_row(r) for r in records]))


def summarize(
    table: pd.DataFrame,
    *,
    domain: str,
    scenario_set: dict,
    n_planned: int,
    confidence: float = 0.95,
    identity: dict | None = None,
) -> Results:
    """The results of every cell from an episode table (`episodes_table`)."""
    if identity is not None:
        table = in_matrix_order(table, identity)
    frame = frame_of(table)
    kinds = Counter(d or "unknown" for d, st in zip(table["detail"].tolist(), table["status"].tolist(), strict=True)
                    if st == "error")
    # Every interval of the matrix in one pass (see stats/batch.py); the same intervals as cell_metrics.
    metrics = matrix_metrics(frame, CELL, confidence=confidence)
    usage = cell_usage(table)
    retries: dict[tuple[str, str, str], Counter] = {}
    for cell, tried in zip(_cells(table), table["retries"].tolist(), strict=True):
        retries.setdefault(cell, Counter()).update(tried)
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


def in_matrix_order(table: pd.DataFrame, identity: dict) -> pd.DataFrame:
    """The episodes in the order of the run's matrix (a run manifest's identity: policies, then
    counterparts, then roles, then scenario and seed), whatever order they finished in: the cells and
    every sum over them come out the same for a run played in one process or by several workers."""
    rank = {name: {x: i for i, x in enumerate(identity.get(name, []))}
            for name in ("policies", "counterparts", "roles")}

    def ranks(column: str, name: str) -> list[int]:
        last = len(rank[name])  # a seat the identity does not list (an older folder) goes after those it does
        return [rank[name].get(x, last) for x in table[column].tolist()]

    keys = list(zip(ranks("policy", "policies"), ranks("counterpart", "counterparts"), ranks("policy_role", "roles"),
                    table["scenario_id"].tolist(), table["seed"].tolist(), strict=True))
    order = sorted(range(len(keys)), key=keys.__getitem__)  # stable: ties keep the order of the log
    return table.iloc[order].reset_index(drop=True)


def _cells(table: pd.DataFrame):
    """(policy, counterpart, policy_role) of every episode."""
    return zip(table["policy"].tolist(), table["counterpart"].tolist(), table["policy_role"].tolist(), strict=True)


def cell_usage(table: pd.DataFrame) -> dict[tuple[str, str, str], dict[str, Usage]]:
    totals: dict[tuple[str, str, str], dict[str, Usage]] = {}
    for cell, used in zip(_cells(table), table["usage"].tolist(), strict=True):
        seats = totals.setdefault(cell, {"policy": Usage(), "counterpart": Usage()})
        for seat, counted in used.items():
            seats[seat].add(Usage(**counted))
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
