"""Static-counterpart mismatch, and the comparison the harness exists for: does method X suffer less
of it than method Y, against counterparts neither trained with?

For a policy P trained against counterpart C, on every game (scenario, seed, role of P) that P
played against C and against every held-out counterpart h:

- gap = score(P vs C) - mean over h of score(P vs h), paired by game; the proportional loss is
  gap / score(P vs C); per held-out counterpart, score(P vs C) - score(P vs h), with Holm-adjusted
  p-values across the counterparts, and the largest of them named as *selected* (the worst of H
  gaps is chosen after seeing them, so its own interval is optimistic);
- with a reference policy P0 (the common starting point, say), P's difference-in-differences
  DiD = [score(P vs C) - score(P0 vs C)] - [score(P vs H) - score(P0 vs H)]: how much more P gained
  against its training counterpart than against the panel. A large gap with DiD near 0 means C is
  merely easy; a positive DiD means P overfit C;
- several methods, each with its own training counterpart, and one reference: each method's gap
  and DiD, and for every pair of methods the paired difference of their DiDs, the number the
  comparison rests on. The raw gap difference is shown beside it only with a warning: it mixes
  overfitting with how hard each training counterpart is.

Two views of the held-out panel (`view`):
- "crossed" (default): the panel is a sample of counterparts; intervals resample scenarios and
  counterparts (`intervals.crossed_interval`), which is what a claim about unseen counterparts needs;
- "panel": the panel is fixed; intervals resample scenarios only (MOVER for a rate gap, paired t
  for the DiD), a claim about these counterparts alone.

A training counterpart may not also sit in the held-out panel (the same spec, or the same card
content hash) unless `include_train_in_panel` is set: scoring a policy against its own training
partner as "held out" hides exactly the mismatch being measured.

Only games with every needed episode scored (no error, metric defined) count; the rest are
dropped and counted, so that every difference compares the same games.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel

from ibrl_bench.errors import UserError
from ibrl_bench.stats.intervals import (
    Equivalence,
    Interval,
    Paired,
    TestResult,
    bootstrap_intervals,
    crossed_interval,
    few_counterparts_note,
    holm,
    interval_of,
    paired_interval,
)
from ibrl_bench.stats.paired import GAME, PairedDifference, paired_difference, scored_with_metric, side_interval

View = Literal["crossed", "panel"]
RAW_GAP_WARNING = ("raw gap difference: it mixes overfitting with how hard each method's training counterpart is; "
                   "compare methods by the difference of their DiDs")


class Mismatch(BaseModel):
    policy: str
    train_counterpart: str
    heldout: list[str]
    metric: str
    confidence: float
    view: View = "crossed"
    gap: PairedDifference  # a: score vs the training counterpart; b: mean vs the held-out panel
    proportional_loss: Interval  # gap / score vs the training counterpart
    per_heldout: list[PairedDifference]  # scope: the held-out counterpart; p_holm: Holm over them
    worst: str | None  # the held-out counterpart with the largest gap, selected after seeing them
    reference: str | None = None
    reference_gap: PairedDifference | None = None
    did: Interval | None = None  # difference-in-differences against the reference
    did_test: TestResult | None = None
    did_equivalence: Equivalence | None = None
    p_holm: float | None = None  # Holm-adjusted p-value when several methods were tested together
    n_games: int  # games (scenario, seed, role) with every needed episode
    n_dropped: int  # games lacking some needed episode (error, undefined metric)


class MethodDifference(BaseModel):
    """Method a minus method b: the paired difference of their DiDs (and, beside it, of raw gaps)."""

    a: str
    b: str
    did_difference: Interval
    test: TestResult
    p_holm: float | None = None  # Holm over every pair of methods
    equivalence: Equivalence | None = None
    raw_gap_difference: Interval
    raw_gap_test: TestResult


class MismatchReport(BaseModel):
    metric: str
    confidence: float
    view: View = "crossed"
    heldout: list[str] = []
    reference: str | None = None
    holm_over: str | None  # which p-values were adjusted across methods ("gap", "difference-in-differences")
    results: list[Mismatch]
    comparisons: list[MethodDifference] = []
    notes: list[str] = []  # what the intervals claim (view, few counterparts, selection)


def _scenario_matrix(per_game: np.ndarray, scen: np.ndarray) -> np.ndarray:
    """(games x H) -> (scenarios x H) of per-scenario means, scenarios in sorted order of their ids."""
    return pd.DataFrame(per_game).groupby(scen, sort=True).mean().to_numpy()


def _view_estimate(per_game: np.ndarray, scen: np.ndarray, view: View, *, n: int, confidence: float,
                   margin: float | None, limit: float | None = None) -> Paired:
    """The mean of a per-(game, held-out counterpart) difference under the view: crossed bootstrap
    over scenarios x counterparts, or paired t over scenarios with the panel fixed. `limit`: the
    largest size the difference can have (1 for a difference of rates)."""
    if view == "crossed" and per_game.shape[1] >= 2:
        return crossed_interval(_scenario_matrix(per_game, scen), n=n, confidence=confidence, margin=margin,
                                limits=(-limit, limit) if limit else None)
    return paired_interval(per_game.mean(axis=1), np.zeros(len(per_game)), scen, False, confidence=confidence,
                           margin=margin)


def _proportional_loss(gap: np.ndarray, train: np.ndarray, scen: np.ndarray, n: int, confidence: float) -> Interval:
    per = pd.DataFrame({"g": gap, "c": train}).groupby(scen, sort=True).mean()
    g, c = per["g"].to_numpy(), per["c"].to_numpy()
    if np.mean(c) == 0:
        return Interval(estimate=None, low=None, high=None, method="none (score against the training counterpart is 0)",
                        confidence=confidence, n=n, n_clusters=len(per))
    with np.errstate(divide="ignore", invalid="ignore"):
        return bootstrap_intervals(np.stack([g, c]), lambda m: (m[0] / m[1])[None],
                                   "ratio of means, cluster bootstrap {} (scenarios; panel fixed)", n=n,
                                   confidence=confidence)[0]


def _same(a: str, b: str, identities: dict[str, str] | None) -> bool:
    ids = identities or {}
    return a == b or (a in ids and ids.get(a) == ids.get(b))


def mismatch_many(frame: pd.DataFrame, policies: Sequence[str] | None = None, train_counterpart: str | None = None, *,
                  methods: Sequence[tuple[str, str]] | None = None, reference: str | None = None,
                  heldout: list[str] | None = None, metric: str = "success_at_1", confidence: float = 0.95,
                  view: View = "crossed", margin: float | None = None, include_train_in_panel: bool = False,
                  identities: dict[str, str] | None = None) -> MismatchReport:
    """The mismatch of several methods (policy, training counterpart) against one held-out panel,
    with Holm across methods, and, with a reference, the paired difference of every two methods'
    DiDs. `policies` with one `train_counterpart` is shorthand for methods that share it.
    `identities` maps specs to card content hashes, so that one card under two names is caught."""
    methods = list(methods or []) + [(p, train_counterpart) for p in (policies or []) if train_counterpart]
    if not methods:
        raise UserError("name the methods: --method POLICY TRAIN_COUNTERPART (repeatable), "
                        "or --policy P with --train-counterpart C")
    methods = list(dict.fromkeys(methods))
    if view not in ("crossed", "panel"):
        raise UserError(f"--view must be crossed or panel, got {view}")
    run_policies = set(frame["policy"])
    for p in [*(p for p, _ in methods), *([reference] if reference else [])]:
        if p not in run_policies:
            raise UserError(f"policy {p} is not in the run; policies: {', '.join(sorted(run_policies))}")
    if reference and any(reference == p for p, _ in methods):
        raise UserError(f"--reference {reference} is the policy itself; give the policy it is compared with")
    counterparts = list(dict.fromkeys(frame["counterpart"]))
    trains = list(dict.fromkeys(c for _, c in methods))
    for c in trains:
        if c not in counterparts:
            raise UserError(f"counterpart {c} is not in the run; counterparts: {', '.join(counterparts)}")
    if heldout:
        for c in heldout:
            if c not in counterparts:
                raise UserError(f"held-out counterpart {c} is not in the run; counterparts: {', '.join(counterparts)}")
        clash = [(h, c) for h in heldout for c in trains if _same(h, c, identities)]
        if clash and not include_train_in_panel:
            h, c = clash[0]
            same = "is" if h == c else "is the same card as"
            raise UserError(f"held-out counterpart {h} {same} the training counterpart {c}; "
                            "a policy's training partner is not held out. Drop it from --heldout, "
                            "or pass --include-train-in-panel to keep it")
        panel = list(dict.fromkeys(heldout))
    else:
        panel = [c for c in counterparts if not any(_same(c, t, identities) for t in trains)]
    if not panel:
        raise UserError(f"no held-out counterpart: the run has only {', '.join(trains)}; "
                        "mismatch needs the training counterpart and at least one other")

    policies_all = list(dict.fromkeys([p for p, _ in methods] + ([reference] if reference else [])))
    needed = list(dict.fromkeys([(p, c) for p, c in methods] + [(p, h) for p, _ in methods for h in panel]
                                + ([(reference, c) for c in trains] + [(reference, h) for h in panel]
                                   if reference else [])))
    data, kind = scored_with_metric(frame[frame["policy"].isin(policies_all)], metric)
    played = frame[frame["policy"].isin(policies_all)].set_index(GAME).index.unique()
    wide = data.set_index([*GAME, "policy", "counterpart"])["y"].unstack(["policy", "counterpart"])
    wide = wide.reindex(index=played, columns=pd.MultiIndex.from_tuples(needed))
    for p, c in needed:
        if wide[(p, c)].isna().all():
            raise UserError(f"{p} has no scored episode against {c} (all errors, or {metric} undefined there); "
                            "rerun the missing episodes, or name the held-out counterparts to use with --heldout")
    games = wide.dropna()
    if games.empty:
        raise UserError("no game has every method scored against its training counterpart and every held-out "
                        "counterpart; rerun the missing episodes, or choose the held-out counterparts with --heldout")
    scen = games.index.get_level_values("scenario_id").astype(str).to_numpy()
    n = len(games)
    binary = kind == "rate"
    kw = dict(confidence=confidence, margin=margin)

    def sides(p: str, c: str) -> tuple[np.ndarray, np.ndarray]:
        return games[(p, c)].to_numpy(), games[[(p, h) for h in panel]].to_numpy()

    def gap_of(p: str, c: str) -> tuple[np.ndarray, PairedDifference]:
        train, held = sides(p, c)
        per = train[:, None] - held
        if view == "crossed" and len(panel) >= 2:
            est = _view_estimate(per, scen, view, n=n, limit=1.0 if binary else None, **kw)
            gap = PairedDifference(scope="held-out panel", a=side_interval(train, scen, binary, confidence),
                                   b=side_interval(held.mean(axis=1), scen, binary, confidence),
                                   difference=est.difference, test=est.test, equivalence=est.equivalence)
        else:
            gap = paired_difference(train, held.mean(axis=1), scen, binary, "held-out panel", **kw)
        return per, gap

    results, did_per = [], {}
    for p, c in methods:
        train, held = sides(p, c)
        per, gap = gap_of(p, c)
        per_heldout = [paired_difference(train, held[:, j], scen, binary, h, confidence=confidence)
                       for j, h in enumerate(panel)]
        per_heldout = [d.model_copy(update={"p_holm": q})
                       for d, q in zip(per_heldout, holm([d.test.p_value for d in per_heldout]), strict=True)]
        worst = max(per_heldout, key=lambda d: d.difference.estimate if d.difference.estimate is not None else -np.inf)
        result = Mismatch(policy=p, train_counterpart=c, heldout=panel, metric=metric, confidence=confidence,
                          view=view if len(panel) >= 2 else "panel", gap=gap,
                          proportional_loss=_proportional_loss(per.mean(axis=1), train, scen, n, confidence),
                          per_heldout=per_heldout, worst=worst.scope, n_games=n, n_dropped=len(wide) - n)
        if reference:
            ref_per, ref_gap = gap_of(reference, c)
            did_per[p, c] = per - ref_per
            did = _view_estimate(did_per[p, c], scen, view, n=n, limit=2.0 if binary else None, **kw)
            result = result.model_copy(update={"reference": reference, "reference_gap": ref_gap,
                                               "did": did.difference, "did_test": did.test,
                                               "did_equivalence": did.equivalence})
        results.append((result, per))

    holm_over = None
    if len(results) > 1:
        holm_over = "difference-in-differences" if reference else "gap"
        raw = [(r.did_test if reference else r.gap.test).p_value for r, _ in results]  # type: ignore[union-attr]
        results = [(r.model_copy(update={"p_holm": q}), per) for (r, per), q in zip(results, holm(raw), strict=True)]

    comparisons = []
    if reference:
        for (ra, pa), (rb, pb) in combinations(results, 2):
            ka, kb = (ra.policy, ra.train_counterpart), (rb.policy, rb.train_counterpart)
            did = _view_estimate(did_per[ka] - did_per[kb], scen, view, n=n, limit=4.0 if binary else None, **kw)
            raw = _view_estimate(pa - pb, scen, view, n=n, confidence=confidence, margin=None,
                                 limit=2.0 if binary else None)
            comparisons.append(MethodDifference(a=ra.policy, b=rb.policy, did_difference=did.difference, test=did.test,
                                                equivalence=did.equivalence, raw_gap_difference=raw.difference,
                                                raw_gap_test=raw.test))
        if len(comparisons) > 1:
            comparisons = [m.model_copy(update={"p_holm": q})
                           for m, q in zip(comparisons, holm([m.test.p_value for m in comparisons]), strict=True)]

    used = view if len(panel) >= 2 else "panel"
    notes = [("view: crossed (scenarios x held-out counterparts resampled): the panel stands for counterparts "
              "these policies never met" if used == "crossed" else
              "view: panel fixed (scenarios resampled): a claim about these held-out counterparts only")]
    if used != view:
        notes.append("one held-out counterpart: the crossed view needs at least 2, so the panel is fixed")
    if (few := few_counterparts_note(len(panel))) and used == "crossed":
        notes.append(few)
    notes.append("per held-out counterpart: Holm-adjusted over the panel; 'worst' is selected after seeing the gaps, "
                 "so its own interval is optimistic")
    if comparisons:
        notes.append(RAW_GAP_WARNING)
    return MismatchReport(metric=metric, confidence=confidence, view=used, heldout=panel, reference=reference,
                          holm_over=holm_over, results=[r for r, _ in results], comparisons=comparisons, notes=notes)


def mismatch(frame: pd.DataFrame, policy: str, train_counterpart: str, *, heldout: list[str] | None = None,
             reference: str | None = None, metric: str = "success_at_1", confidence: float = 0.95,
             view: View = "crossed", margin: float | None = None, include_train_in_panel: bool = False,
             identities: dict[str, str] | None = None) -> Mismatch:
    """The mismatch of one policy (see the module docstring)."""
    return mismatch_many(frame, methods=[(policy, train_counterpart)], reference=reference, heldout=heldout,
                         metric=metric, confidence=confidence, view=view, margin=margin,
                         include_train_in_panel=include_train_in_panel, identities=identities).results[0]


class GapCell(BaseModel):
    policy: str
    counterpart: str  # taken as the training counterpart; the others are the held-out panel
    gap: Interval


def gap_matrix(frame: pd.DataFrame, metric: str = "success_at_1", confidence: float = 0.95) -> list[GapCell]:
    """For every policy and every counterpart C of the run: the gap, score vs C minus the mean vs
    the other counterparts, paired by game, panel fixed. Where nobody says which counterpart a
    policy trained with, this shows the counterparts each policy does unusually well against."""
    data, _ = scored_with_metric(frame, metric)
    counterparts = list(dict.fromkeys(frame["counterpart"]))
    if len(counterparts) < 2:
        return []
    out = []
    for policy, rows in data.groupby("policy", sort=False):
        wide = rows.set_index([*GAME, "counterpart"])["y"].unstack("counterpart").reindex(columns=counterparts)
        games = wide.dropna()
        scen = games.index.get_level_values("scenario_id").astype(str).to_numpy()
        for c in counterparts:
            others = games[[o for o in counterparts if o != c]].to_numpy().mean(axis=1)
            iv = interval_of("mean", games[c].to_numpy() - others, scen, confidence)
            out.append(GapCell(policy=policy, counterpart=c,
                               gap=iv.model_copy(update={"method": f"paired {iv.method}"})))
    return out
