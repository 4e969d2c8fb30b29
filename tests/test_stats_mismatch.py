"""Static-counterpart mismatch and method vs method on constructed matrices with known answers
(including one where raw gaps and DiD disagree), the refusal of a training counterpart in the
panel, Holm and TOST, and coverage of the intervals on simulated data."""

from __future__ import annotations

import numpy as np
import pytest

from ibrl_bench.errors import UserError
from ibrl_bench.stats.intervals import holm
from ibrl_bench.stats.mismatch import gap_matrix, mismatch, mismatch_many
from simulate import frame, matrix_scores

# Successes out of 8 scenarios (one seed): the first n scenarios succeed.
KNOWN = {
    ("P", "C"): 8, ("P", "H1"): 4, ("P", "H2"): 2,      # P: 1.0 vs C, 0.375 vs the held-out panel
    ("P0", "C"): 6, ("P0", "H1"): 4, ("P0", "H2"): 4,   # P0: 0.75 vs C, 0.5 vs the held-out panel
    ("Q", "C"): 8, ("Q", "H1"): 7, ("Q", "H2"): 7,      # Q: barely any gap
}


def known_matrix() -> pd.DataFrame:  # noqa: F821
    return frame([dict(policy=p, counterpart=c, scenario_id=f"s{i}", success=i < n)
                  for (p, c), n in KNOWN.items() for i in range(8)])


def test_gap_per_heldout_worst_and_did_on_a_known_matrix():
    m = mismatch(known_matrix(), "P", "C", reference="P0")
    assert m.heldout == ["H1", "H2"]
    assert m.gap.a.estimate == 1.0 and m.gap.b.estimate == pytest.approx(0.375)
    assert m.gap.difference.estimate == pytest.approx(0.625)
    assert m.proportional_loss.estimate == pytest.approx(0.625)  # 0.625 / 1.0
    gaps = {h.scope: h.difference.estimate for h in m.per_heldout}
    assert gaps == {"H1": pytest.approx(0.5), "H2": pytest.approx(0.75)}
    assert m.worst == "H2"
    assert m.reference_gap.difference.estimate == pytest.approx(0.25)  # 0.75 - 0.5
    # (1.0 - 0.75) - (0.375 - 0.5) = 0.375: P gained 0.25 against C but lost 0.125 on the panel.
    assert m.did.estimate == pytest.approx(0.375)
    assert m.view == "crossed" and m.did.method.startswith("two-way bootstrap")
    assert (m.n_games, m.n_dropped) == (8, 0)
    assert m.per_heldout[0].difference.method.startswith("paired MOVER")
    assert [h.p_holm for h in m.per_heldout] == pytest.approx(holm([h.test.p_value for h in m.per_heldout]))
    panel = mismatch(known_matrix(), "P", "C", reference="P0", view="panel")
    assert panel.did.estimate == pytest.approx(0.375) and panel.did.method.startswith("paired t")
    assert panel.gap.difference.method.startswith("paired MOVER")
    for iv in (m.gap.difference, m.proportional_loss, m.did, *(h.difference for h in m.per_heldout)):
        assert iv.confidence == 0.95 and iv.n == 8 and iv.n_clusters == 8 and iv.method


def test_a_merely_easy_training_counterpart_gives_did_zero():
    """P gains exactly as much as the reference everywhere: a big gap, but no overfitting."""
    rows = []
    for p, shift in (("P", 2), ("P0", 0)):
        for c, base in (("C", 5), ("H1", 1), ("H2", 2)):
            rows += [dict(policy=p, counterpart=c, scenario_id=f"s{i}", policy_score=base + shift + i % 3)
                     for i in range(12)]
    m = mismatch(frame(rows), "P", "C", reference="P0", metric="policy_score")
    assert m.gap.difference.estimate == pytest.approx(3.5)  # 5 - mean(1, 2)
    assert m.did.estimate == pytest.approx(0.0, abs=1e-12)


def test_games_missing_an_episode_are_dropped_as_a_whole():
    df = known_matrix()
    df.loc[(df["policy"] == "P") & (df["counterpart"] == "H1") & (df["scenario_id"] == "s7"), "status"] = "error"
    m = mismatch(df, "P", "C")
    assert (m.n_games, m.n_dropped) == (7, 1)
    assert m.gap.b.estimate == pytest.approx((4 / 7 + 2 / 7) / 2)


def test_holm_across_policies():
    r = mismatch_many(known_matrix(), ["P", "Q"], "C", reference="P0")
    assert r.holm_over == "difference-in-differences"
    raw = [m.did_test.p_value for m in r.results]
    assert [m.p_holm for m in r.results] == pytest.approx(holm(raw))
    single = mismatch_many(known_matrix(), ["P"], "C")
    assert single.holm_over is None and single.results[0].p_holm is None
    gap = mismatch_many(known_matrix(), ["P", "Q"], "C")
    assert gap.holm_over == "gap"


def test_gap_matrix_matches_mismatch():
    df = known_matrix()
    cells = {(g.policy, g.counterpart): g.gap for g in gap_matrix(df)}
    assert cells[("P", "C")].estimate == pytest.approx(0.625)
    assert cells[("P", "H2")].estimate == pytest.approx(0.25 - (1 + 0.5) / 2)
    assert cells[("P", "C")].method.startswith("paired")


def test_bad_requests_are_user_errors():
    df = known_matrix()
    with pytest.raises(UserError, match="not in the run"):
        mismatch(df, "nope", "C")
    with pytest.raises(UserError, match="counterpart X is not in the run"):
        mismatch(df, "P", "X")
    with pytest.raises(UserError, match="the policy itself"):
        mismatch(df, "P", "C", reference="P")
    only_c = df[df["counterpart"] == "C"]
    with pytest.raises(UserError, match="no held-out counterpart"):
        mismatch(only_c, "P", "C")


@pytest.mark.slow
def test_mismatch_intervals_cover_the_truth():
    """Scores y = mu[policy, counterpart] + u[scenario] + noise; u ~ N(0, 1) shared by every cell,
    noise N(0, 1); 40 scenarios x 2 seeds. Truth: gap(P) = 2 - (1 + 0.5)/2 = 1.25; proportional
    loss 1.25 / 2 = 0.625; gap vs H2 1.5; DiD = (2 - 1.5) - (0.75 - 1) = 0.75. The counterparts
    are fixed here, so the panel view is the one whose truth this is."""
    means = {("P", "C"): 2.0, ("P", "H1"): 1.0, ("P", "H2"): 0.5,
             ("P0", "C"): 1.5, ("P0", "H1"): 1.0, ("P0", "H2"): 1.0}
    truth = {"gap": 1.25, "loss": 0.625, "h2": 1.5, "did": 0.75}
    rng = np.random.default_rng(99)
    n_sims = 40
    hits = dict.fromkeys(truth, 0)
    for _ in range(n_sims):
        df = matrix_scores(rng, means, n_scenarios=40, n_seeds=2)
        m = mismatch(df, "P", "C", reference="P0", metric="policy_score", view="panel")
        got = {"gap": m.gap.difference, "loss": m.proportional_loss, "h2": m.per_heldout[1].difference, "did": m.did}
        for name, iv in got.items():
            hits[name] += iv.low <= truth[name] <= iv.high
    coverage = {k: v / n_sims for k, v in hits.items()}
    pooled = sum(hits.values()) / (len(hits) * n_sims)
    print("mismatch coverage:", coverage, "pooled:", pooled)
    # One kind alone, over 40 draws, has +-0.035 of binomial noise: the pooled 160 intervals carry
    # the claim, each kind only guards against a gross failure.
    assert 0.91 <= pooled <= 0.985, pooled
    for name, cov in coverage.items():
        assert cov >= 0.85, (name, cov)


def test_a_counterpart_with_only_errors_is_named():
    df = known_matrix()
    df.loc[df["counterpart"] == "H2", "status"] = "error"
    with pytest.raises(UserError, match="no scored episode against H2.*--heldout"):
        mismatch(df, "P", "C")
    m = mismatch(df, "P", "C", heldout=["H1"])
    assert m.heldout == ["H1"] and m.gap.difference.estimate == pytest.approx(0.5)


# Method vs method. Successes out of 10 scenarios (one seed; the first n succeed). X trained
# against CX, Y against CY, R the common reference; the panel is H1, H2.
#   X: gap 0.9 - 0.4 = 0.5; reference gap on CX 0.5 - 0.4 = 0.1... DiD_X = (0.9 - 0.5) - (0.4 - 0.4) = 0.4
#   Y: gap 1.0 - 0.6 = 0.4; DiD_Y = (1.0 - 0.9) - (0.6 - 0.4) = -0.1
#   DiD_X - DiD_Y = 0.5, raw gap difference 0.1.
METHODS = {
    ("X", "CX"): 9, ("X", "H1"): 4, ("X", "H2"): 4, ("X", "CY"): 0,
    ("Y", "CY"): 10, ("Y", "H1"): 6, ("Y", "H2"): 6, ("Y", "CX"): 0,
    ("R", "CX"): 5, ("R", "CY"): 9, ("R", "H1"): 4, ("R", "H2"): 4,
}


def methods_matrix():
    return frame([dict(policy=p, counterpart=c, scenario_id=f"s{i}", success=i < n)
                  for (p, c), n in METHODS.items() for i in range(10)])


@pytest.mark.parametrize("view", ["crossed", "panel"])
def test_method_vs_method_did_on_a_known_matrix(view):
    r = mismatch_many(methods_matrix(), methods=[("X", "CX"), ("Y", "CY")], reference="R", view=view)
    assert r.heldout == ["H1", "H2"]  # neither training counterpart is held out
    by = {m.policy: m for m in r.results}
    assert by["X"].gap.difference.estimate == pytest.approx(0.5)
    assert by["Y"].gap.difference.estimate == pytest.approx(0.4)
    assert by["X"].did.estimate == pytest.approx(0.4) and by["Y"].did.estimate == pytest.approx(-0.1)
    (c,) = r.comparisons
    assert (c.a, c.b) == ("X", "Y")
    assert c.did_difference.estimate == pytest.approx(0.5)
    assert c.raw_gap_difference.estimate == pytest.approx(0.1)
    assert c.did_difference.defined and c.test.p_value is not None
    assert (c.test.p_value < 0.05) == c.did_difference.excludes(0.0)
    assert r.holm_over == "difference-in-differences"
    assert any(n.startswith("raw gap difference") for n in r.notes)


def test_raw_gaps_and_did_disagree_when_training_counterparts_differ_in_difficulty():
    """X trained against an easy counterpart and learned nothing specific to it (it gained +1
    everywhere); Y trained against a hard one and gained +2 against it alone. Raw gaps say X
    overfits more (3 vs 1); the DiDs say Y does (0 vs 2), and the paired difference of DiDs
    excludes 0 on the other side. Scores: base[counterpart] + gain + scenario effect + noise."""
    rng = np.random.default_rng(7)
    base = {"CX": 5.0, "CY": 1.0, "H1": 2.0, "H2": 2.5, "H3": 1.5}
    gain = {"X": {"CX": 1, "H1": 1, "H2": 1, "H3": 1, "CY": 1}, "Y": {"CY": 2}, "R": {}}
    u = rng.normal(0, 1, 30)
    rows = [dict(policy=p, counterpart=c, scenario_id=f"s{i}",
                 policy_score=base[c] + gain[p].get(c, 0) + u[i] + rng.normal(0, 0.3))
            for p in gain for c in base for i in range(30)]
    r = mismatch_many(frame(rows), methods=[("X", "CX"), ("Y", "CY")], reference="R", metric="policy_score",
                      view="panel")
    (c,) = r.comparisons
    assert c.raw_gap_difference.estimate == pytest.approx(2.0, abs=0.3) and c.raw_gap_difference.low > 0
    assert c.did_difference.estimate == pytest.approx(-2.0, abs=0.3) and c.did_difference.high < 0


def test_a_training_counterpart_in_the_panel_is_refused_unless_asked():
    df = methods_matrix()
    with pytest.raises(UserError, match="CX is the training counterpart CX.*--include-train-in-panel"):
        mismatch_many(df, methods=[("X", "CX")], heldout=["CX", "H1"])
    with pytest.raises(UserError, match="H1 is the same card as the training counterpart CX"):
        mismatch_many(df, methods=[("X", "CX")], heldout=["H1", "H2"], identities={"CX": "abc", "H1": "abc"})
    ok = mismatch_many(df, methods=[("X", "CX")], heldout=["H1", "H2"], identities={"CX": "abc", "H1": "abc"},
                       include_train_in_panel=True)
    assert ok.heldout == ["H1", "H2"]


def test_crossed_view_is_wider_when_counterparts_disagree_and_tost():
    """Per-counterpart gaps of opposite signs: fixing the panel gives a narrow interval around the
    mean gap, while resampling counterparts shows how little the panel says about others."""
    rng = np.random.default_rng(11)
    base = {"C": 1.0, "H1": 0.2, "H2": 1.8, "H3": 0.3, "H4": 1.7, "H5": 1.0}
    rows = [dict(policy="P", counterpart=c, scenario_id=f"s{i}", policy_score=mu + rng.normal(0, 0.2))
            for c, mu in base.items() for i in range(30)]
    crossed = mismatch(frame(rows), "P", "C", metric="policy_score", view="crossed")
    panel = mismatch(frame(rows), "P", "C", metric="policy_score", view="panel", margin=0.3)
    wc = crossed.gap.difference.high - crossed.gap.difference.low
    wp = panel.gap.difference.high - panel.gap.difference.low
    assert wc > 3 * wp
    assert panel.gap.equivalence is not None and panel.gap.equivalence.equivalent  # |gap| < 0.3, fixed panel
    assert panel.worst == "H1"
