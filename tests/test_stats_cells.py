"""Metrics of one cross-play cell: denominators, error exclusion, clustering."""

from __future__ import annotations

import pandas as pd
import pytest

from ibrl_bench.stats.cells import cell_counts, cell_metrics

KEYS = {"agreement", "success_at_1", "policy_score", "counterpart_score", "pareto_optimal", "invalid",
        "policy_invalid", "max_turns"}


def episode(scenario: str, seed: int = 0, status: str = "ok", agreement: bool = True,
            score: float = 5.0, other: float = 5.0, pareto: bool | None = True,
            violated: bool = False) -> dict:
    """One row of the episode table; a non-agreement has no Pareto verdict."""
    return {
        "scenario_id": scenario, "seed": seed, "status": status, "agreement": agreement,
        "success": agreement, "policy_score": score, "counterpart_score": other,
        "m_pareto_optimal": pareto if agreement else None, "policy_violated": violated,
    }


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def test_error_episodes_are_excluded_not_failures():
    rows = [episode(f"s{i}") for i in range(10)]
    rows += [episode(f"s{i}", seed=1, status="error", agreement=False, score=0.0, other=0.0)
             for i in range(5)]
    df = frame(rows)
    m = cell_metrics(df)
    assert set(m) == KEYS
    assert m["agreement"].estimate == 1.0   # not 10/15
    assert m["agreement"].n == 10
    assert m["policy_score"].estimate == 5.0
    assert cell_counts(df) == {"n_episodes": 15, "n_errors": 5, "n_scored": 10,
                               "n_scenarios": 10, "n_scenarios_scored": 10}


def test_all_errors_and_empty_give_undefined_estimates():
    df = frame([episode("s1", status="error", agreement=False),
                episode("s2", status="error", agreement=False)])
    for data in (df, df.iloc[0:0]):
        m = cell_metrics(data)
        assert set(m) == KEYS
        assert all(iv.estimate is None and iv.low is None for iv in m.values())
        assert all(str(iv) == "n/a" for iv in m.values())
    assert cell_counts(df)["n_scored"] == 0 and cell_counts(df)["n_scenarios_scored"] == 0


def test_pareto_is_among_agreements_only():
    rows = [episode("s1", pareto=True), episode("s2", pareto=True), episode("s3", pareto=False),
            episode("s4", pareto=True)]
    rows += [episode(f"n{i}", agreement=False, status="max_turns") for i in range(4)]
    m = cell_metrics(frame(rows))
    assert m["pareto_optimal"].estimate == pytest.approx(3 / 4)   # not 3/8
    assert m["pareto_optimal"].n == 4
    assert m["agreement"].estimate == pytest.approx(4 / 8)
    assert m["max_turns"].estimate == pytest.approx(4 / 8)


def test_policy_invalid_is_distinguished_from_invalid():
    rows = [
        episode("s1", status="invalid", agreement=False, violated=True),   # policy broke it
        episode("s2", status="invalid", agreement=False, violated=False),  # counterpart did
        episode("s3", status="invalid", agreement=False, violated=False),
        episode("s4"),
    ]
    m = cell_metrics(frame(rows))
    assert m["invalid"].estimate == pytest.approx(3 / 4)
    assert m["policy_invalid"].estimate == pytest.approx(1 / 4)
    assert m["max_turns"].estimate == 0.0


def test_one_seed_per_scenario_is_clopper_pearson_several_use_the_effective_n():
    one = frame([episode(f"s{i}", agreement=i % 3 != 0) for i in range(12)])
    assert cell_metrics(one)["agreement"].method == "Clopper-Pearson (one episode per scenario)"
    flat = cell_metrics(one)["policy_score"]  # every episode scores the same: no spread, no zero-width interval
    assert flat.low is None and flat.method.startswith("none (every scenario mean is equal")

    several = frame([episode(f"s{i}", seed=k, agreement=k < i % 4, score=float(i + k))
                     for i in range(12) for k in range(3)])
    m = cell_metrics(several)
    assert m["agreement"].method.startswith("Clopper-Pearson at Kish effective n")
    assert m["policy_score"].method == "t on scenario means (scenarios)"
    assert (m["agreement"].n, m["agreement"].n_clusters) == (36, 12)
    assert cell_metrics(several) == m


def test_estimate_is_mean_of_scenario_means_with_unequal_counts():
    # s1: three scored seeds, 1 agreement (1/3); s2: one scored seed, agreed (1);
    # s3: two scored seeds, both agreed (1), plus an error that must not dilute it.
    rows = [
        episode("s1", 0, agreement=True, score=6.0),
        episode("s1", 1, agreement=False, score=0.0),
        episode("s1", 2, agreement=False, score=0.0),
        episode("s2", 0, agreement=True, score=9.0),
        episode("s3", 0, agreement=True, score=3.0),
        episode("s3", 1, agreement=True, score=5.0),
        episode("s3", 2, status="error", agreement=False, score=0.0),
    ]
    m = cell_metrics(frame(rows))
    # Mean of scenario means, not the pooled 4/6.
    assert m["agreement"].estimate == pytest.approx((1 / 3 + 1 + 1) / 3)
    assert m["success_at_1"].estimate == pytest.approx((1 / 3 + 1 + 1) / 3)
    assert m["policy_score"].estimate == pytest.approx((2.0 + 9.0 + 4.0) / 3)  # 5.0, pooled 23/6
    assert m["policy_score"].n == 6 and m["policy_score"].n_clusters == 3
    assert m["policy_score"].method.startswith("t on scenario means")


def test_success_is_read_from_its_own_column():
    rows = [episode(f"s{i}") for i in range(4)]
    rows[0]["success"] = False   # e.g. TeleSales: a deal that is not a valid sale
    m = cell_metrics(frame(rows))
    assert m["agreement"].estimate == 1.0
    assert m["success_at_1"].estimate == pytest.approx(3 / 4)


def test_bad_tables_fail_clearly():
    df = frame([episode("s1")])
    with pytest.raises(ValueError, match="policy_violated"):
        cell_metrics(df.drop(columns=["policy_violated"]))
    bad = df.assign(status="timeout")
    with pytest.raises(ValueError, match="timeout"):
        cell_metrics(bad)


def test_numeric_domain_metrics_are_means_over_episodes_where_defined():
    rows = [episode("s1"), episode("s2"), episode("s3", agreement=False), episode("s4", status="error")]
    for row, margin in zip(rows, [0.2, 0.4, None, 9.0], strict=True):
        row["m_margin"] = margin
    m = cell_metrics(frame(rows))
    assert m["margin"].estimate == pytest.approx(0.3)  # the error row and the undefined one are out
    assert m["margin"].n == 2 and m["margin"].method.startswith("t on scenario means")
