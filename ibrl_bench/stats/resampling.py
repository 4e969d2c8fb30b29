"""The scenario bootstrap of any statistic, and the tests shared by comparisons and mismatch.

Everything here resamples or permutes *scenarios*: per-scenario values go in, with the scenarios
along the last axis, so the correlation between the seeds, roles and counterparts of one scenario
stays inside every resample.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy import stats

from ibrl_bench.stats.intervals import Interval, seed_kwargs

# Arrays scipy may build at once while resampling (elements); bounds memory on large matrices.
_BATCH_ELEMENTS = 4_000_000


def _none_if_nan(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def bootstrap_statistic(
    data: Sequence[np.ndarray],
    statistic: Callable[..., np.ndarray],
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Estimate and BCa interval of `statistic` over scenarios, with the percentile interval where
    BCa is undefined (degenerate data, a statistic that is flat around the estimate).

    `data`: arrays whose last axis is the scenarios, resampled together (paired). `statistic` is
    called as statistic(*arrays, axis=-1) and may return an array (one interval per element).
    Returns (estimate, low, high, bca_used), each of the statistic's shape; NaN where undefined.
    """
    data = [np.asarray(d, dtype=float) for d in data]
    estimate = np.asarray(statistic(*data, axis=-1), dtype=float)
    nan = np.full(estimate.shape, np.nan)
    if data[0].shape[-1] < 2:
        return estimate, nan, nan.copy(), np.zeros(estimate.shape, bool)
    kw = dict(paired=True, vectorized=True, axis=-1, confidence_level=confidence, n_resamples=n_resamples,
              batch=max(1, _BATCH_ELEMENTS // max(1, sum(d.size for d in data))))
    with warnings.catch_warnings():
        # Degenerate data make BCa undefined (0/0); that is handled below, by the fallback.
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        bca = stats.bootstrap(data, statistic, method="BCa", **kw, **seed_kwargs(stats.bootstrap, seed))
        low = np.asarray(bca.confidence_interval.low, dtype=float)
        high = np.asarray(bca.confidence_interval.high, dtype=float)
        used = np.isfinite(low) & np.isfinite(high)
        if not used.all():
            pct = stats.bootstrap(data, statistic, method="percentile", **kw,
                                  **seed_kwargs(stats.bootstrap, seed))
            low = np.where(used, low, pct.confidence_interval.low)
            high = np.where(used, high, pct.confidence_interval.high)
    return estimate, low, high, used


def scenario_interval(values: np.ndarray, *, n: int, label: str = "bootstrap", confidence: float = 0.95,
                      n_resamples: int = 2000, seed: int = 0) -> Interval:
    """Mean over scenarios of one value per scenario (a paired difference, a pass@k, ...), with the
    bootstrap over scenarios. `n` is the number of episodes behind the values."""
    values = np.asarray(values, dtype=float)
    k = len(values)
    if k == 0:
        return Interval(estimate=None, low=None, high=None, method="none (no observations)",
                        confidence=confidence, n=n, n_clusters=0)
    est = math.fsum(values) / k
    lo_b, hi_b = float(values.min()), float(values.max())
    est = min(max(est, lo_b), hi_b)
    if k < 2:
        return Interval(estimate=est, low=None, high=None, method="none (fewer than 2 scenarios)",
                        confidence=confidence, n=n, n_clusters=k)
    if lo_b == hi_b:
        return Interval(estimate=est, low=est, high=est, method=f"{label} percentile (scenarios)",
                        confidence=confidence, n=n, n_clusters=k)
    _, low, high, used = bootstrap_statistic([values], np.mean, confidence=confidence,
                                             n_resamples=n_resamples, seed=seed)
    return Interval(estimate=est, low=min(max(float(low), lo_b), hi_b), high=min(max(float(high), lo_b), hi_b),
                    method=f"{label} {'BCa' if used else 'percentile'} (scenarios)", confidence=confidence,
                    n=n, n_clusters=k)


class TestResult(BaseModel):
    """A p-value and the test that gave it."""

    model_config = ConfigDict(frozen=True)
    __test__ = False  # not a pytest class

    test: str
    p_value: float | None
    n: int  # pairs (episodes) behind the test
    n_clusters: int  # scenarios


def mcnemar(a: np.ndarray, b: np.ndarray) -> TestResult:
    """Exact McNemar test of paired 0/1 outcomes: a binomial test on the discordant pairs.

    Valid when the pairs are independent, i.e. one pair per scenario.
    """
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    discordant = only_a + only_b
    p = stats.binomtest(only_a, discordant, 0.5).pvalue if discordant else 1.0
    return TestResult(test=f"exact McNemar (binomial test on {discordant} discordant pairs: {only_a} vs {only_b})",
                      p_value=float(min(p, 1.0)), n=len(a), n_clusters=len(a))


def sign_flip_test(diffs: np.ndarray, *, n: int, n_resamples: int = 9999, seed: int = 0) -> TestResult:
    """Paired permutation test over scenarios: under the null hypothesis the two sides of every
    scenario are exchangeable, so each scenario's mean difference is as likely to have either sign.
    Exact (every sign pattern) when 2^scenarios <= n_resamples."""
    diffs = np.asarray(diffs, dtype=float)
    k = len(diffs)
    if k == 0:
        return TestResult(test="none (no pairs)", p_value=None, n=0, n_clusters=0)
    exact = 2**k <= n_resamples
    how = f"exact, all {2**k:,} sign patterns" if exact else f"{n_resamples:,} random sign flips"
    name = f"paired permutation test over {k} scenarios ({how})"
    if not np.any(diffs):
        return TestResult(test=name, p_value=1.0, n=n, n_clusters=k)
    # Two paired samples (d, 0) with 'samples' permutations: swapping within a pair flips the sign.
    res = stats.permutation_test(
        (diffs, np.zeros(k)), lambda x, y, axis: np.mean(x - y, axis=axis), permutation_type="samples",
        vectorized=True, n_resamples=n_resamples, alternative="two-sided",
        **seed_kwargs(stats.permutation_test, seed))
    return TestResult(test=name, p_value=float(min(res.pvalue, 1.0)), n=n, n_clusters=k)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm (1979) step-down adjustment of p-values for testing several hypotheses at once; controls
    the family-wise error rate with no assumption on how the tests depend on each other. None
    (no test) stays None and does not count as a hypothesis."""
    present = [(p, i) for i, p in enumerate(p_values) if p is not None]
    m = len(present)
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(present)):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out
