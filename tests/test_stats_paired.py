"""Paired comparisons: pairing, the choice of test, known p-values, Holm, and coverage and test
size on simulated paired data."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ibrl_bench.errors import UserError
from ibrl_bench.stats.intervals import cluster_bootstrap
from ibrl_bench.stats.paired import compare, paired_difference
from ibrl_bench.stats.resampling import holm, mcnemar, sign_flip_test
from simulate import frame


def test_mcnemar_is_the_exact_binomial_on_discordant_pairs():
    # 10 pairs: A alone succeeds 6 times, B alone once, 3 concordant.
    a = np.array([1, 1, 1, 1, 1, 1, 0, 1, 0, 1])
    b = np.array([0, 0, 0, 0, 0, 0, 1, 1, 0, 1])
    res = mcnemar(a, b)
    assert res.p_value == pytest.approx(stats.binomtest(6, 7, 0.5).pvalue)
    assert res.p_value == pytest.approx(16 / 128)  # 2 * P(X >= 6), X ~ Bin(7, 1/2)
    assert "7 discordant" in res.test and res.n == 10
    assert mcnemar(a, a).p_value == 1.0


def test_sign_flip_test_exact_p_value():
    # 4 scenarios, all differences positive: of the 16 sign patterns only all-plus and all-minus
    # are as extreme, so p = 2/16.
    res = sign_flip_test(np.array([1.0, 2.0, 3.0, 4.0]), n=8)
    assert res.p_value == pytest.approx(2 / 16)
    assert "exact" in res.test and res.n_clusters == 4 and res.n == 8
    assert sign_flip_test(np.zeros(5), n=5).p_value == 1.0
    assert sign_flip_test(np.array([]), n=0).p_value is None


def test_holm_matches_the_textbook_example():
    # p = 0.01, 0.04, 0.03, 0.005 (m = 4): sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1, made monotone.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, None, 0.01]) == [pytest.approx(0.5), None, pytest.approx(0.02)]
    assert holm([0.9, 0.8]) == [1.0, 1.0]  # 0.8 x 2 caps at 1, and the larger p cannot be adjusted below it
    assert holm([0.04, 0.3]) == pytest.approx([0.08, 0.3])


def two_policies(rows_a, rows_b, **extra):
    rows = [dict(policy="A", counterpart="c", scenario_id=f"s{i}", success=bool(x), **extra) for i, x in enumerate(rows_a)]
    rows += [dict(policy="B", counterpart="c", scenario_id=f"s{i}", success=bool(x), **extra) for i, x in enumerate(rows_b)]
    return frame(rows)


def test_compare_pairs_by_game_and_uses_mcnemar_with_one_pair_per_scenario():
    a = [1] * 12 + [0] * 3 + [1] * 5
    b = [0] * 12 + [0] * 3 + [1] * 5
    c = compare(two_policies(a, b), "A", "B")
    assert c.overall.difference.estimate == pytest.approx(12 / 20)
    assert c.overall.test.test.startswith("exact McNemar")
    assert c.overall.test.p_value == pytest.approx(stats.binomtest(12, 12).pvalue)
    assert c.overall.difference.method.startswith("paired ")
    assert c.overall.a.estimate == pytest.approx(17 / 20) and c.overall.b.estimate == pytest.approx(5 / 20)
    assert len(c.by_cell) == 1 and c.n_unpaired == 0


def test_several_seeds_or_scores_use_the_permutation_test_over_scenarios():
    rows = [dict(policy=p, counterpart="c", scenario_id=f"s{i}", seed=k, success=(p == "A") or k == 0)
            for p in "AB" for i in range(8) for k in range(2)]
    c = compare(frame(rows), "A", "B")
    assert c.overall.test.test.startswith("paired permutation test over 8 scenarios")
    assert c.overall.test.p_value == pytest.approx(2 / 256)  # every scenario +0.5: exact, 2 of 2^8
    assert c.overall.difference.estimate == pytest.approx(0.5)
    score = compare(frame(rows), "A", "B", metric="policy_score")
    assert score.overall.test.test.startswith("paired permutation")


def test_unpaired_and_error_episodes_are_left_out():
    a = [1, 1, 0, 1, 1]
    b = [0, 1, 0, 1, 0]
    df = two_policies(a, b)
    df.loc[(df["policy"] == "B") & (df["scenario_id"] == "s0"), "status"] = "error"
    c = compare(df, "A", "B")
    assert c.overall.test.n == 4 and c.n_unpaired == 1
    assert c.overall.difference.estimate == pytest.approx((0 + 0 + 0 + 1) / 4)


def test_compare_counterparts_pairs_by_policy():
    rows = [dict(policy=p, counterpart=c, scenario_id=f"s{i}", success=(c == "easy") or i % 2 == 0)
            for p in ("p1", "p2") for c in ("easy", "hard") for i in range(10)]
    c = compare(frame(rows), "easy", "hard", kind="counterpart")
    assert c.overall.difference.estimate == pytest.approx(0.5)
    assert {d.scope for d in c.by_cell} == {"p1 in role a", "p2 in role a"}


def test_bad_requests_are_user_errors():
    df = two_policies([1, 0], [0, 1])
    with pytest.raises(UserError, match="not in the run"):
        compare(df, "A", "Z")
    with pytest.raises(UserError, match="two different"):
        compare(df, "A", "A")
    with pytest.raises(UserError, match="unknown metric 'nope'"):
        compare(df, "A", "B", metric="nope")


@pytest.mark.slow
def test_paired_interval_coverage_and_test_size():
    """Known truth, paired and clustered.

    - Binary, one pair per scenario: p_s ~ Beta(2, 2); A succeeds with probability p_s, B with p_s^2.
      True difference E[p] - E[p^2] = 0.5 - 0.3 = 0.2.
    - Scores, 3 seeds per scenario: y = u_s + 0.3 (A only) + noise, u_s ~ N(0, 1) shared by A and B;
      true difference 0.3.
    - Null (A and B alike given the scenario): McNemar and the permutation test reject at about
      5% or less.
    The interval is `paired_difference`'s: the cluster bootstrap of the paired differences.
    """
    rng = np.random.default_rng(77)
    n_sims, k = 300, 40
    cover_bin = cover_score = reject_mc = reject_perm = 0
    scen1 = np.array([f"s{i}" for i in range(k)])
    scen3 = np.repeat(scen1, 3)
    for sim in range(n_sims):
        p = rng.beta(2, 2, k)
        ya, yb = (rng.random(k) < p).astype(float), (rng.random(k) < p**2).astype(float)
        iv = cluster_bootstrap(ya - yb, scen1, n_resamples=999, seed=sim)
        cover_bin += iv.low <= 0.2 <= iv.high

        u = np.repeat(rng.normal(size=k), 3)
        sa, sb = u + 0.3 + rng.normal(size=3 * k), u + rng.normal(size=3 * k)
        iv = cluster_bootstrap(sa - sb, scen3, n_resamples=999, seed=sim)
        cover_score += iv.low <= 0.3 <= iv.high

        y0a, y0b = (rng.random(k) < p).astype(float), (rng.random(k) < p).astype(float)
        reject_mc += mcnemar(y0a, y0b).p_value < 0.05
        s0a, s0b = u + rng.normal(size=3 * k), u + rng.normal(size=3 * k)
        per = (s0a - s0b).reshape(k, 3).mean(axis=1)
        reject_perm += sign_flip_test(per, n=3 * k, n_resamples=999, seed=sim).p_value < 0.05
    cov_bin, cov_score = cover_bin / n_sims, cover_score / n_sims
    size_mc, size_perm = reject_mc / n_sims, reject_perm / n_sims
    print(f"paired coverage: binary {cov_bin:.3f}, scores {cov_score:.3f}; size: McNemar {size_mc:.3f}, "
          f"permutation {size_perm:.3f}")
    # Measured with these seeds: binary 0.960, scores 0.943; size McNemar 0.023 (exact tests are
    # conservative), permutation 0.053. Binomial noise of 300 draws: +-0.013 around 0.95.
    assert 0.91 <= cov_bin <= 0.98, cov_bin
    assert 0.91 <= cov_score <= 0.98, cov_score
    assert size_mc <= 0.07 and size_perm <= 0.08, (size_mc, size_perm)
    # The same interval, as compare() reports it:
    d = paired_difference(ya, yb, scen1, True, "all", n_resamples=999)
    assert d.difference.method == "paired " + cluster_bootstrap(ya - yb, scen1, n_resamples=999).method
    assert d.test.test.startswith("exact McNemar")
