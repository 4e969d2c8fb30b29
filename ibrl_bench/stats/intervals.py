"""Confidence intervals for the benchmark's rates and mean scores.

The benchmark's unit of replication is the *scenario*, not the episode: the seeds of one scenario
share its items, values or persona, so their outcomes are correlated. Treating the episodes of a
scenario as independent makes intervals too narrow. The estimate of every metric is therefore the
mean over scenarios of the per-scenario mean, and its interval resamples whole scenarios (a
cluster bootstrap, as in inspect_ai's `ci(cluster=...)`).

Which interval is used, and why:

- one observation per scenario, 0/1 data -> Wilson score interval (exact enough, well behaved at
  0 and 1, no resampling);
- several observations per scenario, or continuous data -> scipy's bootstrap over the scenario
  means, BCa when it is defined, percentile otherwise (all scenario means equal, where BCa's
  acceleration is 0/0);
- fewer than 2 scenarios -> no interval at all: one cluster says nothing about between-scenario
  variation.

Every `Interval` carries a `method` string that says which of these was actually used, so a report
never shows an interval without saying how it was made.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator
from scipy import stats

METHOD_WILSON = "wilson"
METHOD_EMPTY = "none (no observations)"
METHOD_ONE_CLUSTER = "none (fewer than 2 scenarios)"


class Interval(BaseModel):
    """A point estimate with its confidence interval and how it was computed.

    Undefined values are None, never NaN, so the model serialises to plain JSON and a missing
    number cannot silently propagate through arithmetic.
    """

    model_config = ConfigDict(frozen=True)

    estimate: float | None
    low: float | None
    high: float | None
    method: str
    confidence: float = Field(gt=0.0, lt=1.0)
    n: int = Field(ge=0, description="number of observations (episodes)")
    n_clusters: int = Field(ge=0, description="number of clusters (scenarios)")

    @field_validator("estimate", "low", "high")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("use None, not NaN or inf, for an undefined value")
        return v

    @property
    def defined(self) -> bool:
        """True when both bounds exist."""
        return self.low is not None and self.high is not None

    def format(self, digits: int = 2) -> str:
        """'0.62 [0.55, 0.69]'; 'n/a' without an estimate; '0.62 [n/a]' without bounds."""
        if self.estimate is None:
            return "n/a"
        est = f"{self.estimate:.{digits}f}"
        if self.low is None or self.high is None:
            return f"{est} [n/a]"
        return f"{est} [{self.low:.{digits}f}, {self.high:.{digits}f}]"

    def __str__(self) -> str:
        return self.format()


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def wilson(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval for `successes` out of `n` independent trials."""
    _check_confidence(confidence)
    if n < 0 or not 0 <= successes <= max(n, 0):
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return Interval(estimate=None, low=None, high=None, method=METHOD_EMPTY,
                        confidence=confidence, n=0, n_clusters=0)
    ci = stats.binomtest(int(successes), int(n)).proportion_ci(
        confidence_level=confidence, method="wilson")
    # The Wilson interval treats each trial as its own unit, so clusters == observations.
    return Interval(estimate=successes / n, low=float(ci.low), high=float(ci.high),
                    method=METHOD_WILSON, confidence=confidence, n=int(n), n_clusters=int(n))


def _cluster_means(values: Sequence[float] | np.ndarray,
                   clusters: Sequence[Hashable] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster means and per-cluster sizes, in a fixed (sorted) cluster order.

    The order matters for determinism: the bootstrap draws indices into this array, so the same
    data must always give the same array whatever the order of the input rows.
    """
    vals = np.asarray(values, dtype=float)
    keys = np.asarray(clusters)
    if vals.ndim != 1 or keys.ndim != 1 or len(vals) != len(keys):
        raise ValueError("values and clusters must be 1-d and of the same length")
    if not np.all(np.isfinite(vals)):
        raise ValueError("values must be finite (drop undefined observations first)")
    if len(vals) == 0:
        return np.empty(0), np.empty(0, dtype=int)
    # Sort on the string form so mixed or non-orderable ids still get one stable order.
    _, inverse = np.unique(keys.astype(str), return_inverse=True)
    sizes = np.bincount(inverse)
    # fsum (exactly rounded) so that a scenario whose episodes all score x has mean x, not
    # x +- 1 ulp: constant data must give the interval [x, x] exactly.
    order = np.argsort(inverse, kind="stable")
    groups = np.split(vals[order], np.cumsum(sizes)[:-1])
    means = np.array([math.fsum(g) / len(g) for g in groups])
    return means, sizes


def seed_kwargs(func: Any, seed: int | Sequence[int]) -> dict[str, Any]:
    """Seed a scipy resampling function (bootstrap, permutation_test) with whichever keyword the
    installed scipy knows.

    scipy >= 1.15 takes `rng`; older versions take `random_state` (which also accepts a
    Generator). A fresh Generator per call keeps every interval reproducible on its own.
    """
    params = inspect.signature(func).parameters
    key = "rng" if "rng" in params else "random_state"
    return {key: np.random.default_rng(seed)}


def _bootstrap_kwargs(seed: int) -> dict[str, Any]:
    return seed_kwargs(stats.bootstrap, seed)


def _bootstrap_ci(means: np.ndarray, method: str, confidence: float, n_resamples: int,
                  seed: int) -> tuple[float, float]:
    res = stats.bootstrap((means,), np.mean, method=method, confidence_level=confidence,
                          n_resamples=n_resamples, **_bootstrap_kwargs(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def cluster_bootstrap(values: Sequence[float] | np.ndarray,
                      clusters: Sequence[Hashable] | np.ndarray,
                      confidence: float = 0.95, n_resamples: int = 2000,
                      seed: int = 0) -> Interval:
    """Mean over clusters of the per-cluster mean, with a bootstrap interval over clusters.

    Resampling whole scenarios keeps the within-scenario correlation of seeds in every resample.
    When every cluster holds a single observation this is the ordinary bootstrap over episodes,
    and the method string says so.
    """
    _check_confidence(confidence)
    means, sizes = _cluster_means(values, clusters)
    n, k = int(sizes.sum()), len(means)
    if k == 0:
        return Interval(estimate=None, low=None, high=None, method=METHOD_EMPTY,
                        confidence=confidence, n=0, n_clusters=0)
    # Mathematically the mean lies in [min, max] of the scenario means; the clip only removes
    # rounding noise, so that low <= estimate <= high always holds.
    lo_bound, hi_bound = float(means.min()), float(means.max())
    estimate = min(max(math.fsum(means) / k, lo_bound), hi_bound)
    if k < 2:
        return Interval(estimate=estimate, low=None, high=None, method=METHOD_ONE_CLUSTER,
                        confidence=confidence, n=n, n_clusters=k)

    singletons = bool(np.all(sizes == 1))
    label = "bootstrap {} (episodes)" if singletons else "cluster bootstrap {} (scenarios)"

    low = high = math.nan
    used = "BCa"
    if np.ptp(means) > 0:  # equal scenario means: BCa is 0/0, go straight to percentile
        # BCa is the better interval when it exists. Its warnings are recorded rather than shown:
        # if BCa fails we fall back and they were expected; if it succeeds we replay them.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            low, high = _bootstrap_ci(means, "BCa", confidence, n_resamples, seed)
        if math.isfinite(low) and math.isfinite(high):
            for w in caught:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if not (math.isfinite(low) and math.isfinite(high)):
        # All scenario means equal (e.g. every episode 0, or every episode 1) or BCa otherwise
        # degenerate: BCa's acceleration is 0/0 there. The percentile interval is well defined
        # and, for constant data, is exactly [x, x].
        used = "percentile"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            warnings.simplefilter("ignore", stats.DegenerateDataWarning)
            low, high = _bootstrap_ci(means, "percentile", confidence, n_resamples, seed)

    # A resampled mean can never leave [min, max] of the scenario means either; again the clip
    # only removes floating-point noise (0.3 coming back as 0.29999999999999993).
    low = min(max(low, lo_bound), hi_bound)
    high = min(max(high, lo_bound), hi_bound)
    return Interval(estimate=estimate, low=low, high=high, method=label.format(used),
                    confidence=confidence, n=n, n_clusters=k)


def rate_interval(values: Sequence[float] | np.ndarray,
                  clusters: Sequence[Hashable] | np.ndarray,
                  confidence: float = 0.95, n_resamples: int = 2000,
                  seed: int = 0) -> Interval:
    """Interval for a rate of 0/1 outcomes, clustered by scenario.

    One observation per scenario: the observations are independent, so Wilson. Otherwise the
    cluster bootstrap over scenario means.
    """
    vals = np.asarray(values, dtype=float)
    if not np.all((vals == 0) | (vals == 1)):
        raise ValueError("rate_interval takes 0/1 (or bool) values; use mean_interval for scores")
    _, sizes = _cluster_means(vals, clusters)
    if len(sizes) > 0 and np.all(sizes == 1):
        return wilson(int(vals.sum()), len(vals), confidence)
    return cluster_bootstrap(vals, clusters, confidence, n_resamples, seed)


def mean_interval(values: Sequence[float] | np.ndarray,
                  clusters: Sequence[Hashable] | np.ndarray,
                  confidence: float = 0.95, n_resamples: int = 2000,
                  seed: int = 0) -> Interval:
    """Interval for a mean of continuous values (scores), clustered by scenario.

    Always the (cluster) bootstrap: with one observation per scenario it is the ordinary
    bootstrap over episodes, and the method string says "(episodes)".
    """
    return cluster_bootstrap(values, clusters, confidence, n_resamples, seed)
