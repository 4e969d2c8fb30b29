"""The vectorized cluster bootstrap behind every interval of the matrix: same answers as the
per-interval scipy path, independence from the other cells, and coverage on clustered data."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ibrl_bench.stats.batch import bootstrap_means, interval_batch, matrix_metrics, resample_indices
from ibrl_bench.stats.cells import cell_metrics
from ibrl_bench.stats.intervals import cluster_bootstrap, rate_interval, wilson
from simulate import frame


def clustered_rates(rng, n_scenarios=40, n_seeds=4, a=0.6, b=0.4):
    p = rng.beta(a, b, size=n_scenarios)
    y = (rng.random((n_scenarios, n_seeds)) < p[:, None]).astype(float).ravel()
    return y, np.repeat([f"s{i}" for i in range(n_scenarios)], n_seeds)


def test_bounds_agree_with_scipy_bootstrap():
    """Same estimator as scipy.stats.bootstrap(method='BCa'): with many resamples both land on the
    same bounds up to Monte Carlo noise, for rates and for skewed scores."""
    rng = np.random.default_rng(3)
    cases = [("rate", *clustered_rates(rng)), ("mean", rng.lognormal(0, 1, 90), np.repeat(np.arange(30), 3)),
             ("mean", rng.normal(5, 2, 50), np.arange(50))]
    ours = interval_batch(cases, n_resamples=40_000, seed=1)
    for (_, values, clusters), iv in zip(cases, ours):
        ref = cluster_bootstrap(values, clusters, n_resamples=40_000, seed=2)
        assert iv.estimate == ref.estimate and iv.method == ref.method
        assert (iv.n, iv.n_clusters) == (ref.n, ref.n_clusters)
        width = ref.high - ref.low
        assert iv.low == pytest.approx(ref.low, abs=0.04 * width)
        assert iv.high == pytest.approx(ref.high, abs=0.04 * width)


def test_bca_matches_scipy_exactly_given_the_same_resamples():
    """Feed scipy the resamples our count matrix encodes: the BCa bounds must then be equal to
    rounding, which pins the bias correction, acceleration and quantile rule to scipy's."""
    rng = np.random.default_rng(5)
    means = rng.gamma(2.0, 1.0, size=(3, 25))
    low, high, bca = bootstrap_means(means, n_resamples=5000, seed=9)
    assert bca.all()
    idx = resample_indices(25, 5000, seed=9)  # the same resamples
    assert idx.min() == 0 and idx.max() == 24
    for row in range(3):
        boot = means[row][idx].mean(axis=1)
        res = stats.bootstrap((means[row],), np.mean, n_resamples=0, method="BCa",
                              bootstrap_result=type("R", (), {"bootstrap_distribution": boot})())
        assert low[row] == pytest.approx(res.confidence_interval.low, rel=1e-10)
        assert high[row] == pytest.approx(res.confidence_interval.high, rel=1e-10)


def test_a_cell_does_not_move_when_other_cells_are_added():
    rng = np.random.default_rng(0)
    a = ("rate", *clustered_rates(rng))
    b = ("mean", rng.normal(size=120), np.repeat(np.arange(40), 3))
    c = ("mean", rng.normal(size=60), np.repeat(np.arange(20), 3))  # another number of scenarios
    alone = interval_batch([a], n_resamples=3000)[0]
    together = interval_batch([c, b, a], n_resamples=3000)[2]
    assert alone == together


def test_paths_without_bootstrap_are_those_of_rate_and_mean_interval():
    one_seed = ("rate", np.array([1, 0, 1, 1, 0, 1.0]), np.arange(6))
    constant = ("rate", np.ones(12), np.repeat(np.arange(4), 3))
    single = ("mean", np.array([1.0, 2.0, 3.0]), np.zeros(3))
    empty = ("mean", np.array([]), np.array([]))
    got = interval_batch([one_seed, constant, single, empty])
    assert got[0] == rate_interval(*one_seed[1:])  # Wilson, identical
    assert (got[1].low, got[1].high, got[1].method) == (1.0, 1.0, "cluster bootstrap percentile (scenarios)")
    assert got[2].method == "none (fewer than 2 scenarios)" and got[2].estimate == 2.0
    assert got[3].estimate is None and got[3].n == 0
    with pytest.raises(ValueError):
        interval_batch([("rate", np.array([0.5, 1.0]), np.arange(2))])


def test_matrix_metrics_equal_cell_metrics_up_to_resampling_noise():
    rng = np.random.default_rng(11)
    rows = []
    for p in ("p1", "p2"):
        for s in range(30):
            level = rng.random()
            for k in range(3):
                ok = bool(rng.random() < level)
                rows.append({"policy": p, "counterpart": "c", "scenario_id": f"s{s}", "seed": k, "success": ok,
                             "policy_score": 10 * level + rng.normal(), "m_pareto_optimal": bool(rng.random() < .5) if ok else None})
    df = frame(rows)
    batch = matrix_metrics(df, ["policy", "counterpart", "policy_role"], n_resamples=20_000)
    for (p, _, _), metrics in batch.items():
        one = cell_metrics(df[df["policy"] == p], n_resamples=20_000)
        assert list(metrics) == list(one)
        for name in metrics:
            x, y = metrics[name], one[name]
            assert (x.estimate, x.method, x.n, x.n_clusters) == (y.estimate, y.method, y.n, y.n_clusters), name
            if y.low is not None and y.high > y.low:
                assert x.low == pytest.approx(y.low, abs=0.06 * (y.high - y.low) + 1e-9), name
                assert x.high == pytest.approx(y.high, abs=0.06 * (y.high - y.low) + 1e-9), name


def test_coverage_on_clustered_rates_and_scores():
    """400 simulated cells in one batch. Rates: scenario success probability ~ Beta(0.6, 0.4)
    (strong clustering), 40 scenarios x 4 seeds, truth 0.6. Scores: scenario level ~ N(0, 1) plus
    N(0, 1) noise, 30 scenarios x 3 seeds, truth 0. Both should cover at about 95%."""
    rng = np.random.default_rng(2024)
    rates = [("rate", *clustered_rates(rng)) for _ in range(400)]
    scores = []
    for _ in range(400):
        u = rng.normal(size=30)
        scores.append(("mean", (u[:, None] + rng.normal(size=(30, 3))).ravel(), np.repeat(np.arange(30), 3)))
    ivs = interval_batch(rates + scores, n_resamples=2000, seed=7)
    cov_rate = np.mean([iv.low <= 0.6 <= iv.high for iv in ivs[:400]])
    cov_score = np.mean([iv.low <= 0.0 <= iv.high for iv in ivs[400:]])
    # Wilson on the pooled 160 episodes, as if they were independent, for contrast.
    naive = np.mean([wilson(int(v.sum()), len(v)).low <= 0.6 <= wilson(int(v.sum()), len(v)).high
                     for _, v, _ in rates])
    # Measured with these seeds: rates 0.960, scores 0.930, naive 0.780 (400 draws: +-0.011).
    assert 0.915 <= cov_rate <= 0.985, cov_rate
    assert 0.90 <= cov_score <= 0.975, cov_score
    assert naive <= 0.85, naive
    assert all(iv.method == "cluster bootstrap BCa (scenarios)" for iv in ivs)


def test_wilson_in_closed_form_equals_scipy():
    from ibrl_bench.stats.batch import _Wilson, wilson_many

    cases = [(0, 1), (1, 1), (0, 20), (20, 20), (7, 10), (62, 100), (3, 40), (250, 1000), (999, 1000)]
    for confidence in (0.9, 0.95, 0.99):
        got = wilson_many([_Wilson(k, n) for k, n in cases], confidence)
        for (k, n), iv in zip(cases, got):
            ref = wilson(k, n, confidence)
            assert (iv.estimate, iv.method, iv.n, iv.n_clusters) == (ref.estimate, ref.method, ref.n, ref.n_clusters)
            assert iv.low == pytest.approx(ref.low, abs=1e-12) and iv.high == pytest.approx(ref.high, abs=1e-12)
            if k == 0:
                assert iv.low == ref.low == 0.0
            if k == n:
                assert iv.high == ref.high == 1.0
