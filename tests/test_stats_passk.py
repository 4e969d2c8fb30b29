"""pass@k and pass^k: the unbiased estimators against brute-force enumeration, and coverage."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from scipy.special import beta as beta_fn

from ibrl_bench.errors import UserError
from ibrl_bench.stats.passk import pass_at_k, pass_hat_k, passk_table
from simulate import frame


@pytest.mark.parametrize("n", range(1, 8))
def test_estimators_equal_brute_force_over_every_k_subset(n):
    """For every outcome vector of n seeds: pass@k is the share of k-subsets with a success, pass^k
    the share of k-subsets that are all successes."""
    for outcomes in itertools.product([0, 1], repeat=n):
        c = sum(outcomes)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(outcomes, k))
            any_ok = Fraction(sum(any(s) for s in subsets), len(subsets))
            all_ok = Fraction(sum(all(s) for s in subsets), len(subsets))
            assert pass_at_k(n, c, k) == pytest.approx(float(any_ok), abs=1e-15)
            assert pass_hat_k(n, c, k) == pytest.approx(float(all_ok), abs=1e-15)


def test_pass_at_1_is_success_rate_and_bad_arguments_fail():
    assert pass_at_k(5, 2, 1) == pass_hat_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 0, 3) == 0.0 and pass_hat_k(5, 5, 3) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_hat_k(3, 1, 4)


def test_table_averages_over_scenarios_and_skips_short_ones():
    # s0: 3 of 4 seeds succeed; s1: 1 of 4; s2: only 2 scored seeds (2 errors), both succeed.
    rows = [dict(policy="P", counterpart="C", scenario_id="s0", seed=k, success=k < 3) for k in range(4)]
    rows += [dict(policy="P", counterpart="C", scenario_id="s1", seed=k, success=k == 0) for k in range(4)]
    rows += [dict(policy="P", counterpart="C", scenario_id="s2", seed=k, success=True,
                  status="ok" if k < 2 else "error") for k in range(4)]
    table = {r.k: r for r in passk_table(frame(rows))}
    assert sorted(table) == [1, 2, 3, 4]
    assert table[1].pass_at_k.estimate == pytest.approx((3 / 4 + 1 / 4 + 1) / 3)
    assert table[2].pass_at_k.estimate == pytest.approx((pass_at_k(4, 3, 2) + pass_at_k(4, 1, 2) + 1) / 3)
    assert table[2].pass_hat_k.estimate == pytest.approx((pass_hat_k(4, 3, 2) + 0 + 1) / 3)
    # k = 3 needs 3 scored seeds: s2 drops out.
    assert table[3].pass_at_k.n_clusters == 2
    assert table[3].pass_at_k.estimate == pytest.approx((1.0 + pass_at_k(4, 1, 3)) / 2)
    assert table[2].pass_at_k.method.endswith("(scenarios)") and table[2].pass_at_k.n == 10
    with pytest.raises(UserError, match="score"):
        passk_table(frame(rows), metric="policy_score")


@pytest.mark.slow
def test_intervals_cover_the_population_values():
    """p_s ~ Beta(1, 1.5), 4 seeds per scenario, 60 scenarios. Truth: pass@2 = 1 - E[(1-p)^2] =
    1 - B(1, 3.5)/B(1, 1.5); pass^2 = E[p^2] = B(3, 1.5)/B(1, 1.5)."""
    a, b = 1.0, 1.5
    truth_at = 1 - beta_fn(a, b + 2) / beta_fn(a, b)
    truth_hat = beta_fn(a + 2, b) / beta_fn(a, b)
    rng = np.random.default_rng(5)
    n_sims, hits_at, hits_hat = 200, 0, 0
    for _ in range(n_sims):
        p = rng.beta(a, b, 60)
        ok = rng.random((60, 4)) < p[:, None]
        rows = [dict(policy="P", counterpart="C", scenario_id=f"s{i}", seed=k, success=bool(ok[i, k]))
                for i in range(60) for k in range(4)]
        (row,) = passk_table(frame(rows), ks=[2])
        hits_at += row.pass_at_k.low <= truth_at <= row.pass_at_k.high
        hits_hat += row.pass_hat_k.low <= truth_hat <= row.pass_hat_k.high
    cov_at, cov_hat = hits_at / n_sims, hits_hat / n_sims
    print(f"pass@2 coverage {cov_at:.3f}, pass^2 coverage {cov_hat:.3f}")
    # Fails if either covers less than 0.93 (200 draws: +-0.015 of binomial noise).
    assert cov_at >= 0.93 and cov_hat >= 0.93, (cov_at, cov_hat)
