"""Rankings of the policies over the matrix, three ways, each with intervals.

The matrix has one row per policy and one column per (counterpart, role of the policy); a cell's
value is the mean over scenarios of its per-scenario mean. Only scenarios that every cell scored
count, so that all rankings compare the same games.

- Uniform mean: every column weighs the same; its interval is the engine's rate interval (or t for
  scores) over scenarios. Rank = 1 + the number of policies significantly above in the *paired*
  comparison (same scenarios; Holm over all pairs), not from overlapping marginal intervals, which
  are blind to the pairing. The rank interval: quantiles of each policy's rank over scenario
  bootstrap resamples, all policies resampled with the same scenarios.
- Nash averaging, agent-versus-task (Balduzzi et al. 2018, "Re-evaluating evaluation"): a zero-sum
  game where one player picks a policy and the other a column, the payoff being the score. Its
  maximum-entropy equilibrium weighs the columns; a policy's Nash value is its score against
  that mixture. Unlike the uniform mean it cannot be moved by adding easy counterparts or copies
  of one: a duplicated column shares its weight with its copy (copies, equal within
  `MERGE_TOLERANCE`, are merged before solving, see `maxent_nash`). The game value comes from
  `scipy.optimize.linprog` (HiGHS); among the optimal strategies of each player (a polytope), the
  one of maximum entropy (unique: entropy is strictly concave) is found by `scipy.optimize.minimize`
  (SLSQP) under the constraints that keep it optimal.
- Normalized score: each cell divided by the best policy in its column, aggregated over columns by
  the interquartile mean (`scipy.stats.trim_mean`, 25% cut at each end; Agarwal et al. 2021), robust
  to a few odd columns.

Bootstrap intervals resample scenarios (`intervals.bootstrap`). Nash values re-solve the
equilibrium on every resample, so their intervals include the equilibrium's own uncertainty, and
each policy's share of resamples in the equilibrium's support is reported.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
from pydantic import BaseModel
from scipy import linalg, optimize, stats

from ibrl_bench.errors import UserError
from ibrl_bench.stats.intervals import (
    DEFAULT_RESAMPLES,
    Interval,
    bootstrap_bounds,
    bootstrap_intervals,
    crossed_interval,
    holm,
    make_interval,
    paired_interval,
    proportion_interval,
    rank_bounds,
    resampled_means,
    scenario_mean_interval,
)
from ibrl_bench.stats.paired import scored_with_metric

NASH_SOLVER = ("game value by scipy.optimize.linprog (HiGHS); maximum-entropy equilibrium by "
               "scipy.optimize.minimize (SLSQP) over each player's optimal strategies, reduced first to "
               "their support and implicit equalities by linprog; exact copies merged, their weight split equally")


class PolicyRank(BaseModel):
    policy: str
    mean: Interval
    rank: int | None  # 1 + policies significantly above in the paired comparison (Holm over pairs)
    rank_low: int | None = None  # the rank interval: quantiles of the bootstrap distribution of ranks
    rank_high: int | None = None


class ColumnWeight(BaseModel):
    counterpart: str
    policy_role: str
    weight: float


class NashValue(BaseModel):
    policy: str
    weight: float  # the policy's probability in the equilibrium (which policies the max player uses)
    value: Interval  # score against the equilibrium mixture of columns, equilibrium re-solved per resample
    p_support: float | None = None  # share of bootstrap resamples whose equilibrium puts weight on it


class NashAveraging(BaseModel):
    solver: str
    n_resamples: int = 0  # bootstrap resamples the equilibrium was re-solved on
    merge_tolerance: float = 0.0  # rows or columns equal within this are merged before solving
    game_value: float
    columns: list[ColumnWeight]
    counterpart_weights: dict[str, float]  # summed over roles
    values: list[NashValue]


class NormalizedScore(BaseModel):
    policy: str
    iqm: Interval


class Rankings(BaseModel):
    metric: str
    confidence: float
    n_scenarios: int
    n_scenarios_dropped: int  # scenarios missing from some cell (errors, undefined metric)
    columns: list[tuple[str, str]]  # (counterpart, role)
    uniform: list[PolicyRank]
    nash: NashAveraging
    normalized: list[NormalizedScore]
    normalized_dropped: list[tuple[str, str]]  # columns where the best policy scores <= 0
    columns_dropped: list[tuple[str, str]] = []  # columns some policy has no scored episode in
    rank_rule: str = ""


# ------------------------------------------------------------------------- Nash averaging

def _lp(c: np.ndarray, a_ub: np.ndarray, b_ub: np.ndarray) -> optimize.OptimizeResult:
    """min c @ x over the simplex cut by a_ub @ x <= b_ub."""
    d = len(c)
    return optimize.linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=np.ones((1, d)), b_eq=[1.0], bounds=[(0, None)] * d,
                            method="highs")


def _maxent(a_ub: np.ndarray, b_ub: np.ndarray, fallback: np.ndarray, scale: float) -> np.ndarray | None:
    """The maximum-entropy point of the polytope {x in the simplex: a_ub @ x <= b_ub} (the optimal
    strategies of one player), or None if the optimizer fails.

    Entropy is not differentiable where a coordinate is 0, and optimizers stall against faces the
    whole polytope lies on, so the problem is first reduced with linear programs:
    1. the support: coordinates that are positive at some point of the polytope (one LP each); the
       others are 0 everywhere and drop out;
    2. the implicit equalities: constraints that no point of the polytope satisfies with slack (one
       LP each); with sum(x) = 1 they define an affine subspace, parametrized by its null space.
    What remains, entropy over free coordinates with the other constraints, has its optimum inside
    the support, where SLSQP converges.
    """
    d = a_ub.shape[1]
    support_tol, slack_tol = 1e-6, 1e-7 * scale
    vertices = []
    for i in range(d):
        res = _lp(-np.eye(d)[i], a_ub, b_ub)
        if res.status == 0 and res.x[i] > support_tol:
            vertices.append(res.x)
    if not vertices:
        return fallback
    free = np.mean(vertices, axis=0) > support_tol / len(vertices)
    start = np.mean(vertices, axis=0)[free]  # inside the polytope, every free coordinate positive
    tight = []
    for j in range(len(b_ub)):
        res = _lp(a_ub[j], a_ub, b_ub)
        if res.status == 0 and b_ub[j] - res.fun <= slack_tol:
            tight.append(j)
    equalities = np.vstack([np.ones((1, free.sum())), a_ub[tight][:, free]])
    basis = linalg.null_space(equalities, rcond=1e-10)
    x = np.zeros(d)
    if basis.shape[1] == 0:  # a single optimal strategy
        x[free] = start
        return x / x.sum()
    loose = [j for j in range(len(b_ub)) if j not in tight]
    a_loose, b_loose = a_ub[loose][:, free], b_ub[loose]
    tiny = 1e-300

    def neg_entropy(z: np.ndarray) -> float:
        y = start + basis @ z
        return float(np.sum(y * np.log(np.maximum(y, tiny))))

    def grad(z: np.ndarray) -> np.ndarray:
        y = start + basis @ z
        return basis.T @ (np.log(np.maximum(y, tiny)) + 1.0)

    constraints = [{"type": "ineq", "fun": lambda z: start + basis @ z, "jac": lambda z: basis}]
    if loose:
        constraints.append({"type": "ineq", "fun": lambda z: b_loose - a_loose @ (start + basis @ z),
                            "jac": lambda z: -a_loose @ basis})
    res = optimize.minimize(neg_entropy, np.zeros(basis.shape[1]), jac=grad, method="SLSQP",
                            constraints=constraints, options={"ftol": 1e-14, "maxiter": 1000})
    if not res.success:
        return None
    x[free] = np.clip(start + basis @ res.x, 0.0, None)
    return x / x.sum()


def maxent_nash(scores: np.ndarray, maxent: bool = True) -> tuple[np.ndarray, np.ndarray, float, str]:
    """Maximum-entropy Nash equilibrium of the zero-sum game where the row player (policies)
    maximizes and the column player (counterparts) minimizes `scores` (rows x columns).

    Returns (row strategy, column strategy, game value, solver description). In a zero-sum game
    the equilibria are the pairs of optimal strategies, so the maximum-entropy equilibrium is the
    pair of each player's maximum-entropy optimal strategy.

    Copies (rows, or columns, equal within `MERGE_TOLERANCE`) are merged first and their weight split
    equally afterwards. Without this, maximum entropy is not invariant to copies where the
    equilibrium is not unique: splitting a column's weight in two raises the entropy by
    weight x log 2, which pulls weight towards duplicated columns and moves the Nash values of
    policies outside the equilibrium. With it, a copied counterpart changes nothing.
    """
    s = np.asarray(scores, dtype=float)
    tol = MERGE_TOLERANCE * max(1.0, float(np.abs(s).max()))
    row_of = _near_copies(s, tol)
    rows = np.stack([s[row_of == g][0] for g in range(row_of.max() + 1)])
    col_of = _near_copies(rows.T, tol)
    merged = np.stack([rows[:, col_of == g][:, 0] for g in range(col_of.max() + 1)], axis=1)
    p_u, q_u, value, solver = _maxent_nash_distinct(merged, maxent)
    p = p_u[row_of] / np.bincount(row_of)[row_of]
    q = q_u[col_of] / np.bincount(col_of)[col_of]
    return p, q, value, solver


# Rows or columns whose scores all agree within this (relative to the largest score) are one
# strategy: a counterpart listed twice, or two that differ by rounding noise, must not split weight.
MERGE_TOLERANCE = 1e-6


def _near_copies(s: np.ndarray, tol: float) -> np.ndarray:
    """Group label of each row: rows within `tol` (max abs difference) of an earlier group's first
    row join that group."""
    labels = np.full(len(s), -1)
    heads: list[int] = []
    for i, row in enumerate(s):
        for g, h in enumerate(heads):
            if np.max(np.abs(row - s[h])) <= tol:
                labels[i] = g
                break
        else:
            labels[i] = len(heads)
            heads.append(i)
    return labels


def _maxent_nash_distinct(s: np.ndarray, maxent: bool = True) -> tuple[np.ndarray, np.ndarray, float, str]:
    m, n = s.shape
    scale = max(1.0, float(np.abs(s).max()))
    # max v  s.t.  s.T @ p >= v,  sum p = 1,  p >= 0   (and the mirror problem for the columns)
    lp = optimize.linprog(np.r_[np.zeros(m), -1.0], A_ub=np.c_[-s.T, np.ones(n)], b_ub=np.zeros(n),
                          A_eq=np.r_[np.ones(m), 0.0][None], b_eq=[1.0],
                          bounds=[(0, None)] * m + [(None, None)], method="highs")
    if not maxent and lp.status == 0:
        # The column player's optimal strategy is the dual of the row player's LP (its constraint
        # prices), which saves the second LP where only an equilibrium is needed.
        q0 = np.clip(-np.asarray(lp.ineqlin.marginals, float), 0.0, None)
        if q0.sum() > 0 and np.max(s @ (q0 / q0.sum())) <= lp.x[m] + 1e-7 * scale:
            return lp.x[:m] / lp.x[:m].sum(), q0 / q0.sum(), float(lp.x[m]), "linprog (HiGHS) with its dual"
    lq = optimize.linprog(np.r_[np.zeros(n), 1.0], A_ub=np.c_[s, -np.ones(m)], b_ub=np.zeros(m),
                          A_eq=np.r_[np.ones(n), 0.0][None], b_eq=[1.0],
                          bounds=[(0, None)] * n + [(None, None)], method="highs")
    if lp.status != 0 or lq.status != 0:
        raise RuntimeError(f"linprog failed on the Nash game: {lp.message} / {lq.message}")
    value = float(lp.x[m])
    p0, q0 = lp.x[:m] / lp.x[:m].sum(), lq.x[:n] / lq.x[:n].sum()
    if not maxent:
        return p0, q0, value, "linprog (HiGHS)"
    # Loosen the optimality faces by a hair, so that rounding in the LP value cannot make them empty.
    tol = 1e-9 * scale
    p = _maxent(-s.T, -(value - tol) * np.ones(n), p0, scale)
    q = _maxent(s, (value + tol) * np.ones(m), q0, scale)
    solver = NASH_SOLVER
    # Keep the maximum-entropy points only if they are still equilibria; else the LP ones.
    if p is None or np.min(s.T @ p) < value - 1e-6 * scale:
        p, solver = p0, NASH_SOLVER + "; the policies' maximum-entropy step failed, an LP equilibrium is used"
    if q is None or np.max(s @ q) > value + 1e-6 * scale:
        q, solver = q0, NASH_SOLVER + "; the columns' maximum-entropy step failed, an LP equilibrium is used"
    return p, q, value, solver


# ------------------------------------------------------------------------- the rankings

def scenario_tensor(frame: pd.DataFrame, metric: str
                    ) -> tuple[np.ndarray, list[str], list[tuple[str, str]], int, int, list[tuple[str, str]]]:
    """Per-scenario cell means as an array (policies x columns x scenarios), over the scenarios
    every cell scored. Columns where some policy has no scored episode at all (a counterpart whose
    every episode failed) are left out rather than emptying the matrix. Returns (array, policies,
    columns, scenarios dropped, episodes behind it, columns dropped)."""
    data, _ = scored_with_metric(frame, metric)
    if data.empty:
        raise UserError(f"no scored episode with a defined {metric}; nothing to rank")
    policies = list(frame["policy"].unique())
    all_columns = list(dict.fromkeys(zip(frame["counterpart"].tolist(), frame["policy_role"].tolist(), strict=True)))
    present = set(zip(data["policy"].tolist(), data["counterpart"].tolist(), data["policy_role"].tolist(),
                      strict=True))
    columns = [(c, r) for c, r in all_columns if all((p, c, r) in present for p in policies)]
    dropped_columns = [col for col in all_columns if col not in columns]
    if not columns:
        raise UserError(f"no counterpart has every policy scored with a defined {metric}; nothing to rank")
    data = data[_in_columns(data, columns)]
    per = data.groupby(["scenario_id", "policy", "counterpart", "policy_role"])["y"].mean()
    wide = per.unstack(["policy", "counterpart", "policy_role"])
    wide = wide.reindex(columns=pd.MultiIndex.from_tuples([(p, c, r) for p in policies for c, r in columns]))
    all_scenarios = frame["scenario_id"].nunique()
    complete = wide.dropna()
    values = complete.to_numpy().reshape(len(complete), len(policies), len(columns))
    n = int(data["scenario_id"].isin(set(complete.index)).sum())
    return np.moveaxis(values, 0, -1), policies, columns, all_scenarios - len(complete), n, dropped_columns


def _in_columns(data: pd.DataFrame, columns: list[tuple[str, str]]) -> list[bool]:
    """Which rows of `data` fall in these (counterpart, role) columns."""
    keep = set(columns)
    return [(c, r) in keep for c, r in zip(data["counterpart"].tolist(), data["policy_role"].tolist(), strict=True)]


def _uniform(m: np.ndarray) -> np.ndarray:
    """policies x columns x B -> policies x B"""
    return m.mean(axis=1)


def _weighted(weights: np.ndarray):
    def stat(m: np.ndarray) -> np.ndarray:
        return np.einsum("pcb,c->pb", m, weights)
    return stat


def _normalized_iqm(m: np.ndarray) -> np.ndarray:
    best = m.max(axis=0, keepdims=True)
    # A resample where every policy scores 0 in a column: all are as good as the best there.
    norm = np.divide(m, best, out=np.ones_like(m), where=best > 0)
    return stats.trim_mean(norm, 0.25, axis=1)


def _intervals(x: np.ndarray, statistic, method: str, n: int, confidence: float, n_resamples: int,
               seed: int) -> list[Interval]:
    return bootstrap_intervals(x, statistic, method, n=n, confidence=confidence, n_resamples=n_resamples, seed=seed)


RANK_RULE = ("rank = 1 + policies whose paired difference over scenarios is significantly above (Holm over all "
             "pairs); rank interval = the {lo:g}% and {hi:g}% quantiles of the ranks in the scenario bootstrap")


def paired_order(x: np.ndarray, confidence: float) -> tuple[list[int], list[int]]:
    """For each policy, how many others are significantly above it and how many below, by paired
    comparisons of per-scenario uniform means (paired t, Holm-adjusted over every pair). The pairs
    are per-scenario uniform means (proportions, not single trials), so the paired t applies."""
    per = x.mean(axis=1)  # policies x scenarios: each scenario's uniform mean over columns
    m, k = per.shape
    scen = np.arange(k)
    pairs = list(combinations(range(m), 2))
    tests = [paired_interval(per[i], per[j], scen, False, confidence=confidence) for i, j in pairs]
    p_holm = holm([t.test.p_value for t in tests])
    above, below = np.zeros(m, int), np.zeros(m, int)
    for (i, j), t, p in zip(pairs, tests, p_holm, strict=True):
        if p is not None and p < 1 - confidence:
            winner, loser = (i, j) if t.difference.estimate > 0 else (j, i)  # type: ignore[operator]
            above[loser] += 1
            below[winner] += 1
    return [int(a) for a in above], [int(b) for b in below]


def paired_ranks(x: np.ndarray, confidence: float) -> list[int]:
    """Rank of each policy from its paired comparisons: 1 + the policies significantly above it."""
    above, _ = paired_order(x, confidence)
    return [1 + a for a in above]


def paired_rank_ranges(x: np.ndarray, confidence: float) -> list[tuple[int, int]]:
    """The ranks each policy can hold given the paired comparisons: from 1 + those significantly
    above it to the number of policies minus those significantly below it."""
    above, below = paired_order(x, confidence)
    m = x.shape[0]
    return [(1 + a, m - b) for a, b in zip(above, below, strict=True)]


def rank_intervals(x: np.ndarray, confidence: float, n_resamples: int, seed: int) -> tuple[list[int], list[int]]:
    """Quantiles of each policy's rank (1 + policies strictly above) over scenario bootstrap
    resamples, all policies resampled with the same scenarios."""
    return rank_bounds(_uniform(resampled_means(x, n_resamples, seed)), confidence)


def nash_bootstrap(x: np.ndarray, n: int, confidence: float, n_resamples: int, seed: int
                   ) -> tuple[list[Interval], list[float]]:
    """Nash values with the equilibrium re-solved on every scenario resample, so their intervals
    carry the equilibrium's own uncertainty; and each policy's share of resamples in the support."""
    p_count, k = x.shape[0], x.shape[-1]
    cells = resampled_means(x, n_resamples, seed)  # policies x columns x B
    values = np.empty((p_count, n_resamples))
    support = np.zeros(p_count)
    for b in range(n_resamples):
        # The LP's equilibrium: on resampled data the equilibrium is generically unique, and then
        # it is the maximum-entropy one (whose extra LPs would cost ten times as much per resample).
        p_b, q_b, _, _ = maxent_nash(cells[:, :, b], maxent=False)
        values[:, b] = cells[:, :, b] @ q_b
        support += p_b > 1e-6
    _, q_star, _, _ = maxent_nash(x.mean(axis=-1))
    est = x.mean(axis=-1) @ q_star
    low, high, _ = bootstrap_bounds(est, values, None, confidence)  # percentile: no jackknife of a re-solved game
    out = [make_interval(float(e), float(lo), float(hi),
                         f"bootstrap percentile (scenarios), equilibrium re-solved on each of {n_resamples} resamples",
                         confidence, n, k) for e, lo, hi in zip(est, low, high, strict=True)]
    return out, [float(s / n_resamples) for s in support]


def rank_rule(intervals: list[Interval]) -> list[int | None]:
    """1 + the number of others whose lower bound is above this one's upper bound."""
    if any(iv.low is None or iv.high is None for iv in intervals):
        return [None] * len(intervals)
    return [1 + sum(other.low > iv.high for other in intervals) for iv in intervals]


UNIFORM_METHOD = "cluster bootstrap {} (scenarios), uniform mean over columns"


def _tensor(frame: pd.DataFrame, metric: str):
    x, policies, columns, dropped, n, dropped_columns = scenario_tensor(frame, metric)
    if x.shape[-1] == 0:
        raise UserError(f"no scenario has every cell scored with a defined {metric}; nothing to rank on the same games")
    return x, policies, columns, dropped, n, dropped_columns


def _policy_sizes(frame: pd.DataFrame, metric: str, policies: list[str], columns: list[tuple[str, str]],
                  k: int) -> tuple[str, dict[str, np.ndarray]]:
    """The metric's kind, and per policy the scored episodes behind each of the scenarios of the tensor."""
    data, kind = scored_with_metric(frame, metric)
    data = data[_in_columns(data, columns)]
    sizes = {}
    for p in policies:
        per = data[data["policy"] == p].groupby(data["scenario_id"].astype(str)).size()
        sizes[p] = per.to_numpy()
    return kind, sizes


def uniform_means(frame: pd.DataFrame, metric: str = "success_at_1", confidence: float = 0.95,
                  view: str = "panel", n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict[str, Interval]:
    """Each policy's uniform mean over columns (counterpart x role), with its interval.

    view "panel": the columns are fixed, scenarios resampled: the engine's rate interval (rates) or
    t over scenarios (scores) on each scenario's mean over columns. view "crossed": the counterparts
    are a sample too (`intervals.crossed_interval` over scenarios x counterparts, roles averaged
    within a counterpart), the interval a claim of generalisation to unseen counterparts needs."""
    x, policies, columns, _, n, _ = _tensor(frame, metric)
    k = x.shape[-1]
    kind, sizes = _policy_sizes(frame, metric, policies, columns, k)
    out = {}
    for i, p in enumerate(policies):
        per_scenario = x[i].mean(axis=0)
        if view == "crossed":
            counterparts = list(dict.fromkeys(c for c, _ in columns))
            by_cp = np.stack([x[i][[j for j, (c, _) in enumerate(columns) if c == cp]].mean(axis=0)
                              for cp in counterparts], axis=1)  # scenarios x counterparts
            out[p] = crossed_interval(by_cp, n=n // len(policies), confidence=confidence, n_resamples=n_resamples,
                                      seed=seed, limits=(0.0, 1.0) if kind == "rate" else None).difference
            if out[p].low is None and kind == "rate" and len(sizes[p]) == k:
                # Every game at 0 (or at 1): nothing varies to resample, yet the rate is not known
                # exactly; the rate interval over scenarios still bounds it (never a bare 100%).
                out[p] = proportion_interval(per_scenario, sizes[p], confidence)
        elif kind == "rate" and len(sizes[p]) == k:
            out[p] = proportion_interval(per_scenario, sizes[p], confidence)
        else:
            out[p] = scenario_mean_interval(per_scenario, n // len(policies), confidence)
    return out


def rankings(frame: pd.DataFrame, metric: str = "success_at_1", confidence: float = 0.95,
             n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, nash_resamples: int = 200) -> Rankings:
    """The three rankings. Uniform: intervals as `uniform_means`, ranks from paired comparisons,
    rank intervals from the bootstrap; Nash: the equilibrium re-solved on `nash_resamples`
    scenario resamples; IQM: the scenario bootstrap."""
    x, policies, columns, dropped, n, dropped_columns = _tensor(frame, metric)
    k = x.shape[-1]
    kw = dict(n=n, confidence=confidence, n_resamples=n_resamples, seed=seed)
    means_by = uniform_means(frame, metric, confidence, "panel", n_resamples, seed)
    means = [means_by[p] for p in policies]
    if k >= 2:
        ranks = paired_ranks(x, confidence)
        lows, highs = rank_intervals(x, confidence, n_resamples, seed)
    else:
        ranks, lows, highs = [None] * len(policies), [None] * len(policies), [None] * len(policies)
    uniform = [PolicyRank(policy=p, mean=iv, rank=r, rank_low=lo, rank_high=hi)
               for p, iv, r, lo, hi in zip(policies, means, ranks, lows, highs, strict=True)]

    cells = x.mean(axis=-1)
    p_star, q_star, value, solver = maxent_nash(cells)
    if k >= 2:
        nash_ivs, in_support = nash_bootstrap(x, n, confidence, nash_resamples, seed)
    else:
        nash_ivs = _intervals(x, _weighted(q_star), "none {}", **kw)
        in_support = [None] * len(policies)
    counterpart_weights: dict[str, float] = {}
    for (c, _), w in zip(columns, q_star, strict=True):
        counterpart_weights[c] = counterpart_weights.get(c, 0.0) + float(w)
    nash = NashAveraging(
        solver=solver, game_value=value, n_resamples=nash_resamples if k >= 2 else 0, merge_tolerance=MERGE_TOLERANCE,
        columns=[ColumnWeight(counterpart=c, policy_role=r, weight=float(w))
                 for (c, r), w in zip(columns, q_star, strict=True)],
        counterpart_weights=counterpart_weights,
        values=[NashValue(policy=p, weight=float(w), value=iv, p_support=s)
                for p, w, iv, s in zip(policies, p_star, nash_ivs, in_support, strict=True)],
    )

    keep = cells.max(axis=0) > 0
    norm_dropped = [col for col, ok in zip(columns, keep, strict=True) if not ok]
    if keep.any():
        norm_ivs = _intervals(x[:, keep], _normalized_iqm,
                              "cluster bootstrap {} (scenarios), IQM of score / column best", **kw)
    else:
        norm_ivs = [Interval(estimate=None, low=None, high=None, method="none (no column with a positive best)",
                             confidence=confidence, n=n, n_clusters=k)] * len(policies)
    return Rankings(
        metric=metric, confidence=confidence, n_scenarios=k, n_scenarios_dropped=dropped, columns=columns,
        uniform=sorted(uniform, key=lambda r: -(r.mean.estimate if r.mean.estimate is not None else -np.inf)),
        nash=nash,
        normalized=[NormalizedScore(policy=p, iqm=iv) for p, iv in zip(policies, norm_ivs, strict=True)],
        normalized_dropped=norm_dropped, columns_dropped=dropped_columns,
        rank_rule=RANK_RULE.format(lo=100 * (1 - confidence) / 2, hi=100 * (1 + confidence) / 2),
    )
