"""Intervals: known values, edge cases, fallbacks, and coverage on simulated data."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import stats

from ibrl_bench.stats.intervals import (
    Interval,
    cluster_bootstrap,
    mean_interval,
    rate_interval,
    wilson,
)


def wilson_closed_form(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson (1927) score interval written out, as an independent check on scipy."""
    z = stats.norm.ppf(1 - (1 - confidence) / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


# ---------------------------------------------------------------- Wilson

@pytest.mark.parametrize("k,n,confidence", [(7, 10, 0.95), (62, 100, 0.95), (3, 40, 0.9),
                                            (1, 1, 0.95), (250, 1000, 0.99)])
def test_wilson_matches_closed_form(k, n, confidence):
    iv = wilson(k, n, confidence)
    low, high = wilson_closed_form(k, n, confidence)
    assert iv.low == pytest.approx(low, abs=1e-9)
    assert iv.high == pytest.approx(high, abs=1e-9)
    assert iv.estimate == k / n
    assert (iv.method, iv.n, iv.n_clusters, iv.confidence) == ("wilson", n, n, confidence)


def test_wilson_edges():
    zero = wilson(0, 20)
    assert zero.estimate == 0.0 and zero.low == 0.0 and 0.0 < zero.high < 0.2
    assert zero.high == pytest.approx(wilson_closed_form(0, 20)[1], abs=1e-9)
    full = wilson(20, 20)
    assert full.estimate == 1.0 and full.high == 1.0 and 0.8 < full.low < 1.0
    assert full.low == pytest.approx(1 - zero.high, abs=1e-12)  # symmetric in k <-> n - k
    empty = wilson(0, 0)
    assert (empty.estimate, empty.low, empty.high, empty.n) == (None, None, None, 0)
    assert str(empty) == "n/a"


def test_wilson_rejects_bad_counts():
    with pytest.raises(ValueError):
        wilson(5, 3)
    with pytest.raises(ValueError):
        wilson(-1, 3)
    with pytest.raises(ValueError):
        wilson(1, 3, confidence=95)


def test_wilson_coverage_on_simulated_binomials():
    # Coverage depends only on k, so compute each interval once and look the draws up.
    rng = np.random.default_rng(12345)
    coverages = {}
    for n in (20, 50, 100, 300):
        table = [wilson(k, n) for k in range(n + 1)]
        lows = np.array([iv.low for iv in table])
        highs = np.array([iv.high for iv in table])
        for p in (0.1, 0.5, 0.8):
            ks = rng.binomial(n, p, size=2000)
            coverages[(n, p)] = float(np.mean((lows[ks] <= p) & (p <= highs[ks])))
    # Wilson's exact coverage oscillates around 0.95 with n and p (0.935 to 0.975 on this grid);
    # 2000 draws add about +-0.005 of noise.
    for key, cov in coverages.items():
        assert 0.925 <= cov <= 0.985, (key, cov)
    assert 0.94 <= np.mean(list(coverages.values())) <= 0.965


# ---------------------------------------------------------------- Interval model

def test_interval_format_and_no_nan():
    iv = Interval(estimate=0.623, low=0.551, high=0.694, method="wilson", confidence=0.95,
                  n=100, n_clusters=100)
    assert str(iv) == "0.62 [0.55, 0.69]"
    assert iv.format(3) == "0.623 [0.551, 0.694]"
    no_bounds = iv.model_copy(update={"low": None, "high": None})
    assert str(no_bounds) == "0.62 [n/a]" and not no_bounds.defined
    with pytest.raises(ValidationError):
        Interval(estimate=float("nan"), low=None, high=None, method="x", confidence=0.95,
                 n=1, n_clusters=1)
    # Plain JSON round trip: None stays None.
    assert Interval.model_validate_json(no_bounds.model_dump_json()) == no_bounds


# ---------------------------------------------------------------- bootstrap

def test_cluster_bootstrap_estimate_is_mean_of_cluster_means():
    values = [1, 1, 1, 0, 0.5, 0.5]   # cluster a: 1, 1, 1; b: 0; c: 0.5, 0.5
    clusters = ["a", "a", "a", "b", "c", "c"]
    iv = cluster_bootstrap(values, clusters)
    assert iv.estimate == pytest.approx((1 + 0 + 0.5) / 3)
    assert (iv.n, iv.n_clusters) == (6, 3)
    assert iv.low <= iv.estimate <= iv.high


def test_bootstrap_uses_bca_and_says_so():
    rng = np.random.default_rng(0)
    values = rng.normal(5, 2, size=120)
    clusters = np.repeat(np.arange(30), 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the BCa path must not emit warnings on ordinary data
        iv = cluster_bootstrap(values, clusters, n_resamples=999)
    assert iv.method == "cluster bootstrap BCa (scenarios)"
    assert iv.low < iv.estimate < iv.high
    singles = mean_interval(values, np.arange(120), n_resamples=999)
    assert singles.method == "bootstrap BCa (episodes)"
    assert (singles.n, singles.n_clusters) == (120, 120)


def test_bootstrap_is_deterministic_and_order_free():
    rng = np.random.default_rng(1)
    values = rng.random(60)
    clusters = np.repeat([f"s{i}" for i in range(15)], 4)
    a = cluster_bootstrap(values, clusters, seed=7, n_resamples=500)
    b = cluster_bootstrap(values, clusters, seed=7, n_resamples=500)
    perm = rng.permutation(60)
    c = cluster_bootstrap(values[perm], clusters[perm], seed=7, n_resamples=500)
    assert a == b
    assert (c.low, c.high) == pytest.approx((a.low, a.high), abs=1e-12)
    d = cluster_bootstrap(values, clusters, seed=8, n_resamples=500)
    assert (d.low, d.high) != (a.low, a.high)


@pytest.mark.parametrize("constant", [0.0, 1.0, 0.3])
def test_constant_data_falls_back_to_percentile(constant):
    values = np.full(40, constant)
    clusters = np.repeat(np.arange(10), 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the expected scipy warnings are suppressed, not leaked
        iv = cluster_bootstrap(values, clusters)
    # Exactly [x, x], with the estimate equal to the bounds (no 1-ulp drift).
    assert iv.estimate == iv.low == iv.high == pytest.approx(constant, abs=1e-15)
    assert iv.method == "cluster bootstrap percentile (scenarios)"


def test_rate_interval_all_zero_and_all_one_with_seeds():
    clusters = np.repeat(np.arange(8), 3)
    zeros = rate_interval(np.zeros(24), clusters)
    ones = rate_interval(np.ones(24, dtype=bool), clusters)
    assert (zeros.low, zeros.high, ones.low, ones.high) == (0.0, 0.0, 1.0, 1.0)
    assert "percentile" in zeros.method and "percentile" in ones.method


def test_single_cluster_has_no_interval():
    iv = cluster_bootstrap([1, 0, 1, 1], ["s1"] * 4)
    assert iv.estimate == 0.75 and iv.low is None and iv.high is None
    assert iv.method == "none (fewer than 2 scenarios)"
    assert str(iv) == "0.75 [n/a]"
    rate = rate_interval([1, 0, 1, 1], ["s1"] * 4)
    assert rate.method == "none (fewer than 2 scenarios)"


def test_empty_input():
    for fn in (cluster_bootstrap, rate_interval, mean_interval):
        iv = fn([], [])
        assert (iv.estimate, iv.low, iv.high, iv.n, iv.n_clusters) == (None, None, None, 0, 0)


def test_rate_interval_picks_wilson_only_for_one_seed_per_scenario():
    values = [1, 0, 1, 1, 0, 1, 1, 1]
    one_each = rate_interval(values, list("abcdefgh"))
    assert one_each.method == "wilson"
    assert (one_each.low, one_each.high) == (wilson(6, 8).low, wilson(6, 8).high)
    two_each = rate_interval(values, list("aabbccdd"))
    assert two_each.method.startswith("cluster bootstrap")
    with pytest.raises(ValueError):
        rate_interval([0.5, 1.0], ["a", "b"])


# ---------------------------------------------------------------- clustered coverage

def test_cluster_bootstrap_covers_and_naive_interval_does_not():
    """Scenarios differ strongly (success probability ~ Beta(0.6, 0.4), intra-scenario
    correlation 0.5) and each is played with 4 seeds. The quantity of interest is the mean over
    scenarios, 0.6. Resampling scenarios covers it at about the nominal rate; pooling the 160
    episodes as if independent (Wilson) gives an interval about 1/sqrt(2.5) too narrow."""
    a, b = 0.6, 0.4
    true_mean = a / (a + b)
    n_scenarios, k_seeds, n_sims = 40, 4, 300
    rng = np.random.default_rng(20240601)
    clusters = np.repeat([f"s{i}" for i in range(n_scenarios)], k_seeds)
    covered_cluster = covered_naive = 0
    for sim in range(n_sims):
        p = rng.beta(a, b, size=n_scenarios)
        y = (rng.random((n_scenarios, k_seeds)) < p[:, None]).ravel()
        iv = rate_interval(y, clusters, n_resamples=999, seed=sim)
        assert iv.method == "cluster bootstrap BCa (scenarios)"
        covered_cluster += iv.low <= true_mean <= iv.high
        naive = wilson(int(y.sum()), y.size)
        covered_naive += naive.low <= true_mean <= naive.high
    cov_cluster, cov_naive = covered_cluster / n_sims, covered_naive / n_sims
    # Measured with these seeds: cluster 0.957, naive 0.807.
    assert 0.90 <= cov_cluster <= 0.99, cov_cluster
    assert cov_naive <= 0.88, cov_naive
    assert cov_cluster - cov_naive >= 0.08, (cov_cluster, cov_naive)


def test_seed_keyword_follows_installed_scipy(monkeypatch):
    """scipy < 1.15 names the seed `random_state`; the same call must work there."""
    from ibrl_bench.stats import intervals

    real = stats.bootstrap
    seen = {}

    def old_bootstrap(data, statistic, *, n_resamples=9999, confidence_level=0.95,
                      method="BCa", random_state=None):
        seen["random_state"] = random_state
        return real(data, statistic, n_resamples=n_resamples, confidence_level=confidence_level,
                    method=method, rng=random_state)

    values, clusters = np.arange(20.0), np.repeat(np.arange(10), 2)
    expected = cluster_bootstrap(values, clusters, n_resamples=300)
    monkeypatch.setattr(intervals.stats, "bootstrap", old_bootstrap)
    assert cluster_bootstrap(values, clusters, n_resamples=300) == expected
    assert isinstance(seen["random_state"], np.random.Generator)
