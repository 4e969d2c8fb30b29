"""How many scenarios and seeds a comparison needs: power from clustered standard errors.

The model (Miller 2024, "Adding Error Bars to Evals", sections on clustered standard errors,
resampling and power): an episode's outcome is its scenario's mean plus noise,
y[s, j] = mu + u[s] + e[s, j], with Var(u) = sd_between^2 across scenarios and
Var(e) = sd_within^2 across seeds of one scenario. The mean over n scenarios of K seeds each
has variance (sd_between^2 + sd_within^2 / K) / n: more seeds shrink only the within part, so
past a point only more scenarios help.

For the difference of two policies on the same scenarios (paired), the scenario effects cancel
as far as they are shared (correlation `corr` between the two policies' scenario means):

    Var per scenario = 2 sd_between^2 (1 - corr) + 2 sd_within^2 / K

(unpaired: corr = 0, as if on different scenarios). A two-sided test at level alpha detects a
difference delta with the given power when n >= (z[1 - alpha/2] + z[power])^2 Var / delta^2
(normal approximation).

For 0/1 outcomes with rate p, sd_between^2 + sd_within^2 = p (1 - p), split by the intraclass
correlation icc = sd_between^2 / (p (1 - p)). From a pilot run, all three parameters can be
estimated (`estimate_components`, one-way ANOVA per cell).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field
from scipy import stats

from ibrl_bench.errors import UserError
from ibrl_bench.stats.paired import scored_with_metric

METHOD = ("normal approximation with clustered standard errors (Miller 2024): "
          "n = (z[1-alpha/2] + z[power])^2 (2 sd_between^2 (1 - corr) + 2 sd_within^2 / K) / delta^2")


class Components(BaseModel):
    """The variance components of one metric, for one policy (assumed alike for both sides)."""

    sd_between: float = Field(ge=0)  # SD of scenario means across scenarios
    sd_within: float = Field(ge=0)  # SD of an episode around its scenario's mean
    corr: float = Field(ge=-1, le=1)  # correlation of two policies' scenario means
    source: str  # where they come from ("given", "rate 0.80, icc 0.30", "estimated from RUN ...")
    n_scenarios: int | None = None  # scenarios of the pilot run they were estimated from, if any


class PlanRow(BaseModel):
    seeds: int
    scenarios: int  # to run: the number needed, or every scenario of the split when it needs more
    episodes: int  # per policy and cell: scenarios x seeds
    design_effect: float  # variance of a mean vs as many independent episodes: 1 + (K - 1) icc
    needed: int  # scenarios the power calculation asks for (may exceed the split)
    enough: bool = True  # the split holds `needed` scenarios
    detectable: float | None = None  # smallest difference detected with `scenarios` (when not enough)
    needed_range: tuple[int, int] | None = None  # `needed` at the pilot variance's 95% bounds


class Plan(BaseModel):
    delta: float
    alpha: float
    power: float
    paired: bool
    components: Components
    rows: list[PlanRow]
    max_scenarios: int | None = None  # scenarios the split holds
    method: str = METHOD


def from_rate(rate: float, icc: float, corr: float) -> Components:
    if not 0 < rate < 1:
        raise UserError(f"--rate must be strictly between 0 and 1, got {rate}")
    if not 0 <= icc <= 1:
        raise UserError(f"--icc must be in [0, 1], got {icc}")
    var = rate * (1 - rate)
    return Components(sd_between=math.sqrt(icc * var), sd_within=math.sqrt((1 - icc) * var), corr=corr,
                      source=f"rate {rate:g}, icc {icc:g}")


def variance_per_scenario(c: Components, seeds: int, paired: bool = True) -> float:
    """Variance of one scenario's mean difference between two policies played `seeds` times each."""
    corr = c.corr if paired else 0.0
    return 2 * c.sd_between**2 * (1 - corr) + 2 * c.sd_within**2 / seeds


def scenarios_needed(delta: float, variance: float, alpha: float = 0.05, power: float = 0.8) -> int:
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return max(2, math.ceil(z**2 * variance / delta**2))


def detectable_difference(n_scenarios: int, variance: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest difference detected with this power on n scenarios."""
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return z * math.sqrt(variance / n_scenarios)


def variance_range(c: Components, confidence: float = 0.95) -> tuple[float, float] | None:
    """How far the pilot's variance could be off: the chi-square interval of a variance estimated
    from k scenarios (k - 1 degrees of freedom), as factors on the estimate."""
    k = c.n_scenarios
    if not k or k < 2:
        return None
    a = (1 - confidence) / 2
    return (k - 1) / stats.chi2.ppf(1 - a, k - 1), (k - 1) / stats.chi2.ppf(a, k - 1)


def plan(delta: float, components: Components, seeds: list[int], alpha: float = 0.05, power: float = 0.8,
         paired: bool = True, max_scenarios: int | None = None) -> Plan:
    """Scenarios needed per number of seeds; never more than `max_scenarios` (the split's size):
    where more would be needed, the row runs every scenario and says the smallest difference that
    detects. With a pilot run, each row also gives the range the answer moves over as the pilot's
    variance ranges over its 95% interval."""
    if delta <= 0:
        raise UserError(f"--delta must be positive, got {delta}")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise UserError("--alpha and --power must be strictly between 0 and 1")
    total = components.sd_between**2 + components.sd_within**2
    icc = components.sd_between**2 / total if total > 0 else 0.0
    factors = variance_range(components)
    rows = []
    for k in seeds:
        var = variance_per_scenario(components, k, paired)
        n = scenarios_needed(delta, var, alpha, power)
        run = min(n, max_scenarios) if max_scenarios else n
        enough = run == n
        spread = (scenarios_needed(delta, var * factors[0], alpha, power),
                  scenarios_needed(delta, var * factors[1], alpha, power)) if factors else None
        rows.append(PlanRow(seeds=k, scenarios=run, episodes=run * k, design_effect=1 + (k - 1) * icc, needed=n,
                            enough=enough, detectable=None if enough else detectable_difference(run, var, alpha, power),
                            needed_range=spread))
    return Plan(delta=delta, alpha=alpha, power=power, paired=paired, components=components, rows=rows,
                max_scenarios=max_scenarios)


def _anova(rows: pd.DataFrame) -> tuple[float, float] | None:
    """(between, within) variance of one cell by one-way ANOVA over scenarios; None without seeds."""
    groups = rows.groupby("scenario_id")["y"]
    sizes, means = groups.size(), groups.mean()
    dof = int(sizes.sum() - len(sizes))
    if dof <= 0 or len(sizes) < 2:
        return None
    within = float(((rows["y"] - rows["scenario_id"].map(means)) ** 2).sum() / dof)
    between = max(0.0, float(means.var(ddof=1)) - within * float((1 / sizes).mean()))
    return between, within


def estimate_components(frame: pd.DataFrame, metric: str = "success_at_1", icc: float | None = None,
                        corr: float | None = None, source: str = "the run") -> Components:
    """Variance components of a metric estimated from a run (pooled over its cells).

    Between/within split: one-way ANOVA per cell, averaged. It needs several seeds per scenario;
    with one, give `icc` and the total variance is split by it. The correlation between policies:
    covariance of two policies' scenario means on the same cell over the product of their
    between-scenario SDs (the within noise of different episodes is independent), averaged over
    pairs of policies and cells; `corr` overrides it.
    """
    data, _ = scored_with_metric(frame, metric)
    if data.empty:
        raise UserError(f"{source} has no scored episode with a defined {metric}")
    parts, totals = [], []
    for _, rows in data.groupby(["policy", "counterpart", "policy_role"]):
        totals.append(float(rows["y"].var(ddof=1)) if len(rows) > 1 else 0.0)
        if (a := _anova(rows)) is not None:
            parts.append(a)
    if icc is not None:
        total = float(np.mean(totals))
        between, within = icc * total, (1 - icc) * total
        how = f"total variance from {source}, icc {icc:g} given"
    elif parts:
        between, within = (float(np.mean(v)) for v in zip(*parts, strict=True))
        how = f"estimated from {source} (one-way ANOVA per cell)"
    else:
        raise UserError(f"{source} has one seed per scenario, so the variance between scenarios cannot be told apart "
                        "from the variance between seeds; give --icc (e.g. 0.3), or use a run with --seeds 2 or more")
    if corr is None:
        corr = _policy_correlation(data, between)
        how += ", corr estimated" if corr is not None else ", one policy: corr 0"
        corr = 0.0 if corr is None else corr
    return Components(sd_between=math.sqrt(between), sd_within=math.sqrt(within), corr=corr, source=how,
                      n_scenarios=int(data["scenario_id"].nunique()))


def _policy_correlation(data: pd.DataFrame, between: float) -> float | None:
    if between <= 0:
        return None
    means = data.groupby(["counterpart", "policy_role", "scenario_id", "policy"])["y"].mean().unstack("policy")
    policies = list(means.columns)
    covs = []
    for i, a in enumerate(policies):
        for b in policies[i + 1:]:
            for _, cell in means[[a, b]].dropna().groupby(level=["counterpart", "policy_role"]):
                if len(cell) > 2:
                    covs.append(float(np.cov(cell[a], cell[b], ddof=1)[0, 1]))
    if not covs:
        return None
    return float(np.clip(np.mean(covs) / between, -1.0, 1.0))

