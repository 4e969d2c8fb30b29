"""Static-counterpart mismatch: how much a policy loses when its training counterpart is replaced by
held-out ones (the failure IB-RL is built to avoid).

For a policy P trained against counterpart C, on every game (scenario, seed, role of P) that P
played against C and against every held-out counterpart h:

- gap = score(P vs C) - mean over h of score(P vs h), paired by game; its interval is the cluster
  bootstrap over scenarios; the proportional loss is gap / score(P vs C) (a ratio of means over
  scenarios, bootstrapped as a ratio);
- per held-out counterpart: score(P vs C) - score(P vs h), and the worst (largest) of these;
- with a reference policy P0 (the base model before training, say), the difference-in-differences
  DiD = [score(P vs C) - score(P0 vs C)] - [score(P vs H) - score(P0 vs H)]: how much more P gained
  against C than against the held-out panel. A large gap with DiD near 0 means C is merely easy;
  a positive DiD means P overfit C.
- several policies at once: Holm-adjusted p-values over them (of DiD when P0 is given, else of the
  gap), so that testing many policies does not inflate false findings.

Only games with every needed episode scored (no error, metric defined) count; the rest are
dropped and counted, so that the sides of every difference are the same games.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import BaseModel

from ibrl_bench.errors import UserError
from ibrl_bench.stats.batch import interval_batch
from ibrl_bench.stats.intervals import Interval, cluster_bootstrap
from ibrl_bench.stats.paired import GAME, PairedDifference, paired_difference, scored_with_metric
from ibrl_bench.stats.resampling import (
    TestResult,
    _none_if_nan,
    bootstrap_statistic,
    holm,
    sign_flip_test,
)


class Mismatch(BaseModel):
    policy: str
    train_counterpart: str
    heldout: list[str]
    metric: str
    confidence: float
    gap: PairedDifference  # a: score vs the training counterpart; b: mean vs the held-out panel
    proportional_loss: Interval  # gap / score vs the training counterpart
    per_heldout: list[PairedDifference]  # scope: the held-out counterpart
    worst: str | None  # the held-out counterpart with the largest gap
    reference: str | None = None
    reference_gap: PairedDifference | None = None
    did: Interval | None = None  # difference-in-differences against the reference
    did_test: TestResult | None = None
    p_holm: float | None = None  # Holm-adjusted p-value when several policies were tested together
    n_games: int  # games (scenario, seed, role) with every needed episode
    n_dropped: int  # games lacking some needed episode (error, undefined metric)


class MismatchReport(BaseModel):
    metric: str
    confidence: float
    holm_over: str | None  # which p-values were adjusted ("gap", "difference-in-differences")
    results: list[Mismatch]


def _ratio_of_means(g: np.ndarray, c: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.mean(g, axis=axis) / np.mean(c, axis=axis)


def _proportional_loss(gap: np.ndarray, train: np.ndarray, scenarios: np.ndarray, n: int,
                       confidence: float, n_resamples: int, seed: int) -> Interval:
    per = pd.DataFrame({"g": gap, "c": train, "s": scenarios}).groupby("s").mean()
    g, c = per["g"].to_numpy(), per["c"].to_numpy()
    if np.mean(c) == 0:
        return Interval(estimate=None, low=None, high=None, method="none (score against the training counterpart is 0)",
                        confidence=confidence, n=n, n_clusters=len(per))
    est, low, high, used = bootstrap_statistic([g, c], _ratio_of_means, confidence=confidence,
                                               n_resamples=n_resamples, seed=seed)
    method = f"ratio of means, cluster bootstrap {'BCa' if used else 'percentile'} (scenarios)"
    if len(per) < 2:
        method = "none (fewer than 2 scenarios)"
    return Interval(estimate=_none_if_nan(float(est)), low=_none_if_nan(float(low)), high=_none_if_nan(float(high)),
                    method=method, confidence=confidence, n=n, n_clusters=len(per))


def mismatch(frame: pd.DataFrame, policy: str, train_counterpart: str, *, heldout: list[str] | None = None,
             reference: str | None = None, metric: str = "success_at_1", confidence: float = 0.95,
             n_resamples: int = 2000, seed: int = 0) -> Mismatch:
    """The mismatch of one policy (see the module docstring). `frame` is the episode table,
    narrowed to the roles to include; `heldout` defaults to every other counterpart of the run."""
    policies = [policy] + ([reference] if reference else [])
    if reference == policy:
        raise UserError(f"--reference {reference} is the policy itself; give the policy it is compared with")
    for p in policies:
        if p not in set(frame["policy"]):
            raise UserError(f"policy {p} is not in the run; policies: {', '.join(sorted(set(frame['policy'])))}")
    counterparts = list(dict.fromkeys(frame["counterpart"]))
    if train_counterpart not in counterparts:
        raise UserError(f"counterpart {train_counterpart} is not in the run; counterparts: {', '.join(counterparts)}")
    heldout = [c for c in (heldout or counterparts) if c != train_counterpart]
    if not heldout:
        raise UserError(f"no held-out counterpart: the run has only {train_counterpart}; "
                        "mismatch needs the training counterpart and at least one other")
    for c in heldout:
        if c not in counterparts:
            raise UserError(f"held-out counterpart {c} is not in the run; counterparts: {', '.join(counterparts)}")

    needed = [(p, c) for p in policies for c in [train_counterpart, *heldout]]
    rows = frame[frame["policy"].isin(policies) & frame["counterpart"].isin([train_counterpart, *heldout])]
    data, kind = scored_with_metric(rows, metric)
    # Every game of these policies, one column per (policy, counterpart); games missing a column
    # (an error episode, an undefined metric) are dropped as a whole.
    played = frame[frame["policy"].isin(policies)].set_index(GAME).index.unique()
    wide = data.set_index([*GAME, "policy", "counterpart"])["y"].unstack(["policy", "counterpart"])
    wide = wide.reindex(index=played, columns=pd.MultiIndex.from_tuples(needed))
    for p, c in needed:
        if wide[(p, c)].isna().all():
            raise UserError(f"{p} has no scored episode against {c} (all errors, or {metric} undefined there); "
                            "rerun the missing episodes, or name the held-out counterparts to use with --heldout")
    games = wide.dropna()
    if games.empty:
        raise UserError(f"no game has {policy} scored against {train_counterpart} and every held-out counterpart; "
                        "rerun the missing episodes, or choose the held-out counterparts with --heldout")
    scen = games.index.get_level_values("scenario_id").astype(str).to_numpy()
    n = len(games)
    binary = kind == "rate"
    kw = dict(confidence=confidence, n_resamples=n_resamples, seed=seed)

    def gap_of(p: str) -> tuple[np.ndarray, np.ndarray, PairedDifference]:
        train = games[(p, train_counterpart)].to_numpy()
        held = games[[(p, h) for h in heldout]].to_numpy().mean(axis=1)
        # Against one held-out counterpart a 0/1 metric stays 0/1 (McNemar applies); a mean over
        # several is a proportion per game.
        gap = paired_difference(train, held, scen, binary and len(heldout) == 1, "held-out panel", **kw)
        return train, held, gap

    train, held, gap = gap_of(policy)
    per_heldout = [paired_difference(train, games[(policy, h)].to_numpy(), scen, binary, h, **kw) for h in heldout]
    worst = max(per_heldout, key=lambda d: d.difference.estimate if d.difference.estimate is not None else -np.inf)
    result = Mismatch(
        policy=policy, train_counterpart=train_counterpart, heldout=heldout, metric=metric, confidence=confidence,
        gap=gap, proportional_loss=_proportional_loss(train - held, train, scen, n, confidence, n_resamples, seed),
        per_heldout=per_heldout, worst=worst.scope, n_games=n, n_dropped=len(wide) - n,
    )
    if reference:
        ref_train, ref_held, ref_gap = gap_of(reference)
        did = (train - ref_train) - (held - ref_held)
        did_iv = cluster_bootstrap(did, scen, **kw)
        per_scenario = pd.Series(did).groupby(scen).mean().to_numpy()
        result = result.model_copy(update={
            "reference": reference, "reference_gap": ref_gap,
            "did": did_iv.model_copy(update={"method": f"paired {did_iv.method}"}),
            "did_test": sign_flip_test(per_scenario, n=n, seed=seed),
        })
    return result


def mismatch_many(frame: pd.DataFrame, policies: list[str], train_counterpart: str, *, reference: str | None = None,
                  heldout: list[str] | None = None, metric: str = "success_at_1", confidence: float = 0.95,
                  n_resamples: int = 2000, seed: int = 0) -> MismatchReport:
    """The mismatch of several policies against one training counterpart, with Holm-adjusted
    p-values across them (of the DiD with a reference policy, else of the gap)."""
    results = [mismatch(frame, p, train_counterpart, heldout=heldout, reference=reference, metric=metric,
                        confidence=confidence, n_resamples=n_resamples, seed=seed) for p in policies]
    holm_over = None
    if len(results) > 1:
        holm_over = "difference-in-differences" if reference else "gap"
        raw = [(r.did_test if reference else r.gap.test).p_value for r in results]
        results = [r.model_copy(update={"p_holm": p}) for r, p in zip(results, holm(raw))]
    return MismatchReport(metric=metric, confidence=confidence, holm_over=holm_over, results=results)


class GapCell(BaseModel):
    policy: str
    counterpart: str  # taken as the training counterpart; the others are the held-out panel
    gap: Interval


def gap_matrix(frame: pd.DataFrame, metric: str = "success_at_1", confidence: float = 0.95,
               n_resamples: int = 10_000, seed: int = 0) -> list[GapCell]:
    """For every policy and every counterpart C of the run: the gap, score vs C minus the mean vs
    the other counterparts, paired by game. Where nobody says which counterpart a policy trained
    with, this shows the counterparts each policy does unusually well against. All intervals come
    from one vectorized pass (`batch.interval_batch`)."""
    data, _ = scored_with_metric(frame, metric)
    counterparts = list(dict.fromkeys(frame["counterpart"]))
    if len(counterparts) < 2:
        return []
    keys, observations = [], []
    for policy, rows in data.groupby("policy", sort=False):
        wide = rows.set_index([*GAME, "counterpart"])["y"].unstack("counterpart").reindex(columns=counterparts)
        games = wide.dropna()
        scen = games.index.get_level_values("scenario_id").astype(str).to_numpy()
        for c in counterparts:
            others = games[[o for o in counterparts if o != c]].to_numpy().mean(axis=1)
            keys.append((policy, c))
            observations.append(("mean", games[c].to_numpy() - others, scen))
    intervals = interval_batch(observations, confidence, n_resamples, seed)
    return [GapCell(policy=p, counterpart=c, gap=iv.model_copy(update={"method": f"paired {iv.method}"}))
            for (p, c), iv in zip(keys, intervals)]
