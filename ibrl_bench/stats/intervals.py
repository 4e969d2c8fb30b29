"""The interval engine: every confidence interval and paired p-value of the package comes from here.

The unit of replication is the *scenario*: the seeds of one scenario share its items, values or
persona, so their outcomes are correlated. Every estimate is the mean over scenarios of the
per-scenario mean, and every interval treats scenarios (and, where a number is read as
generalisation to unseen counterparts, held-out counterparts too) as the sample.

The methods, by what is estimated (docs/statistics.md gives assumptions and measured coverage):

- a rate (mean of 0/1 outcomes, or of per-scenario proportions such as pass@k):
  `proportion_interval`. Clopper-Pearson at the Kish effective sample size with Korn and
  Graubard's degrees-of-freedom correction: n_eff = p (1 - p) / Var(p), Var(p) from the spread of
  the scenario means with one pseudo-scenario at 0.5 added (it keeps the design effect from
  collapsing when the scenario means crowd at 0 or 1), n_eff held within [scenarios, episodes].
  With one observation per scenario the trials are independent and this is plain Clopper-Pearson.
  Never zero-width: at 0 or 1 the open side is the exact binomial bound at n_eff.
- a mean of scores: `mean_interval`, Student's t on the scenario means (k - 1 degrees of freedom).
- a paired difference (same games, two sides): `paired_interval`. Rates: MOVER (Zou and Donner
  2008; Newcombe's square-and-add with the correlation of the two sides' scenario means) built on
  the two rate intervals above; scores: paired t on the per-scenario mean differences.
- any other statistic of scenario means (a ratio, an IQM, a Nash value, a rank): `bootstrap`, a
  vectorised scenario bootstrap, BCa where it is defined and percentile otherwise.
- generalisation over held-out counterparts: `crossed_interval`, a two-way bootstrap that resamples
  scenarios and counterparts independently.

The agreement rule: every p-value printed beside an interval is that interval inverted,
p = the smallest alpha at which the (1 - alpha) interval excludes 0, so the interval at level
1 - alpha excludes 0 exactly when p < alpha (`inverted_p_value`). For the t-interval this is the
paired t-test; for MOVER and the bootstrap it is found by bisection on the level.

Determinism: the bootstrap draws its resampling counts from (seed, number of scenarios) alone, in
blocks of 64 scenarios, so a cell's interval does not depend on which other cells are computed
with it; ties between a resampled statistic and the estimate are counted within a tolerance
(`TIE_TOLERANCE` x the data's scale), so floating-point noise in a sum cannot move BCa's bias
correction; and bounds are rounded to `DIGITS` decimals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator
from scipy import stats
from scipy.special import ndtr, ndtri

METHOD_EMPTY = "none (no observations)"
METHOD_ONE_CLUSTER = "none (fewer than 2 scenarios)"
METHOD_NO_SPREAD = "none (every scenario mean is equal: no spread to estimate from)"
RATE_METHOD = "Clopper-Pearson at Kish effective n, Korn-Graubard df (scenarios)"
RATE_METHOD_INDEPENDENT = "Clopper-Pearson (one episode per scenario)"
MEAN_METHOD = "t on scenario means (scenarios)"
PAIRED_RATE_METHOD = "paired MOVER of the two rate intervals (scenarios)"
PAIRED_MEAN_METHOD = "paired t on per-scenario differences (scenarios)"
CROSSED_METHOD = "two-way bootstrap SE, t on {df} df (scenarios x {n} held-out counterparts)"
P_VALUE_RULE = "p = smallest alpha at which the (1 - alpha) interval excludes 0 (the interval inverted)"

DEFAULT_RESAMPLES = 10_000
TIE_TOLERANCE = 1e-9
DIGITS = 10
_BLOCK = 64  # scenarios per block of uniforms
_CHUNK_ELEMENTS = 8_000_000  # (resample x scenario) counts built at a time


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

    def excludes(self, value: float = 0.0) -> bool:
        return self.defined and not (self.low <= value <= self.high)  # type: ignore[operator]

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


class TestResult(BaseModel):
    """A p-value and the test that gave it."""

    model_config = ConfigDict(frozen=True)
    __test__ = False  # not a pytest class

    test: str
    p_value: float | None
    n: int  # pairs (episodes) behind the test
    n_clusters: int  # scenarios


def check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _undefined(method: str, confidence: float, n: int, k: int, estimate: float | None = None) -> Interval:
    return Interval(estimate=estimate, low=None, high=None, method=method, confidence=confidence, n=n, n_clusters=k)


def _round(x: float) -> float:
    return float(round(x, DIGITS))


def make_interval(estimate: float, low: float, high: float, method: str, confidence: float, n: int, k: int
                  ) -> Interval:
    """An Interval from computed bounds, with the engine's guards: the estimate inside the bounds,
    everything rounded to `DIGITS` decimals."""
    return _make(estimate, low, high, method, confidence, n, k)


def _make(estimate: float, low: float, high: float, method: str, confidence: float, n: int, k: int) -> Interval:
    estimate = _round(estimate)
    low, high = _round(min(low, estimate)), _round(max(high, estimate))
    return Interval(estimate=estimate, low=low, high=high, method=method, confidence=confidence, n=n,
                    n_clusters=k)


# ------------------------------------------------------------------------- scenario means

def scenario_means(values: Sequence[float] | np.ndarray,
                   clusters: Sequence[Hashable] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-scenario means and sizes, in sorted order of the scenario ids (the order the bootstrap
    draws from, so the same data give the same array whatever the order of the input rows).
    A scenario whose values are all equal gets that value exactly (fsum)."""
    vals = np.asarray(values, dtype=float)
    keys = np.asarray(clusters)
    if vals.ndim != 1 or keys.ndim != 1 or len(vals) != len(keys):
        raise ValueError("values and clusters must be 1-d and of the same length")
    if not np.all(np.isfinite(vals)):
        raise ValueError("values must be finite (drop undefined observations first)")
    if len(vals) == 0:
        return np.empty(0), np.empty(0, dtype=int)
    _, inverse = np.unique(keys.astype(str), return_inverse=True)
    sizes = np.bincount(inverse)
    order = np.argsort(inverse, kind="stable")
    groups = np.split(vals[order], np.cumsum(sizes)[:-1])
    return np.array([math.fsum(g) / len(g) for g in groups]), sizes


def _mean(x: np.ndarray) -> float:
    """The mean over scenarios, exactly rounded and inside [min, max]."""
    return min(max(math.fsum(x) / len(x), float(x.min())), float(x.max()))


# ------------------------------------------------------------------------- rates

def _clopper_pearson(x: np.ndarray, n: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact binomial bounds for x successes of n trials, elementwise; x and n may be fractional
    (beta quantiles)."""
    a = (1 - confidence) / 2
    with np.errstate(all="ignore"):
        low = np.where(x <= 0, 0.0, stats.beta.ppf(a, np.maximum(x, 1e-300), n - x + 1))
        high = np.where(x >= n, 1.0, stats.beta.ppf(1 - a, x + 1, np.maximum(n - x, 1e-300)))
    return low, high


def _df_ratio(k: np.ndarray, confidence: float) -> np.ndarray:
    """Korn and Graubard's factor (z / t[k - 1])^2 on the effective n."""
    z = stats.norm.ppf(1 - (1 - confidence) / 2)
    t = stats.t.ppf(1 - (1 - confidence) / 2, np.maximum(k - 1, 1))
    with np.errstate(all="ignore"):
        ratio = (z / t) ** 2
    return np.where(np.isfinite(ratio) & (t > 0), ratio, 1.0)


def effective_n(means: np.ndarray, sizes: np.ndarray) -> tuple[float, bool]:
    """Kish effective sample size of a rate from its scenario means (before the degrees-of-freedom
    factor), and whether the episodes were independent (one per scenario: n_eff is simply n)."""
    k, n = len(means), int(np.sum(sizes))
    if np.all(sizes == 1):
        return float(n), True
    p = _mean(means)
    padded = np.append(means, 0.5)  # the pseudo-scenario: see the module docstring
    var = float(np.var(padded, ddof=1)) / k
    n_eff = p * (1 - p) / var if var > 0 else float(k)
    return min(max(n_eff, float(k)), float(n)), False


def proportion_intervals(groups: Sequence[tuple[np.ndarray, np.ndarray]], confidence: float = 0.95) -> list[Interval]:
    """`proportion_interval` of many (scenario means, sizes) at once: the quantile functions run
    once over all of them (elementwise, so a group's interval does not depend on the others)."""
    check_confidence(confidence)
    out: list[Interval | None] = [None] * len(groups)
    todo, p_, neff_, k_, n_, method_ = [], [], [], [], [], []
    for i, (means, sizes) in enumerate(groups):
        means, sizes = np.asarray(means, float), np.asarray(sizes, int)
        k, n = len(means), int(sizes.sum())
        if k == 0:
            out[i] = _undefined(METHOD_EMPTY, confidence, 0, 0)
            continue
        if np.any(means < 0) or np.any(means > 1):
            raise ValueError("a rate's scenario means must lie in [0, 1]")
        p = _mean(means)
        if k < 2 and sizes[0] > 1:
            out[i] = _undefined(METHOD_ONE_CLUSTER, confidence, n, k, p)
            continue
        n_eff, independent = effective_n(means, sizes)
        todo.append(i), p_.append(p), neff_.append(n_eff), k_.append(0 if independent else k), n_.append(n)
        method_.append(RATE_METHOD_INDEPENDENT if independent else RATE_METHOD)
    if todo:
        p, k = np.array(p_), np.array(k_)
        n_eff = np.array(neff_) * np.where(k > 0, _df_ratio(k, confidence), 1.0)
        n_eff = np.maximum(n_eff, 1e-6)
        low, high = _clopper_pearson(p * n_eff, n_eff, confidence)
        for j, i in enumerate(todo):
            out[i] = _make(p_[j], float(low[j]), float(high[j]), method_[j], confidence, n_[j],
                           len(groups[i][0]))
    return out  # type: ignore[return-value]


def proportion_interval(means: np.ndarray, sizes: np.ndarray, confidence: float = 0.95) -> Interval:
    """Rate from per-scenario proportions in [0, 1] and the episodes behind each (see the module
    docstring for the method)."""
    return proportion_intervals([(means, sizes)], confidence)[0]


def rate_interval(values: Sequence[float] | np.ndarray, clusters: Sequence[Hashable] | np.ndarray,
                  confidence: float = 0.95) -> Interval:
    """Interval for a rate of 0/1 outcomes, clustered by scenario."""
    vals = np.asarray(values, dtype=float)
    if not np.all((vals == 0) | (vals == 1)):
        raise ValueError("rate_interval takes 0/1 (or bool) values; use mean_interval for scores")
    return proportion_interval(*scenario_means(vals, clusters), confidence=confidence)


# ------------------------------------------------------------------------- means

def _t_bounds(x: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """(estimate, low, high) of Student's t on the values x (one per scenario)."""
    k = len(x)
    est = _mean(x)
    se = float(np.std(x, ddof=1)) / math.sqrt(k)
    q = float(stats.t.ppf(1 - (1 - confidence) / 2, k - 1))
    return est, est - q * se, est + q * se


def scenario_mean_intervals(groups: Sequence[tuple[np.ndarray, int]], confidence: float = 0.95,
                            method: str = MEAN_METHOD) -> list[Interval]:
    """`scenario_mean_interval` of many (scenario means, episodes) at once."""
    check_confidence(confidence)
    out: list[Interval | None] = [None] * len(groups)
    todo = []
    for i, (means, n) in enumerate(groups):
        means = np.asarray(means, float)
        k = len(means)
        if k == 0:
            out[i] = _undefined(METHOD_EMPTY, confidence, n, 0)
        elif k < 2:
            out[i] = _undefined(METHOD_ONE_CLUSTER, confidence, n, k, _mean(means))
        elif np.ptp(means) == 0:
            out[i] = _undefined(METHOD_NO_SPREAD, confidence, n, k, _mean(means))
        else:
            todo.append((i, means, n))
    if todo:
        ks = np.array([len(m) for _, m, _ in todo])
        q = stats.t.ppf(1 - (1 - confidence) / 2, ks - 1)
        for (i, means, n), qi in zip(todo, q, strict=True):
            est = _mean(means)
            se = float(np.std(means, ddof=1)) / math.sqrt(len(means))
            out[i] = _make(est, est - float(qi) * se, est + float(qi) * se, method, confidence, n, len(means))
    return out  # type: ignore[return-value]


def scenario_mean_interval(means: np.ndarray, n: int, confidence: float = 0.95, method: str = MEAN_METHOD
                           ) -> Interval:
    """Mean over scenarios of one value per scenario, with Student's t over scenarios."""
    return scenario_mean_intervals([(means, n)], confidence, method)[0]


def mean_interval(values: Sequence[float] | np.ndarray, clusters: Sequence[Hashable] | np.ndarray,
                  confidence: float = 0.95) -> Interval:
    """Interval for a mean of continuous values (scores), clustered by scenario."""
    means, sizes = scenario_means(values, clusters)
    return scenario_mean_interval(means, int(sizes.sum()), confidence)


def interval_of(kind: str, values: np.ndarray, clusters: np.ndarray, confidence: float = 0.95) -> Interval:
    """`rate_interval` for kind "rate", `mean_interval` for kind "mean"."""
    if kind == "rate":
        return rate_interval(values, clusters, confidence)
    if kind == "mean":
        return mean_interval(values, clusters, confidence)
    raise ValueError(f"kind must be 'rate' or 'mean', got {kind!r}")


# ------------------------------------------------------------------------- p-values and TOST

def inverted_p_value(bounds_at: Callable[[float], tuple[float, float]], null: float = 0.0) -> float:
    """The smallest alpha at which the (1 - alpha) interval `bounds_at(1 - alpha)` excludes `null`.
    Intervals are nested in the level, so this is found by bisection; 1.0 when even the narrowest
    interval contains `null`."""
    def excludes(alpha: float) -> bool:
        lo, hi = bounds_at(1 - alpha)
        return not (lo <= null <= hi)

    hi_alpha = 1 - 1e-9
    if not excludes(hi_alpha):
        return 1.0
    lo_alpha = 1e-10
    if excludes(lo_alpha):
        return 0.0
    for _ in range(45):
        mid = math.sqrt(lo_alpha * hi_alpha) if hi_alpha < 1e-3 else (lo_alpha + hi_alpha) / 2
        if excludes(mid):
            hi_alpha = mid
        else:
            lo_alpha = mid
    return hi_alpha


class Equivalence(BaseModel):
    """Two one-sided tests (TOST) for |difference| < margin."""

    margin: float
    p_value: float  # the larger of the two one-sided p-values
    equivalent: bool  # p < alpha: the (1 - 2 alpha) interval lies inside (-margin, margin)
    interval: Interval  # the (1 - 2 alpha) interval it rests on


def tost(bounds_at: Callable[[float], tuple[float, float]], margin: float, interval_at: Callable[[float], Interval],
         alpha: float = 0.05) -> Equivalence:
    """TOST by the same inversion: each one-sided test at level a is the matching bound of the
    (1 - 2a) interval, so p is the smallest a at which the (1 - 2a) interval lies in (-margin, margin)."""
    if margin <= 0:
        raise ValueError(f"an equivalence margin must be positive, got {margin}")

    def inside(a: float) -> bool:
        lo, hi = bounds_at(1 - 2 * a)
        return -margin < lo and hi < margin

    if not inside(0.5 - 1e-9):
        p = 1.0
    else:
        lo_a, hi_a = 1e-12, 0.5 - 1e-9
        if inside(lo_a):
            p = 0.0
        else:
            for _ in range(40):
                mid = (lo_a + hi_a) / 2
                lo_a, hi_a = (lo_a, mid) if inside(mid) else (mid, hi_a)
            p = hi_a
    return Equivalence(margin=margin, p_value=p, equivalent=p < alpha, interval=interval_at(1 - 2 * alpha))


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


# ------------------------------------------------------------------------- paired differences

class Paired(BaseModel):
    """A paired difference with the p-value of the same interval inverted."""

    difference: Interval
    test: TestResult
    equivalence: Equivalence | None = None


def _mover_bounds(a: np.ndarray, sa: np.ndarray, b: np.ndarray, sb: np.ndarray, confidence: float
                  ) -> tuple[float, float, float]:
    pa, pb = proportion_interval(a, sa, confidence), proportion_interval(b, sb, confidence)
    ca, cb = a - a.mean(), b - b.mean()
    den = math.sqrt(float(ca @ ca) * float(cb @ cb))
    phi = float(ca @ cb) / den if den > 0 else 0.0
    d = pa.estimate - pb.estimate  # type: ignore[operator]
    la, ua = pa.estimate - pa.low, pa.high - pa.estimate  # type: ignore[operator]
    lb, ub = pb.estimate - pb.low, pb.high - pb.estimate  # type: ignore[operator]
    low = d - math.sqrt(max(la * la - 2 * phi * la * ub + ub * ub, 0.0))
    high = d + math.sqrt(max(ua * ua - 2 * phi * ua * lb + lb * lb, 0.0))
    return d, low, high


def paired_interval(ya: np.ndarray, yb: np.ndarray, clusters: np.ndarray, binary: bool, *,
                    confidence: float = 0.95, margin: float | None = None, with_test: bool = True) -> Paired:
    """A minus B over aligned pairs (ya[i], yb[i]) played on scenario clusters[i].

    `binary`: both sides are proportions in [0, 1] (a rate, or a mean of rates), and the difference
    is MOVER of the two rate intervals; else paired t on the per-scenario mean differences. The
    p-value is the interval inverted (`inverted_p_value`); with `margin`, TOST for |A - B| < margin.
    """
    check_confidence(confidence)
    ya, yb = np.asarray(ya, float), np.asarray(yb, float)
    clusters = np.asarray(clusters)
    n = len(ya)
    a, sizes = scenario_means(ya, clusters)
    b, _ = scenario_means(yb, clusters)
    k = len(a)
    method = PAIRED_RATE_METHOD if binary else PAIRED_MEAN_METHOD
    if k == 0 or (k < 2 and not (binary and sizes[0] == 1)):
        iv = _undefined(METHOD_EMPTY if k == 0 else METHOD_ONE_CLUSTER, confidence, n, k,
                        None if k == 0 else float(a[0] - b[0]))
        return Paired(difference=iv, test=TestResult(test=f"none ({iv.method[6:-1]})", p_value=None, n=n,
                                                     n_clusters=k))
    d = a - b
    if binary:
        def bounds_at(c: float) -> tuple[float, float]:
            return _mover_bounds(a, sizes, b, sizes, c)[1:]
        est = _mean(a) - _mean(b)
    else:
        if np.ptp(d) == 0:
            iv = _undefined(METHOD_NO_SPREAD.replace("scenario mean", "paired difference"), confidence, n, k,
                            float(d[0]))
            return Paired(difference=iv, test=TestResult(test="none (no spread)", p_value=None, n=n, n_clusters=k))

        def bounds_at(c: float) -> tuple[float, float]:
            return _t_bounds(d, c)[1:]
        est = _mean(d)

    def interval_at(c: float) -> Interval:
        return _make(est, *bounds_at(c), method, c, n, k)

    p = inverted_p_value(bounds_at) if with_test else None
    test = TestResult(test=f"{'MOVER' if binary else 't'} interval inverted over {k} scenarios", p_value=p, n=n,
                      n_clusters=k)
    eq = tost(bounds_at, margin, interval_at) if margin is not None else None
    return Paired(difference=interval_at(confidence), test=test, equivalence=eq)


# ------------------------------------------------------------------------- the bootstrap

def _uniforms(width: int, n_resamples: int, seed: int, start: int = 0) -> np.ndarray:
    """(n_resamples x width) uniforms in [0, 1): rows start .. start + n_resamples of the seed, in
    blocks of 64 columns each from its own generator seeded by (seed, block), so that the first k
    columns are the same whatever the width."""
    blocks = []
    for blk in range(-(-width // _BLOCK)):
        gen = np.random.default_rng([seed, blk])
        if start:
            gen.bit_generator.advance(start * _BLOCK)
        blocks.append(gen.random((n_resamples, _BLOCK)))
    if not blocks:
        return np.empty((n_resamples, 0), np.float32)
    return np.hstack(blocks)[:, :width].astype(np.float32)


def resample_counts(k: int, n_resamples: int, seed: int = 0, start: int = 0) -> np.ndarray:
    """(n_resamples x k) counts: how often each of k scenarios is drawn in each bootstrap resample.
    Depends only on (k, seed, rows), never on other data computed alongside."""
    idx = (_uniforms(k, n_resamples, seed, start) * np.float32(k)).astype(np.int64)
    np.minimum(idx, k - 1, out=idx)  # a uniform rounded up to 1.0 in float32
    rows = np.arange(n_resamples)[:, None] * k
    return np.bincount((idx + rows).ravel(), minlength=n_resamples * k).reshape(n_resamples, k)


def resampled_means(x: np.ndarray, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> np.ndarray:
    """Bootstrap means over the last axis (scenarios) of x (..., k): shape (..., n_resamples).
    Every leading row is resampled with the same scenarios (paired), in chunks to bound memory."""
    x = np.asarray(x, float)
    k = x.shape[-1]
    flat = x.reshape(-1, k)
    out = np.empty((flat.shape[0], n_resamples))
    step = max(1, _CHUNK_ELEMENTS // max(k, 1))
    for start in range(0, n_resamples, step):
        stop = min(start + step, n_resamples)
        counts = resample_counts(k, stop - start, seed, start).astype(float)
        out[:, start:stop] = flat @ counts.T / k
    return out.reshape(*x.shape[:-1], n_resamples)


def _scale(*arrays: np.ndarray) -> float:
    return max([1.0] + [float(np.nanmax(np.abs(a))) for a in arrays if np.size(a) and np.isfinite(a).any()])


def _quantile(sorted_row: np.ndarray, q: float) -> float:
    return float(np.quantile(sorted_row, min(max(q, 0.0), 1.0)))


def bootstrap_bounds(estimate: np.ndarray, boot: np.ndarray, jack: np.ndarray | None, confidence: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BCa bounds of each row from its bootstrap distribution `boot` (rows x resamples) and
    leave-one-scenario-out jackknife values `jack` (rows x k); percentile where BCa is undefined
    (or `jack` is None). Returns (low, high, bca_used). Ties with the estimate count half, within
    `TIE_TOLERANCE` of the data's scale."""
    check_confidence(confidence)
    estimate, boot = np.atleast_1d(estimate).astype(float), np.atleast_2d(boot).astype(float)
    alpha = (1 - confidence) / 2
    lows, highs, used = [], [], []
    for i, (t, row) in enumerate(zip(estimate, boot, strict=True)):
        row = np.sort(row[np.isfinite(row)])
        if not len(row) or not math.isfinite(t):
            lows.append(np.nan), highs.append(np.nan), used.append(False)
            continue
        a_lo, a_hi, bca = alpha, 1 - alpha, False
        if jack is not None:
            eps = TIE_TOLERANCE * _scale(row, jack[i])
            below = np.searchsorted(row, t - eps, "left")
            ties = np.searchsorted(row, t + eps, "right") - below
            with np.errstate(divide="ignore", invalid="ignore"):
                z0 = ndtri((below + ties / 2) / len(row))
                u = jack[i].mean() - jack[i]
                den = 6 * float((u**2).sum()) ** 1.5
                acc = float((u**3).sum()) / den if den > 0 else np.nan
                zl, zh = z0 + ndtri(alpha), z0 + ndtri(1 - alpha)
                bl, bh = ndtr(z0 + zl / (1 - acc * zl)), ndtr(z0 + zh / (1 - acc * zh))
            if np.isfinite(bl) and np.isfinite(bh):
                a_lo, a_hi, bca = float(bl), float(bh), True
        lows.append(_quantile(row, a_lo)), highs.append(_quantile(row, a_hi)), used.append(bca)
    return np.array(lows), np.array(highs), np.array(used)


def rank_bounds(boot: np.ndarray, confidence: float = 0.95) -> tuple[list[int], list[int]]:
    """Rank intervals from bootstrap replicates of several scores (rows x resamples, larger is
    better): each row's rank (1 + rows strictly above) in every resample, and the lower and upper
    quantiles of those integer ranks."""
    check_confidence(confidence)
    ranks = 1 + (boot[None, :, :] > boot[:, None, :]).sum(axis=1)
    a = (1 - confidence) / 2
    return ([int(v) for v in np.quantile(ranks, a, axis=1, method="lower")],
            [int(v) for v in np.quantile(ranks, 1 - a, axis=1, method="higher")])


def bootstrap(x: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray], *, confidence: float = 0.95,
              n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, bca: bool = True
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Scenario bootstrap of any statistic of scenario means.

    `x`: per-scenario values (..., k), scenarios last; every leading row is resampled with the same
    scenarios. `statistic` maps means of shape (..., B) to (m, B) (m intervals, B replicates; it is
    given the full-data means with B = 1, the bootstrap means, and the k leave-one-out means).
    Returns (estimate, low, high, bca_used), each of length m; NaN where undefined.
    """
    x = np.asarray(x, float)
    k = x.shape[-1]
    estimate = np.asarray(statistic(x.mean(axis=-1)[..., None]), float)[:, 0]
    if k < 2:
        nan = np.full(estimate.shape, np.nan)
        return estimate, nan, nan.copy(), np.zeros(estimate.shape, bool)
    boot = np.asarray(statistic(resampled_means(x, n_resamples, seed)), float)
    jack = None
    if bca:
        loo = (x.sum(axis=-1, keepdims=True) - x) / (k - 1)
        jack = np.asarray(statistic(loo), float)
    low, high, used = bootstrap_bounds(estimate, boot, jack, confidence)
    return estimate, low, high, used


def bootstrap_intervals(x: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray], method: str, *, n: int,
                        confidence: float = 0.95, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0
                        ) -> list[Interval]:
    """`bootstrap` as Intervals; `method` has a {} for "BCa" or "percentile"."""
    est, low, high, used = bootstrap(x, statistic, confidence=confidence, n_resamples=n_resamples, seed=seed)
    k = np.shape(x)[-1]
    out = []
    for e, lo, hi, u in zip(est, low, high, used, strict=True):
        if not math.isfinite(e):
            out.append(_undefined(METHOD_EMPTY, confidence, n, k))
        elif k < 2 or not (math.isfinite(lo) and math.isfinite(hi)):
            out.append(_undefined(METHOD_ONE_CLUSTER, confidence, n, k, float(e)))
        else:
            out.append(_make(float(e), float(lo), float(hi), method.format("BCa" if u else "percentile"),
                             confidence, n, k))
    return out


# ------------------------------------------------------------------------- crossed bootstrap

def crossed_distribution(y: np.ndarray, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> np.ndarray:
    """Two-way bootstrap of the grand mean of y (k scenarios x H counterparts): scenarios and
    counterparts resampled independently (a pigeonhole bootstrap, Owen 2007). (n_resamples,)."""
    y = np.asarray(y, float)
    k, h = y.shape
    w = resample_counts(k, n_resamples, seed).astype(float)
    v = resample_counts(h, n_resamples, seed + 1).astype(float)
    return np.einsum("rh,rh->r", w @ y, v) / (k * h)


def crossed_interval(y: np.ndarray, *, n: int, confidence: float = 0.95, n_resamples: int = DEFAULT_RESAMPLES,
                     seed: int = 0, margin: float | None = None, limits: tuple[float, float] | None = None) -> Paired:
    """Mean of y (k scenarios x H held-out counterparts), its interval, the interval's inverted
    p-value and, with `margin`, TOST. Read as: generalisation to other scenarios *and* other
    counterparts drawn like these.

    The standard error comes from the two-way bootstrap; the critical value is Student's t on
    min(k, H) - 1 degrees of freedom, because the scarcer of the two samples (usually the handful
    of counterparts) limits what the data say about the spread. (Percentile intervals of the same
    bootstrap covered 0.81 with 3 counterparts and 0.90 with 5; see docs/statistics.md.) `limits`:
    the range the mean can take (a rate: (0, 1)), to which the bounds are held."""
    check_confidence(confidence)
    y = np.asarray(y, float)
    k, h = y.shape
    df = min(k, h) - 1
    method = CROSSED_METHOD.format(n=h, df=df)
    est = _mean(y.mean(axis=1)) if k else None
    if k < 2 or h < 2:
        why = METHOD_ONE_CLUSTER if k < 2 else "none (fewer than 2 held-out counterparts: nothing to resample)"
        iv = _undefined(why, confidence, n, k, est)
        return Paired(difference=iv, test=TestResult(test=why, p_value=None, n=n, n_clusters=k))
    if np.ptp(y) == 0:
        iv = _undefined(METHOD_NO_SPREAD.replace("scenario mean", "value"), confidence, n, k, est)
        return Paired(difference=iv, test=TestResult(test="none (no spread)", p_value=None, n=n, n_clusters=k))
    se = float(np.std(crossed_distribution(y, n_resamples, seed), ddof=1))

    def bounds_at(c: float) -> tuple[float, float]:
        q = float(stats.t.ppf(1 - (1 - c) / 2, df))
        lo, hi = est - q * se, est + q * se  # type: ignore[operator]
        if limits is not None:
            lo, hi = max(lo, limits[0]), min(hi, limits[1])
        return lo, hi

    def interval_at(c: float) -> Interval:
        return _make(est, *bounds_at(c), method, c, n, k)  # type: ignore[arg-type]

    test = TestResult(test=f"crossed bootstrap interval inverted ({k} scenarios x {h} counterparts)",
                      p_value=inverted_p_value(bounds_at), n=n, n_clusters=k)
    eq = tost(bounds_at, margin, interval_at) if margin is not None else None
    return Paired(difference=interval_at(confidence), test=test, equivalence=eq)


def few_counterparts_note(h: int) -> str | None:
    """What an interval over h held-out counterparts can and cannot claim, when h < 5."""
    if h >= 5:
        return None
    return (f"only {h} held-out counterpart{'s' if h != 1 else ''}: the crossed interval resamples so few that it "
            "cannot stand for counterparts at large (its width is itself very uncertain); read it as these "
            f"{h} counterparts plus the spread they show, not as a claim about unseen ones")
