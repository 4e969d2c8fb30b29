"""Paired comparisons: two policies (or two counterparts) on the same games.

A *pair* is two episodes of the same game from the same seat: the same scenario, seed and role of
the policy, and the same opponent (the same counterpart when policies are compared, the same
policy when counterparts are). Pairing removes the scenario-to-scenario variation that both sides
share, which is most of it: a paired difference is far more precise than the difference of two
cell estimates.

- The difference is the mean over scenarios of the per-scenario mean of paired differences, with
  the engine's paired interval (`intervals.paired_interval`: MOVER of the two rate intervals for
  rates, paired t for scores) and the p-value of that interval inverted, so the two always agree.
- Per cell, p-values are Holm-adjusted across the cells (`p_holm`): reading the table for the
  cell that differs is testing every cell.
- With an equivalence margin m, TOST: is |A - B| < m?
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel

from ibrl_bench.errors import UserError
from ibrl_bench.stats.cells import metric_values
from ibrl_bench.stats.intervals import (
    Equivalence,
    Interval,
    TestResult,
    holm,
    mean_interval,
    paired_interval,
    proportion_interval,
    scenario_means,
)

Kind = Literal["policy", "counterpart"]
# The game and seat of an episode; with the opponent, the key of a pair.
GAME = ["policy_role", "scenario_id", "seed"]


class PairedDifference(BaseModel):
    """A versus B on the pairs of one scope (every cell, or one opponent and role)."""

    scope: str  # "all cells", or e.g. "vs scripted:dealnodeal/conceder, role a"
    a: Interval  # A's mean over the paired episodes
    b: Interval
    difference: Interval  # A minus B
    test: TestResult  # the difference's interval inverted: p < 1 - confidence iff it excludes 0
    p_holm: float | None = None  # Holm-adjusted over the cells of a comparison (per-cell rows only)
    equivalence: Equivalence | None = None  # TOST for |A - B| < margin, when a margin was given


class Comparison(BaseModel):
    kind: Kind  # what A and B are: two policies or two counterparts
    a: str
    b: str
    metric: str
    confidence: float
    overall: PairedDifference
    by_cell: list[PairedDifference]  # p_holm: Holm over these cells
    n_unpaired: int  # scored episodes of A or B whose partner is missing (error, undefined metric)


def scored_with_metric(frame: pd.DataFrame, metric: str) -> tuple[pd.DataFrame, str]:
    """The scored episodes (no infrastructure errors) with the metric's value in column `y`,
    episodes where it is undefined dropped; and the metric's kind ("rate" or "mean")."""
    scored = frame[frame["status"] != "error"]
    try:
        kind, y = metric_values(scored, metric)
    except ValueError as e:
        raise UserError(f"{e}; choose one with --metric") from None
    out = scored.assign(y=y)
    return out[out["y"].notna()], kind


def side_interval(y: np.ndarray, scenarios: np.ndarray, binary: bool, confidence: float = 0.95) -> Interval:
    """One side of a pair: a rate (0/1 per game, or a mean of rates such as the held-out panel's)
    or a mean score, over scenarios."""
    if binary:
        return proportion_interval(*scenario_means(y, scenarios), confidence=confidence)
    return mean_interval(y, scenarios, confidence)


def paired_difference(ya: np.ndarray, yb: np.ndarray, scenarios: np.ndarray, binary: bool, scope: str, *,
                      confidence: float = 0.95, margin: float | None = None) -> PairedDifference:
    """A versus B over aligned pairs (ya[i], yb[i]) played on scenarios[i]; `binary`: both sides are
    proportions in [0, 1]."""
    ya, yb = np.asarray(ya, float), np.asarray(yb, float)
    paired = paired_interval(ya, yb, scenarios, binary, confidence=confidence, margin=margin)
    return PairedDifference(scope=scope, a=side_interval(ya, scenarios, binary, confidence),
                            b=side_interval(yb, scenarios, binary, confidence), difference=paired.difference,
                            test=paired.test, equivalence=paired.equivalence)


def compare(frame: pd.DataFrame, a: str, b: str, *, kind: Kind = "policy", metric: str = "success_at_1",
            confidence: float = 0.95, margin: float | None = None) -> Comparison:
    """A minus B, paired by game and seat (see the module docstring), overall and per cell.

    `frame` is the episode table (`matrix.episodes_frame`), already narrowed to the counterparts
    or roles to compare on if needed. With kind="policy", A and B are policies and the opponent is
    the counterpart; with kind="counterpart", A and B are counterparts and the opponent the policy.
    """
    if a == b:
        raise UserError(f"compare needs two different {kind}s; both are {a}")
    side, other = ("policy", "counterpart") if kind == "policy" else ("counterpart", "policy")
    for name in (a, b):
        if name not in set(frame[side]):
            raise UserError(f"{kind} {name} is not in the run; {kind}s: {', '.join(sorted(set(frame[side])))}")
    data, metric_kind = scored_with_metric(frame[frame[side].isin([a, b])], metric)
    wide = data.set_index([other, *GAME, side])["y"].unstack(side)
    wide = wide.reindex(columns=[a, b])
    pairs = wide.dropna()
    n_unpaired = int(wide.notna().to_numpy().sum()) - 2 * len(pairs)
    if pairs.empty:
        raise UserError(f"{a} and {b} share no scored game (same {other}, scenario, seed and role) with a defined "
                        f"{metric}; compare two {kind}s that played the same games")
    binary = metric_kind == "rate"
    kw = dict(confidence=confidence, margin=margin)
    scen = pairs.index.get_level_values("scenario_id").astype(str).to_numpy()
    overall = paired_difference(pairs[a].to_numpy(), pairs[b].to_numpy(), scen, binary, "all cells", **kw)
    by_cell = []
    for (opponent, role), group in pairs.groupby(level=[other, "policy_role"], sort=False):
        scope = f"vs {opponent}, role {role}" if kind == "policy" else f"{opponent} in role {role}"
        scen = group.index.get_level_values("scenario_id").astype(str).to_numpy()
        by_cell.append(paired_difference(group[a].to_numpy(), group[b].to_numpy(), scen, binary, scope, **kw))
    adjusted = holm([d.test.p_value for d in by_cell])
    by_cell = [d.model_copy(update={"p_holm": p}) for d, p in zip(by_cell, adjusted, strict=True)]
    return Comparison(kind=kind, a=a, b=b, metric=metric, confidence=confidence, overall=overall,
                      by_cell=by_cell, n_unpaired=n_unpaired)
