"""Paired comparisons: pairing by game, Holm across cells, TOST, and the interval/test agreement rule.
Coverage of the paired intervals is in test_stats_coverage.py."""

from __future__ import annotations

import numpy as np
import pytest

from ibrl_bench.errors import UserError
from ibrl_bench.stats.intervals import holm, paired_interval
from ibrl_bench.stats.paired import compare
from simulate import frame


def test_holm_matches_the_textbook_example():
    # p = 0.01, 0.04, 0.03, 0.005 (m = 4): sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1, made monotone.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, None, 0.01]) == [pytest.approx(0.5), None, pytest.approx(0.02)]
    assert holm([0.9, 0.8]) == [1.0, 1.0]  # 0.8 x 2 caps at 1, and the larger p cannot be adjusted below it
    assert holm([0.04, 0.3]) == pytest.approx([0.08, 0.3])


def two_policies(rows_a, rows_b, **extra):
    rows = [dict(policy="A", counterpart="c", scenario_id=f"s{i}", success=bool(x), **extra)
            for i, x in enumerate(rows_a)]
    rows += [dict(policy="B", counterpart="c", scenario_id=f"s{i}", success=bool(x), **extra)
             for i, x in enumerate(rows_b)]
    return frame(rows)


def test_compare_pairs_by_game_and_the_p_value_agrees_with_the_interval():
    a = [1] * 12 + [0] * 3 + [1] * 5
    b = [0] * 12 + [0] * 3 + [1] * 5
    c = compare(two_policies(a, b), "A", "B")
    assert c.overall.difference.estimate == pytest.approx(12 / 20)
    assert c.overall.difference.method.startswith("paired MOVER")
    assert c.overall.a.estimate == pytest.approx(17 / 20) and c.overall.b.estimate == pytest.approx(5 / 20)
    assert len(c.by_cell) == 1 and c.n_unpaired == 0
    assert c.overall.difference.low > 0 and c.overall.test.p_value < 0.05


def test_the_issue_case_five_discordant_episodes_in_three_scenarios():
    """Five discordant episodes (A wins) in three scenarios of two seeds, the rest ties: the old
    bootstrap interval excluded 0 beside an exact p of 0.25. Now p is the interval inverted, so
    both say the same thing, whatever it is; and the rule holds at every level."""
    rows = []
    wins = {("s0", 0), ("s0", 1), ("s1", 0), ("s1", 1), ("s2", 0)}
    for i in range(3):
        for k in range(2):
            rows.append(dict(policy="A", counterpart="c", scenario_id=f"s{i}", seed=k, success=True))
            rows.append(dict(policy="B", counterpart="c", scenario_id=f"s{i}", seed=k,
                             success=(f"s{i}", k) not in wins))
    c = compare(frame(rows), "A", "B")
    p, iv = c.overall.test.p_value, c.overall.difference
    assert (p < 0.05) == iv.excludes(0.0)
    for level in (0.5, 0.8, 0.9, 0.95, 0.99):
        c2 = compare(frame(rows), "A", "B", confidence=level)
        assert (c2.overall.test.p_value < 1 - level) == c2.overall.difference.excludes(0.0), level


@pytest.mark.slow
@pytest.mark.parametrize("binary", [True, False])
def test_interval_and_p_value_agree_on_random_data(binary):
    """The agreement rule on 40 random data sets per kind, at 95% (fixed seed): it would fail if
    the p-value came from any test other than the interval inverted (a McNemar or sign-flip p
    beside a bootstrap interval disagreed on about 1 in 20 such draws)."""
    rng = np.random.default_rng(5)
    disagree = 0
    for _ in range(40):
        k = int(rng.integers(3, 25))
        scen = np.repeat(np.arange(k), 2)
        if binary:
            ya = (rng.random(2 * k) < 0.7).astype(float)
            yb = (rng.random(2 * k) < rng.uniform(0.4, 0.9)).astype(float)
        else:
            ya, yb = rng.normal(0.3, 1, 2 * k), rng.normal(0, 1, 2 * k)
        r = paired_interval(ya, yb, scen, binary)
        if r.test.p_value is None:
            continue
        disagree += (r.test.p_value < 0.05) != r.difference.excludes(0.0)
    assert disagree == 0


def test_paired_t_p_value_is_the_t_test():
    from scipy import stats

    rng = np.random.default_rng(2)
    ya, yb = rng.normal(0.2, 1, 40), rng.normal(0, 1, 40)
    scen = np.repeat(np.arange(20), 2)
    r = paired_interval(ya, yb, scen, False)
    per = (ya - yb).reshape(20, 2).mean(axis=1)
    assert r.test.p_value == pytest.approx(stats.ttest_1samp(per, 0).pvalue, rel=1e-6)
    lo, hi = stats.t.interval(0.95, 19, loc=per.mean(), scale=stats.sem(per))
    assert (r.difference.low, r.difference.high) == (pytest.approx(lo, abs=1e-9), pytest.approx(hi, abs=1e-9))


def test_no_discordant_pair_is_not_a_zero_width_interval():
    a = [1] * 15 + [0] * 5
    c = compare(two_policies(a, a), "A", "B")
    iv = c.overall.difference
    assert iv.estimate == 0 and iv.low < 0 < iv.high


def test_holm_across_cells_and_tost():
    rows = [dict(policy=p, counterpart=cp, scenario_id=f"s{i}", success=(p == "A" and cp == "c1") or i % 3 == 0)
            for p in "AB" for cp in ("c1", "c2", "c3") for i in range(30)]
    c = compare(frame(rows), "A", "B", margin=0.3)
    raw = [d.test.p_value for d in c.by_cell]
    assert [d.p_holm for d in c.by_cell] == pytest.approx(holm(raw))
    assert c.by_cell[0].p_holm < 0.05  # c1: A wins the 20 scenarios B loses
    eq = {d.scope: d.equivalence for d in c.by_cell}
    # c2, c3: identical play, within +-0.3; c1: a difference of 2/3, far outside it.
    assert eq["vs c2, role a"].equivalent and eq["vs c3, role a"].equivalent
    assert not eq["vs c1, role a"].equivalent
    assert eq["vs c2, role a"].interval.confidence == pytest.approx(0.9)


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


