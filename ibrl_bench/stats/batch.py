"""Every interval of the matrix at once: the cluster bootstrap, vectorized across cells and metrics.

`intervals.cluster_bootstrap` calls `scipy.stats.bootstrap` once per interval. That is the
reference, and it is what single intervals use; but a matrix of 100 cells x 9 metrics is 900
calls, and scipy builds every resample as an array (resamples x scenarios) per call, which at
10,000 resamples takes minutes. This module computes the same estimator (BCa over scenario means,
percentile where BCa is undefined, the formulas of scipy's `_bca_interval`: Efron & Tibshirani
1993, 14.3 and 15.4) for all of them in a few matrix products:

- a resample of k scenarios is a vector of counts (how often each scenario was drawn), so the
  resampled means of every metric with k scenarios are one product: means (m x k) @ counts.T / k;
- the jackknife (leave one scenario out) of a mean has a closed form: (sum - x_i) / (k - 1).

The counts depend only on the seed and on k, never on the other cells, so adding a cell to a
run does not move the intervals of the others. Wilson intervals, empty cells and single-scenario
cells take exactly the paths of `rate_interval` and `mean_interval`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import stats
from scipy.special import ndtr, ndtri

from ibrl_bench.domains.base import STATUSES
from ibrl_bench.stats.cells import _validate, metric_names, metric_values
from ibrl_bench.stats.intervals import (
    METHOD_EMPTY,
    METHOD_ONE_CLUSTER,
    METHOD_WILSON,
    Interval,
    _check_confidence,
    _cluster_means,
)

# Resampled means are computed this many (resample x scenario) counts at a time, to bound memory
# (8 bytes each: 64 MB) whatever the size of the run.
_CHUNK_ELEMENTS = 8_000_000


_BLOCK = 64  # scenarios per block of uniforms


def uniforms(width: int, n_resamples: int, seed: int = 0, start: int = 0) -> np.ndarray:
    """(n_resamples x width) uniforms in [0, 1): rows `start` .. `start + n_resamples` of the seed.

    Laid out in blocks of 64 columns, each block from its own generator seeded by (seed, block),
    so the first k columns are the same whatever the width: a cell's resamples depend only on the
    seed and its number of scenarios, never on the other cells of the run, and one draw serves
    every cell."""
    blocks = []
    for b in range(-(-width // _BLOCK)):
        gen = np.random.default_rng([seed, b])
        if start:
            gen.bit_generator.advance(start * _BLOCK)  # the doubles of the earlier rows
        blocks.append(gen.random((n_resamples, _BLOCK)))
    return np.hstack(blocks)[:, :width].astype(np.float32) if blocks else np.empty((n_resamples, 0), np.float32)


def _indices(u: np.ndarray, k: int) -> np.ndarray:
    """Scenario indices 0 .. k-1, uniform, from the first k columns of uniforms (float32 is
    plenty for k < 2^24 scenarios and halves the memory traffic of this hot loop)."""
    idx = (u[:, :k] * np.float32(k)).astype(np.int32)
    return np.minimum(idx, k - 1, out=idx)  # a uniform rounded up to 1.0 in float32


def resample_indices(k: int, n_resamples: int, seed: int = 0, start: int = 0) -> np.ndarray:
    """(n_resamples x k) scenario indices of the bootstrap resamples of `seed`."""
    return _indices(uniforms(k, n_resamples, seed, start), k)


def _resampled_means(means: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """(rows x resamples) means of each row over the resampled scenarios `idx` (resamples x k)."""
    m, k = means.shape
    r = len(idx)
    if m <= 4:  # few rows: gathering is cheaper than building the count matrix
        return np.stack([np.add.reduce(row[idx], axis=1) for row in means]) / k
    counts = np.bincount((idx + np.arange(r)[:, None] * k).ravel(), minlength=r * k).reshape(r, k)
    return means @ counts.T.astype(float) / k


def _quantiles(sorted_rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Row i's quantile q[i] of each sorted row, linear interpolation (numpy's default, as scipy)."""
    n = sorted_rows.shape[1]
    h = np.clip(q, 0.0, 1.0) * (n - 1)
    lo = np.floor(h).astype(int)
    hi = np.minimum(lo + 1, n - 1)
    rows = np.arange(len(q))
    a, b = sorted_rows[rows, lo], sorted_rows[rows, hi]
    return a + (h - lo) * (b - a)


def _bca(means: np.ndarray, boot: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BCa bounds of the mean of each row of `means` (rows x k) from its sorted bootstrap
    distribution `boot` (rows x resamples); the percentile bounds where BCa is undefined."""
    m, k = means.shape
    n_resamples = boot.shape[1]
    theta_hat = means.mean(axis=1)
    alpha = (1 - confidence) / 2
    # Bias correction: where the estimate falls in the bootstrap distribution (scipy counts ties
    # half, the 'mean' kind of percentileofscore).
    below = np.array([np.searchsorted(row, t, "left") + np.searchsorted(row, t, "right")  # rows are sorted
                      for row, t in zip(boot, theta_hat)])
    with np.errstate(divide="ignore", invalid="ignore"):
        z0 = ndtri(below / (2 * n_resamples))
        # Acceleration from the jackknife of the mean, in closed form.
        jack = (means.sum(axis=1, keepdims=True) - means) / (k - 1)
        u = (k - 1) * (jack.mean(axis=1, keepdims=True) - jack)
        accel = (u**3).sum(axis=1) / k**3 / (6 * ((u**2).sum(axis=1) / k**2) ** 1.5)
        z_lo, z_hi = z0 + ndtri(alpha), z0 + ndtri(1 - alpha)
        a_lo = ndtr(z0 + z_lo / (1 - accel * z_lo))
        a_hi = ndtr(z0 + z_hi / (1 - accel * z_hi))
    bca = np.isfinite(a_lo) & np.isfinite(a_hi)
    a_lo = np.where(bca, a_lo, alpha)
    a_hi = np.where(bca, a_hi, 1 - alpha)
    return _quantiles(boot, a_lo), _quantiles(boot, a_hi), bca


def bootstrap_groups(groups: list[np.ndarray], confidence: float = 0.95, n_resamples: int = 10_000,
                     seed: int = 0) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """BCa bootstrap intervals of the row means of each group (rows x k scenario means; k may
    differ between groups). Returns (low, high, bca_used) per group; rows whose BCa interval is
    undefined (all resampled means on one side of the estimate, as with constant rows) get the
    percentile interval, and bca_used is False for them."""
    _check_confidence(confidence)
    if any(g.shape[1] < 2 for g in groups):
        raise ValueError("the bootstrap needs at least 2 scenarios")
    if not groups:
        return []
    width = max(g.shape[1] for g in groups)
    boots = [np.empty((len(g), n_resamples)) for g in groups]
    step = max(1, _CHUNK_ELEMENTS // width)
    for start in range(0, n_resamples, step):
        stop = min(start + step, n_resamples)
        u = uniforms(width, stop - start, seed, start)  # one draw for every group of this chunk
        for g, boot in zip(groups, boots):
            boot[:, start:stop] = _resampled_means(g, _indices(u, g.shape[1]))
    out = []
    for g, boot in zip(groups, boots):
        boot.sort(axis=1)
        out.append(_bca(g, boot, confidence))
    return out


def bootstrap_means(means: np.ndarray, confidence: float = 0.95, n_resamples: int = 10_000,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BCa bootstrap intervals of the mean of each row of `means` (m rows x k scenario means)."""
    return bootstrap_groups([means], confidence, n_resamples, seed)[0]


class _Wilson(NamedTuple):
    successes: int
    n: int


def wilson_many(cases: list[_Wilson], confidence: float) -> list[Interval]:
    """`intervals.wilson` for many counts at once, in closed form (Wilson 1927). scipy's
    binomtest computes a p-value on every call, which is most of a millisecond spent per interval
    for nothing here; tests check the bounds equal scipy's."""
    if not cases:
        return []
    k = np.array([c.successes for c in cases], dtype=float)
    n = np.array([c.n for c in cases], dtype=float)
    z = stats.norm.ppf(1 - (1 - confidence) / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low, high = np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)
    # At 0 and n successes one bound is exactly 0 or 1 (as in scipy), not 1e-17 away from it.
    low[k == 0], high[k == n] = 0.0, 1.0
    return [Interval(estimate=c.successes / c.n, low=float(lo), high=float(hi), method=METHOD_WILSON,
                     confidence=confidence, n=c.n, n_clusters=c.n) for c, lo, hi in zip(cases, low, high)]


def _pending_or_done(kind: str, values: np.ndarray, means: np.ndarray, sizes: np.ndarray,
                     confidence: float) -> Interval | _Wilson | None:
    """The interval when it needs no bootstrap (the paths of rate_interval / mean_interval), a
    Wilson case for `wilson_many`, or None: the scenario means go to the bootstrap batch."""
    n, k = int(sizes.sum()), len(means)
    if k == 0:
        return Interval(estimate=None, low=None, high=None, method=METHOD_EMPTY,
                        confidence=confidence, n=0, n_clusters=0)
    if kind == "rate" and np.all(sizes == 1):
        return _Wilson(int(np.sum(values)), len(values))
    if k < 2:
        return Interval(estimate=float(means[0]), low=None, high=None, method=METHOD_ONE_CLUSTER,
                        confidence=confidence, n=n, n_clusters=1)
    return None


def _finish(pending: list[tuple[int, np.ndarray, np.ndarray]], results: list, confidence: float,
            n_resamples: int, seed: int) -> None:
    """Bootstrap the pending (index, scenario means, scenario sizes), grouped by number of scenarios."""
    by_k: dict[int, list[tuple[int, np.ndarray, np.ndarray]]] = {}
    for item in pending:
        by_k.setdefault(len(item[1]), []).append(item)
    blocks = [np.stack([means for _, means, _ in items]) for items in by_k.values()]
    bounds = bootstrap_groups(blocks, confidence, n_resamples, seed)
    for (k, items), (low, high, bca) in zip(by_k.items(), bounds):
        for row, (i, means, sizes) in enumerate(items):
            lo_b, hi_b = float(means.min()), float(means.max())
            estimate = min(max(math.fsum(means) / k, lo_b), hi_b)
            if lo_b == hi_b:  # equal scenario means: the interval is [x, x] exactly
                lo, hi, used = estimate, estimate, "percentile"
            else:  # a resampled mean never leaves [min, max]; the clip only removes rounding noise
                lo = min(max(float(low[row]), lo_b), hi_b)
                hi = min(max(float(high[row]), lo_b), hi_b)
                used = "BCa" if bca[row] else "percentile"
            label = "bootstrap {} (episodes)" if np.all(sizes == 1) else "cluster bootstrap {} (scenarios)"
            results[i] = Interval(estimate=estimate, low=lo, high=hi, method=label.format(used),
                                  confidence=confidence, n=int(sizes.sum()), n_clusters=k)


def interval_batch(observations: list[tuple[str, np.ndarray, np.ndarray]], confidence: float = 0.95,
                   n_resamples: int = 10_000, seed: int = 0) -> list[Interval]:
    """Intervals for many (kind, values, scenario ids) at once; kind is "rate" or "mean".

    The same intervals as `rate_interval` / `mean_interval` give one at a time, up to Monte Carlo
    noise in the bootstrap bounds (the estimate, n and method are identical).
    """
    _check_confidence(confidence)
    results: list[Interval | None] = [None] * len(observations)
    pending = []
    for i, (kind, values, clusters) in enumerate(observations):
        values = np.asarray(values, dtype=float)
        if kind == "rate" and not np.all((values == 0) | (values == 1)):
            raise ValueError("a rate takes 0/1 (or bool) values")
        means, sizes = _cluster_means(values, clusters)
        results[i] = _pending_or_done(kind, values, means, sizes, confidence)
        if results[i] is None:
            pending.append((i, means, sizes))
    _finish(pending, results, confidence, n_resamples, seed)
    _finish_wilson(results, confidence)
    return results  # type: ignore[return-value]


def _finish_wilson(results: list, confidence: float) -> None:
    at = [i for i, r in enumerate(results) if isinstance(r, _Wilson)]
    for i, iv in zip(at, wilson_many([results[i] for i in at], confidence)):
        results[i] = iv


def _group_means(cell: np.ndarray, scenario: np.ndarray, values: np.ndarray, n_scenarios: int):
    """Per (cell, scenario): mean and count of `values`, in (cell, scenario) order. A scenario whose
    values are all equal gets that value exactly (no rounding from summing), as in `_cluster_means`."""
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


def matrix_metrics(frame: pd.DataFrame, cell_columns: list[str], confidence: float = 0.95,
                   n_resamples: int = 10_000, seed: int = 0) -> dict[Hashable, dict[str, Interval]]:
    """`cell_metrics` of every cell of the episode table, computed together.

    Keys are the cells (tuples of `cell_columns` values) in order of first appearance. The table is
    read column by column, never cell by cell: per-scenario means of every cell come from one sort.
    """
    _check_confidence(confidence)
    _validate(frame.head(0))  # the columns; the statuses below, without a Python set of every row
    unknown = sorted(set(pd.unique(frame["status"])) - set(STATUSES))
    if unknown:
        raise ValueError(f"unknown episode status(es) {unknown}; expected one of {list(STATUSES)}")
    groups = frame.groupby(cell_columns, sort=False)
    keys = list(groups.groups)
    if not keys:
        return {}
    cell = groups.ngroup().to_numpy()
    # Scenarios in sorted order of their ids, as `_cluster_means` orders them.
    scenario, uniques = pd.factorize(frame["scenario_id"].astype(str), sort=True)
    scored = (frame["status"] != "error").to_numpy()
    table = frame[scored]
    cell, scenario = cell[scored], scenario[scored]
    names = metric_names(frame)
    results: list[Interval | None] = [None] * (len(keys) * len(names))
    pending = []
    for j, name in enumerate(names):
        kind, series = metric_values(table, name)
        values = series.to_numpy(dtype=float)
        defined = ~np.isnan(values)
        owner, means, sizes = _group_means(cell[defined], scenario[defined], values[defined], len(uniques))
        bounds = np.searchsorted(owner, np.arange(len(keys) + 1))
        per_cell_values = np.split(values[defined][np.argsort(cell[defined], kind="stable")],
                                   np.searchsorted(np.sort(cell[defined]), np.arange(1, len(keys))))
        for c in range(len(keys)):
            lo, hi = bounds[c], bounds[c + 1]
            i = c * len(names) + j
            results[i] = _pending_or_done(kind, per_cell_values[c], means[lo:hi], sizes[lo:hi], confidence)
            if results[i] is None:
                pending.append((i, means[lo:hi], sizes[lo:hi]))
    _finish(pending, results, confidence, n_resamples, seed)
    _finish_wilson(results, confidence)
    return {key: dict(zip(names, results[c * len(names):(c + 1) * len(names)])) for c, key in enumerate(keys)}
