"""Every interval of the matrix at once: the per-scenario means of every cell and metric from one
sort of the episode table, then the engine's interval of each (`intervals.proportion_interval` for
rates, `intervals.scenario_mean_interval` for scores).

The intervals are exactly those `cells.cell_metrics` gives one cell at a time: the same scenario
means go to the same functions, and nothing is resampled, so a cell's interval cannot depend on
which other cells share the run.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import pandas as pd

from ibrl_bench.domains.base import STATUSES
from ibrl_bench.stats.cells import _validate, metric_names, metric_values
from ibrl_bench.stats.intervals import (
    Interval,
    check_confidence,
    proportion_intervals,
    scenario_mean_intervals,
)


def _group_means(cell: np.ndarray, scenario: np.ndarray, values: np.ndarray, n_scenarios: int):
    """Per (cell, scenario): mean and count of `values`, in (cell, scenario) order. A scenario whose
    values are all equal gets that value exactly (no rounding from summing), as in
    `intervals.scenario_means`."""
    code = cell * n_scenarios + scenario
    order = np.argsort(code, kind="stable")
    code, values = code[order], values[order]
    if len(code) == 0:
        return np.empty(0, int), np.empty(0), np.empty(0, int)
    starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    sizes = np.diff(np.r_[starts, len(code)])
    sums = np.add.reduceat(values, starts)
    lows, highs = np.minimum.reduceat(values, starts), np.maximum.reduceat(values, starts)
    means = np.where(lows == highs, lows, sums / sizes)
    return code[starts] // n_scenarios, means, sizes


def matrix_metrics(frame: pd.DataFrame, cell_columns: list[str], confidence: float = 0.95
                   ) -> dict[Hashable, dict[str, Interval]]:
    """`cell_metrics` of every cell of the episode table, computed together.

    Keys are the cells (tuples of `cell_columns` values) in order of first appearance.
    """
    check_confidence(confidence)
    _validate(frame.head(0))
    unknown = sorted(set(pd.unique(frame["status"])) - set(STATUSES))
    if unknown:
        raise ValueError(f"unknown episode status(es) {unknown}; expected one of {list(STATUSES)}")
    if frame.empty:
        return {}
    # Cell numbers in order of first appearance, and each number's key read from its first row.
    # (`groupby(..., sort=False).groups` lists its keys sorted in pandas 2, while `ngroup` numbers
    # them by appearance: pairing the two gave cells each other's numbers.)
    cell = frame.groupby(cell_columns, sort=False, dropna=False).ngroup().to_numpy()
    first = np.unique(cell, return_index=True)[1]
    keys = list(frame[cell_columns].iloc[first].itertuples(index=False, name=None))
    scenario, uniques = pd.factorize(frame["scenario_id"].astype(str), sort=True)
    scored = (frame["status"] != "error").to_numpy()
    table = frame[scored]
    cell, scenario = cell[scored], scenario[scored]
    names = metric_names(frame)
    out: dict[Hashable, dict[str, Interval]] = {key: {} for key in keys}
    for name in names:
        kind, series = metric_values(table, name)
        values = series.to_numpy(dtype=float)
        defined = ~np.isnan(values)
        if kind == "rate" and not np.all((values[defined] == 0) | (values[defined] == 1)):
            raise ValueError("a rate takes 0/1 (or bool) values")
        owner, means, sizes = _group_means(cell[defined], scenario[defined], values[defined], len(uniques))
        bounds = np.searchsorted(owner, np.arange(len(keys) + 1))
        parts = [(means[bounds[c]:bounds[c + 1]], sizes[bounds[c]:bounds[c + 1]]) for c in range(len(keys))]
        if kind == "rate":
            ivs = proportion_intervals(parts, confidence)
        else:
            ivs = scenario_mean_intervals([(m, int(s.sum())) for m, s in parts], confidence)
        for key, iv in zip(keys, ivs, strict=True):
            out[key][name] = iv
    return out

