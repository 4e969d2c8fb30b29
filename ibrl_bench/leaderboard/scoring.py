"""The numbers of one leaderboard entry, from its episodes: the same function for the submitter
(who writes them into submission.json) and the verifier (who recomputes and compares them).

Per metric of the track (any cell metric, and `joint_score`: the points of both sides): the
overall estimate is the uniform mean over the panel's cells (counterpart x role), and each
counterpart's column the mean over its roles, both from the interval engine through
`stats.ranking.uniform_means`. The overall column is read as generalisation to counterparts the
policy never met, so its interval resamples scenarios and counterparts (the crossed view); a
counterpart's own column resamples scenarios. Episodes against a declared training
counterpart count only towards the mismatch: score against it minus the held-out panel, paired by
game, in the crossed view (`stats.mismatch`).

`SCORING_VERSION` numbers this recipe; a bundle states the one it was scored with, and the verifier
refuses another (`ibrl-bench leaderboard rescore BUNDLE` recomputes it from the bundle's episodes).
"""

from __future__ import annotations

from pydantic import BaseModel

from ibrl_bench.errors import UserError
from ibrl_bench.leaderboard.track import Track
from ibrl_bench.runner.store import EpisodeRecord
from ibrl_bench.stats.cells import DOMAIN_PREFIX
from ibrl_bench.stats.intervals import Interval
from ibrl_bench.stats.matrix import episodes_frame
from ibrl_bench.stats.mismatch import mismatch
from ibrl_bench.stats.ranking import uniform_means

# The version of how an entry's numbers are computed from its episodes. Bundles state their numbers
# and the verifier recomputes them: a change here (another interval method, resampling, seed)
# bumps it, and bundles scored under another version are re-scored (`ibrl-bench leaderboard rescore`).
# 1: the scenario bootstrap of the previous engine; 2: the interval engine, the overall column crossed.
SCORING_VERSION = 2
CONFIDENCE = 0.95
SEED = 0  # fixed, so that the verifier recomputes the very same intervals


class MetricSummary(BaseModel):
    overall: Interval
    per_counterpart: dict[str, Interval]


class EntryScores(BaseModel):
    metrics: dict[str, MetricSummary]
    mismatch: Interval | None = None  # primary metric: vs the training counterpart minus the panel


def overall_interval(frame, metric: str, confidence: float = CONFIDENCE, seed: int = SEED) -> Interval:
    """A board's overall column: the policy's uniform mean over the panel's cells, its interval
    resampling scenarios and counterparts (with a single counterpart, scenarios only)."""
    view = "crossed" if frame["counterpart"].nunique() >= 2 else "panel"
    return _uniform_mean(frame, metric, view, confidence, seed)


def _uniform_mean(frame, metric: str, view: str = "panel", confidence: float = CONFIDENCE,
                  seed: int = SEED) -> Interval:
    """The one call into the interval engine for a board's columns: the uniform mean over the
    frame's cells (counterpart x role)."""
    try:
        (only,) = uniform_means(frame, metric=metric, confidence=confidence, view=view, seed=seed).values()
    except UserError:  # the metric is undefined on every episode here
        return Interval(estimate=None, low=None, high=None, method="none (no observations)",
                        confidence=CONFIDENCE, n=0, n_clusters=0)
    return only


def entry_scores(records: list[EpisodeRecord], track: Track, train_counterpart: str | None = None) -> EntryScores:
    # In key order: the bootstrap's floating-point sums depend on the order of the columns, and
    # the submitter's run and the verifier's bundle list the same episodes in different orders.
    frame = episodes_frame(sorted(records, key=lambda r: r.key))
    # The joint points of both sides, as a per-episode metric of its own (0 without a deal).
    frame[f"{DOMAIN_PREFIX}joint_score"] = frame["policy_score"] + frame["counterpart_score"]
    panel = frame[frame["counterpart"].isin(track.counterparts)]
    metrics = {}
    for metric in track.metrics:
        metrics[metric] = MetricSummary(
            overall=overall_interval(panel, metric),
            per_counterpart={c: _uniform_mean(panel[panel["counterpart"] == c], metric) for c in track.counterparts},
        )
    gap = None
    if train_counterpart:
        heldout = [c for c in track.counterparts if c != train_counterpart]
        policy = str(frame["policy"].iloc[0])
        result = mismatch(frame, policy, train_counterpart, heldout=heldout, metric=track.primary,
                          confidence=CONFIDENCE)
        gap = result.gap.difference
    return EntryScores(metrics=metrics, mismatch=gap)
