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

import numpy as np
import pandas as pd
from scipy.special import ndtr, ndtri

from ibrl_bench.stats.cells import cell_observations
from ibrl_bench.stats.intervals import (
    METHOD_EMPTY,
    METHOD_ONE_CLUSTER,
    Interval,
    _check_confidence,
    _cluster_means,
    wilson,
)

# Resampled means are computed this many (resample x scenario) counts at a time, to bound memory
# (8 bytes each: 64 MB) whatever the size of the run.
_CHUNK_ELEMENTS = 8_000_000


def _counts(k: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(n_resamples x k) counts: how often each of k scenarios is drawn in each resample."""
    idx = rng.integers(0, k, size=(n_resamples, k))
    flat = (idx + np.arange(n_resamples)[:, None] * k).ravel()
    return np.bincount(flat, minlength=n_resamples * k).reshape(n_resamples, k).astype(float)


def _quantiles(sorted_rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Row i's quantile q[i] of each sorted row, linear interpolation (numpy's default, as scipy)."""
    n = sorted_rows.shape[1]
    h = np.clip(q, 0.0, 1.0) * (n - 1)
    lo = np.floor(h).astype(int)
    hi = np.minimum(lo + 1, n - 1)
    rows = np.arange(len(q))
    a, b = sorted_rows[rows, lo], sorted_rows[rows, hi]
    return a + (h - lo) * (b - a)


def bootstrap_means(means: np.ndarray, confidence: float = 0.95, n_resamples: int = 10_000,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BCa bootstrap intervals of the mean of each row of `means` (m rows x k scenario means).

    Returns (low, high, bca_used) arrays of length m. Rows whose BCa interval is undefined (all
    resampled means on one side of the estimate, as with constant rows) get the percentile
    interval, and bca_used is False for them.
    """
    _check_confidence(confidence)
    m, k = means.shape
    if k < 2:
        raise ValueError("the bootstrap needs at least 2 scenarios")
    rng = np.random.default_rng([seed, k])  # per k, so a cell's interval ignores the other cells
    theta_hat = means.mean(axis=1)
    boot = np.empty((m, n_resamples))
    step = max(1, _CHUNK_ELEMENTS // k)
    for start in range(0, n_resamples, step):
        stop = min(start + step, n_resamples)
        boot[:, start:stop] = means @ _counts(k, stop - start, rng).T / k
    boot.sort(axis=1)

    alpha = (1 - confidence) / 2
    # Bias correction: where the estimate falls in the bootstrap distribution (scipy counts ties
    # half, the 'mean' kind of percentileofscore).
    below = (boot < theta_hat[:, None]).sum(axis=1) + (boot <= theta_hat[:, None]).sum(axis=1)
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


def _pending_or_done(kind: str, values: np.ndarray, clusters: np.ndarray,
                     confidence: float) -> Interval | tuple[np.ndarray, int]:
    """The interval when it needs no bootstrap (the paths of rate_interval / mean_interval), else
    the scenario means and the episode count for the batch."""
    means, sizes = _cluster_means(values, clusters)
    n, k = int(sizes.sum()), len(means)
    if k == 0:
        return Interval(estimate=None, low=None, high=None, method=METHOD_EMPTY,
                        confidence=confidence, n=0, n_clusters=0)
    if kind == "rate" and np.all(sizes == 1):
        return wilson(int(np.sum(values)), len(values), confidence)
    if k < 2:
        return Interval(estimate=float(means[0]), low=None, high=None, method=METHOD_ONE_CLUSTER,
                        confidence=confidence, n=n, n_clusters=1)
    return means, n


def interval_batch(observations: list[tuple[str, np.ndarray, np.ndarray]], confidence: float = 0.95,
                   n_resamples: int = 10_000, seed: int = 0) -> list[Interval]:
    """Intervals for many (kind, values, scenario ids) at once; kind is "rate" or "mean".

    The same intervals as `rate_interval` / `mean_interval` give one at a time, up to Monte Carlo
    noise in the bootstrap bounds (the estimate, n and method are identical).
    """
    _check_confidence(confidence)
    results: list[Interval | None] = [None] * len(observations)
    by_k: dict[int, list[tuple[int, np.ndarray, int, bool]]] = {}
    for i, (kind, values, clusters) in enumerate(observations):
        values = np.asarray(values, dtype=float)
        if kind == "rate" and not np.all((values == 0) | (values == 1)):
            raise ValueError("a rate takes 0/1 (or bool) values")
        done = _pending_or_done(kind, values, clusters, confidence)
        if isinstance(done, Interval):
            results[i] = done
        else:
            means, n = done
            singletons = n == len(means)
            by_k.setdefault(len(means), []).append((i, means, n, singletons))
    for k, items in by_k.items():
        block = np.stack([means for _, means, _, _ in items])
        low, high, bca = bootstrap_means(block, confidence, n_resamples, seed)
        for row, (i, means, n, singletons) in enumerate(items):
            lo_b, hi_b = float(means.min()), float(means.max())
            estimate = min(max(math.fsum(means) / k, lo_b), hi_b)
            if lo_b == hi_b:  # equal scenario means: the interval is [x, x] exactly
                lo, hi, used = estimate, estimate, "percentile"
            else:  # a resampled mean never leaves [min, max]; the clip only removes rounding noise
                lo = min(max(float(low[row]), lo_b), hi_b)
                hi = min(max(float(high[row]), lo_b), hi_b)
                used = "BCa" if bca[row] else "percentile"
            label = "bootstrap {} (episodes)" if singletons else "cluster bootstrap {} (scenarios)"
            results[i] = Interval(estimate=estimate, low=lo, high=hi, method=label.format(used),
                                  confidence=confidence, n=n, n_clusters=k)
    return results  # type: ignore[return-value]


def matrix_metrics(frame: pd.DataFrame, cell_columns: list[str], confidence: float = 0.95,
                   n_resamples: int = 10_000, seed: int = 0) -> dict[Hashable, dict[str, Interval]]:
    """`cell_metrics` of every cell of the episode table, computed together.

    Keys are the cells (tuples of `cell_columns` values) in order of first appearance.
    """
    keys, names, observations = [], [], []
    for cell, group in frame.groupby(cell_columns, sort=False):
        obs = cell_observations(group)
        keys.append(cell)
        names.append(list(obs))
        observations.extend(obs.values())
    flat = iter(interval_batch(observations, confidence, n_resamples, seed))
    return {cell: {name: next(flat) for name in metric_list} for cell, metric_list in zip(keys, names)}
