"""Rankings: the maximum-entropy Nash equilibrium on known games, its invariance to a duplicated
counterpart, the rank rule, the normalized IQM, and coverage of the ranking intervals."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ibrl_bench.stats.intervals import Interval
from ibrl_bench.stats.ranking import maxent_nash, rank_rule, rankings
from simulate import frame, matrix_scores


def entropy(x):
    x = x[x > 0]
    return float(-(x * np.log(x)).sum())


@pytest.mark.parametrize("scores, p, q, value", [
    ([[1, 0], [0, 1]], [0.5, 0.5], [0.5, 0.5], 0.5),                 # matching pennies
    ([[1, 1, 1], [1, 1, 1]], [0.5, 0.5], [1 / 3] * 3, 1.0),          # every strategy optimal: uniform
    ([[1, 1, 0], [1, 1, 0], [0, 0, 1]], [0.25, 0.25, 0.5], [0.25, 0.25, 0.5], 0.5),
    ([[0.9, 0.5], [0.6, 0.4]], [1, 0], [0, 1], 0.5),                 # a dominant (hardest) column
])
def test_known_games(scores, p, q, value):
    p_hat, q_hat, v, solver = maxent_nash(np.array(scores, dtype=float))
    assert v == pytest.approx(value, abs=1e-9)
    assert p_hat == pytest.approx(p, abs=1e-6) and q_hat == pytest.approx(q, abs=1e-6)
    assert "linprog" in solver and "SLSQP" in solver and "failed" not in solver


def test_equilibria_are_optimal_and_of_maximum_entropy_on_random_games():
    for seed in range(15):
        rng = np.random.default_rng(seed)
        s = np.round(rng.random((rng.integers(2, 6), rng.integers(2, 7))) * 4) / 4  # ties: many equilibria
        p, q, v, solver = maxent_nash(s)
        assert "failed" not in solver
        assert np.min(s.T @ p) >= v - 1e-7 and np.max(s @ q) <= v + 1e-7  # both strategies optimal
        # No optimal mixture has more entropy: mixing with any LP vertex of the optimal face can only lower it.
        for other in (np.eye(len(p))[i] for i in range(len(p))):
            if np.min(s.T @ other) >= v - 1e-9:
                assert entropy(0.5 * (p + other)) <= entropy(p) + 1e-6


def test_copies_do_not_pull_weight_where_the_equilibrium_is_not_unique():
    """A dominates, so any mixture of counterparts is optimal. Plain maximum entropy over three
    columns where two are copies would give the copied column 2/3 of the weight; merged copies keep
    it at 1/2, and B's Nash value where it was."""
    s = np.array([[0.5, 0.5], [0.2, 0.4]])
    _, q, _, _ = maxent_nash(s)
    _, q_dup, _, _ = maxent_nash(np.c_[s, s[:, 0]])
    assert q == pytest.approx([0.5, 0.5]) and q_dup == pytest.approx([0.25, 0.5, 0.25])
    assert (np.c_[s, s[:, 0]] @ q_dup)[1] == pytest.approx((s @ q)[1]) == pytest.approx(0.3)


@pytest.mark.parametrize("seed", range(8))
def test_nash_averaging_is_invariant_to_a_duplicated_counterpart(seed):
    rng = np.random.default_rng(seed)
    s = rng.random((4, 5))
    if seed % 2:
        s = np.round(s * 3) / 3
    dup = np.c_[s, s[:, 2]]  # counterpart 2 twice
    p, q, v, _ = maxent_nash(s)
    p2, q2, v2, _ = maxent_nash(dup)
    assert v2 == pytest.approx(v, abs=1e-9)
    assert p2 == pytest.approx(p, abs=1e-6)  # the policies' equilibrium does not move
    assert dup @ q2 == pytest.approx(s @ q, abs=1e-6)  # nor the Nash values
    assert q2[2] == pytest.approx(q2[5], abs=1e-6)  # the copies share the weight equally
    assert q2[2] + q2[5] == pytest.approx(q[2], abs=1e-6)
    # A duplicated policy, likewise, leaves the counterparts' side alone.
    p3, q3, _, _ = maxent_nash(np.r_[s, s[:1]])
    assert q3 == pytest.approx(q, abs=1e-6) and p3[0] + p3[4] == pytest.approx(p[0], abs=1e-6)


def test_rankings_on_a_run_with_a_duplicated_counterpart():
    """Adding a copy of a counterpart to the panel moves the uniform mean, never Nash averaging."""
    rng = np.random.default_rng(1)
    means = {(p, c): mu for p, row in {"A": [0.9, 0.5, 0.3], "B": [0.4, 0.6, 0.5], "C": [0.7, 0.7, 0.2]}.items()
             for c, mu in zip(["c1", "c2", "c3"], row, strict=True)}
    df = matrix_scores(rng, means, n_scenarios=20, n_seeds=1, sd_scenario=0.1, sd_noise=0.1)
    copy = df[df["counterpart"] == "c3"].assign(counterpart="c3-copy")
    base, dup = rankings(df, metric="policy_score"), rankings(pd_concat(df, copy), metric="policy_score")
    nash = {v.policy: v.value.estimate for v in base.nash.values}
    nash_dup = {v.policy: v.value.estimate for v in dup.nash.values}
    assert nash_dup == pytest.approx(nash, abs=1e-6)
    w = dup.nash.counterpart_weights
    assert w["c3"] + w["c3-copy"] == pytest.approx(base.nash.counterpart_weights["c3"], abs=1e-6)
    uni = {r.policy: r.mean.estimate for r in base.uniform}
    uni_dup = {r.policy: r.mean.estimate for r in dup.uniform}
    assert uni_dup["A"] != pytest.approx(uni["A"], abs=1e-3)


def pd_concat(*frames):
    import pandas as pd

    return pd.concat(frames, ignore_index=True)


def iv(low, high):
    return Interval(estimate=(low + high) / 2, low=low, high=high, method="x", confidence=0.95, n=1, n_clusters=1)


def test_rank_rule():
    ivs = [iv(0.8, 0.9), iv(0.5, 0.7), iv(0.6, 0.75), iv(0.1, 0.2)]
    assert rank_rule(ivs) == [1, 2, 2, 4]
    undefined = Interval(estimate=0.5, low=None, high=None, method="none", confidence=0.95, n=1, n_clusters=1)
    assert rank_rule([ivs[0], undefined]) == [None, None]


def test_uniform_mean_and_normalized_iqm_on_a_known_matrix():
    cells = {"A": [1.0, 0.8, 0.6, 0.2], "B": [0.5, 0.4, 0.6, 0.4]}  # per column c1..c4, every scenario alike
    rows = [dict(policy=p, counterpart=f"c{j + 1}", scenario_id=f"s{i}", policy_score=v)
            for p, vals in cells.items() for j, v in enumerate(vals) for i in range(5)]
    r = rankings(frame(rows), metric="policy_score")
    uni = {x.policy: x for x in r.uniform}
    assert uni["A"].mean.estimate == pytest.approx(0.65) and uni["B"].mean.estimate == pytest.approx(0.475)
    # Normalized by the column best: A = [1, 1, 1, 0.5], B = [0.5, 0.5, 1, 1]; IQM drops one at each end.
    norm = {x.policy: x.iqm.estimate for x in r.normalized}
    assert norm["A"] == pytest.approx(stats.trim_mean([1, 1, 1, 0.5], 0.25)) == pytest.approx(1.0)
    assert norm["B"] == pytest.approx(0.75)
    # Nash: B guarantees 0.4 (its worst columns c2, c4) and A cannot beat that on c4, so the value is
    # 0.4 with B alone. The counterpart side may mix c2 and c4 as long as A stays <= 0.4:
    # 0.8 q2 + 0.2 q4 <= 0.4, i.e. q2 <= 1/3; maximum entropy takes q2 = 1/3, q4 = 2/3.
    assert r.nash.game_value == pytest.approx(0.4)
    assert {v.policy: v.weight for v in r.nash.values}["B"] == pytest.approx(1.0, abs=1e-6)
    w = r.nash.counterpart_weights
    assert (w["c1"], w["c2"], w["c3"], w["c4"]) == pytest.approx((0, 1 / 3, 0, 2 / 3), abs=1e-6)
    assert r.uniform[0].policy == "A" and all(x.rank == 1 or x.rank == 2 for x in r.uniform)


def test_ranks_come_from_paired_comparisons_and_rank_intervals_from_the_bootstrap():
    """The issue's case: three policies whose marginal intervals overlap (a large scenario effect
    shared by all), while the paired differences are clear. The marginal rule gave all three rank 1;
    paired comparisons separate them, and the bootstrap rank intervals are narrow."""
    rng = np.random.default_rng(2)
    means = {("A", "c"): 0.6, ("B", "c"): 0.5, ("C", "c"): 0.4}
    df = matrix_scores(rng, means, n_scenarios=40, n_seeds=1, sd_scenario=2.0, sd_noise=0.05)
    r = rankings(df, metric="policy_score", nash_resamples=20)
    uni = {x.policy: x for x in r.uniform}
    assert rank_rule([uni[p].mean for p in "ABC"]) == [1, 1, 1]  # marginal intervals overlap
    assert [uni[p].rank for p in "ABC"] == [1, 2, 3]
    assert [(uni[p].rank_low, uni[p].rank_high) for p in "ABC"] == [(1, 1), (2, 2), (3, 3)]
    assert "paired" in r.rank_rule


def test_near_copies_are_merged_and_support_probabilities_reported():
    """A column duplicated with an offset of 1e-9 must not move another policy's Nash value (it did
    before: only exact copies were merged)."""
    s = np.array([[0.5, 0.5], [0.2, 0.4]])
    _, q, _, _ = maxent_nash(s)
    _, q_dup, _, _ = maxent_nash(np.c_[s, s[:, 0] + 1e-9])
    assert (np.c_[s, s[:, 0]] @ q_dup)[1] == pytest.approx((s @ q)[1], abs=1e-8)
    rng = np.random.default_rng(3)
    means = {(p, c): mu for p, row in {"A": [0.9, 0.3], "B": [0.3, 0.9], "C": [0.2, 0.2]}.items()
             for c, mu in zip(["c1", "c2"], row, strict=True)}
    r = rankings(matrix_scores(rng, means, n_scenarios=20, n_seeds=1, sd_scenario=0.1, sd_noise=0.1),
                 metric="policy_score", nash_resamples=40)
    support = {v.policy: v.p_support for v in r.nash.values}
    assert support["A"] > 0.9 and support["B"] > 0.9 and support["C"] < 0.1  # C is dominated
    assert all("re-solved" in v.value.method for v in r.nash.values)


@pytest.mark.slow
def test_ranking_intervals_cover_the_truth():
    """Scores mu[policy, column] + u[scenario] + noise, 2 policies x 4 counterparts, 30 scenarios x 2
    seeds. Truth: uniform mean = mean of mu over columns; normalized IQM from mu / column best; Nash
    value = mu @ q* at the population equilibrium q* (the interval re-solves the equilibrium on
    every resample, so it carries the equilibrium's uncertainty). Fails if the pooled coverage
    leaves [0.91, 0.985] or one kind falls below 0.87."""
    mu = {"A": [3.0, 2.0, 2.5, 1.0], "B": [1.5, 2.5, 1.0, 2.0]}
    means = {(p, f"c{j}"): v for p, row in mu.items() for j, v in enumerate(row)}
    m = np.array([mu["A"], mu["B"]])
    truth_uniform = m.mean(axis=1)
    truth_norm = stats.trim_mean(m / m.max(axis=0), 0.25, axis=1)
    rng = np.random.default_rng(8)
    _, q_star, _, _ = maxent_nash(m)
    n_sims, hits = 40, {"uniform": 0, "normalized": 0, "nash": 0}
    for sim in range(n_sims):
        df = matrix_scores(rng, means, n_scenarios=30, n_seeds=2, sd_scenario=1.0, sd_noise=1.0)
        r = rankings(df, metric="policy_score", n_resamples=999, seed=sim, nash_resamples=60)
        for k, p in enumerate(["A", "B"]):
            u = next(x for x in r.uniform if x.policy == p).mean
            n = next(x for x in r.normalized if x.policy == p).iqm
            v = next(x for x in r.nash.values if x.policy == p).value
            hits["uniform"] += u.low <= truth_uniform[k] <= u.high
            hits["normalized"] += n.low <= truth_norm[k] <= n.high
            hits["nash"] += v.low <= m[k] @ q_star <= v.high
    coverage = {k: h / (2 * n_sims) for k, h in hits.items()}
    pooled = sum(hits.values()) / (len(hits) * 2 * n_sims)
    print("ranking coverage:", coverage, "pooled:", pooled)
    # Measured with these seeds: uniform 0.96, normalized 0.91, Nash 0.90. The Nash value is a
    # max-min of cell means, not a smooth statistic, and its bootstrap interval runs a little
    # short of nominal (docs/statistics.md says so); the bound below guards against worse.
    assert 0.91 <= pooled <= 0.985, pooled
    for name, cov in coverage.items():
        assert cov >= 0.87, (name, cov)


def test_a_counterpart_with_only_errors_is_left_out_not_fatal():
    rows = [dict(policy=p, counterpart=c, scenario_id=f"s{i}", success=(i + j) % 3 > 0,
                 status="error" if c == "broken" else "ok")
            for j, p in enumerate(["A", "B"]) for c in ("c1", "c2", "broken") for i in range(6)]
    r = rankings(frame(rows))
    assert r.columns == [("c1", "a"), ("c2", "a")] and r.columns_dropped == [("broken", "a")]
    assert set(r.nash.counterpart_weights) == {"c1", "c2"}
