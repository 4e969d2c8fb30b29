"""Adaptive sampling (`crossplay --target-halfwidth H`): more episodes only where an interval is
still wider than H.

The rule, fixed before any episode is played:

- Each cell's episodes are taken in one fixed order: every scenario of the split once (seed 0, in
  the split's order), then every scenario again with seed 1, and so on: new scenarios first, then
  seeds. The split (`--scenarios N` x `--seeds S`) is the most a cell can get.
- The looks are fixed: a cell is looked at when it holds n_0 = `INITIAL` episodes, then
  n_{r+1} = ceil(`GROWTH` x n_r), up to N x S (`looks`). Their number K depends on N, S and these
  constants alone, never on the data.
- At each look, every cell still open gets the interval of the target metric from the interval
  engine (stats/intervals.py via stats/cells.py) at the per-look level `LOOK_CONFIDENCE` (97%).
  A cell whose half-width (high - low) / 2 is at most H stops there and reports that interval;
  the others get the episodes up to the next look. A cell stops too when its split runs out, or
  when the budget does.

Why 97% a look and not 95%: a cell that stops early stops because its interval came out narrow,
and a rate's interval is narrow when its estimate is far from 1/2, so the stopping rule leans on
the estimate and the 95% interval at a fixed size covers less than 95% at the stop
(measured: down to 0.947). Bonferroni over the K looks (each at 1 - 0.05 / K) guarantees 95%
for any rule, but with K near 20 it asks about twice the episodes, which undoes the saving. At
97% a look the measured coverage of this rule stays above 95% over true rates from 0.1 to 0.99
and targets from 0.03 to 0.12 (benchmarks/adaptive_sampling.py measures it with the engine's own
intervals). The coverage is therefore measured, not proven: see docs/statistics.md.

Resuming: rerunning the command replays the same rounds; each look reads only the first n_r
episodes of its cell in the fixed order, so the decisions already taken are taken again.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import BaseModel

from ibrl_bench.errors import UserError
from ibrl_bench.stats.cells import cell_metrics, metric_names
from ibrl_bench.stats.intervals import Interval

INITIAL = 10  # episodes of a cell at its first look
GROWTH = 1.25  # each look holds this many times the episodes of the one before
LOOK_CONFIDENCE = 0.97  # each look's interval level, at which the rule covers 95% (measured; above)
NOMINAL = 0.95  # what the rule's intervals are meant to cover
DEFAULT_METRIC = "success_at_1"


class CellStop(BaseModel):
    policy: str
    counterpart: str
    policy_role: str
    planned: int  # episodes the design gave the cell: its size at the stopping look
    episodes: int  # of those, the ones recorded (error episodes included; fewer after a budget stop)
    looks: int  # looks the cell took part in
    reason: str  # "reached H", "split exhausted", "budget"
    interval: Interval  # the target metric at the stopping look, at the adjusted level

    @property
    def halfwidth(self) -> float | None:
        width = halfwidth(self.interval)
        return None if math.isinf(width) else width


class AdaptiveReport(BaseModel):
    metric: str
    target_halfwidth: float
    looks: list[int]
    confidence: float  # of each look's interval (LOOK_CONFIDENCE)
    rule: str
    cells: list[CellStop]

    @property
    def episodes(self) -> int:
        return sum(c.episodes for c in self.cells)


def looks(cap: int, initial: int = INITIAL, growth: float = GROWTH) -> list[int]:
    """The cell sizes at which cells are looked at; fixed by the split's size alone."""
    sizes = [min(initial, cap)]
    while sizes[-1] < cap:
        sizes.append(min(cap, math.ceil(sizes[-1] * growth)))
    return sizes


def rule_text(sizes: list[int], confidence: float, target: float, metric: str) -> str:
    return (f"looks at {', '.join(map(str, sizes))} episodes per cell (scenarios first, then seeds), fixed before "
            f"the data; at each, the {metric} interval at {confidence:.1%} (so that the stopped cells' intervals cover "
            f"{NOMINAL:.0%}, measured: docs/statistics.md); a cell stops once its half-width is at most {target:g}")


def halfwidth(iv: Interval) -> float:
    return math.inf if iv.low is None or iv.high is None else (iv.high - iv.low) / 2


def stop_reason(width: float, n: int, cap: int, target: float) -> str | None:
    """Why a cell stops at a look of `n` episodes whose interval has half-width `width`, or None."""
    if width <= target:
        return "reached H"
    if n >= cap:
        return "split exhausted"
    return None


async def run_adaptive(runner, on_progress: Callable | None = None) -> AdaptiveReport:
    """Play `runner` (a Crossplay whose config sets target_halfwidth) round by round."""
    from ibrl_bench.runner.crossplay import RunAborted
    from ibrl_bench.stats.matrix import episodes_table, frame_of

    config = runner.config
    metric = config.target_metric or DEFAULT_METRIC
    ordered: dict[tuple, list] = {}
    for job in runner.jobs():
        ordered.setdefault((job.policy, job.counterpart, job.policy_role), []).append(job)
    order = {s.id: i for i, s in enumerate(runner.scenario_set.scenarios)}
    for jobs in ordered.values():  # new scenarios first, then seeds
        jobs.sort(key=lambda j: (j.seed, order[j.scenario.id]))
    sizes = looks(len(next(iter(ordered.values()))))
    confidence = LOOK_CONFIDENCE
    open_cells = list(ordered)
    stops: dict[tuple, CellStop] = {}
    stopped_by: RunAborted | None = None
    try:
        for r, n in enumerate(sizes):
            try:
                await runner.run(on_progress, jobs=[j for cell in open_cells for j in ordered[cell][:n]],
                                 close_agents=False)
            except RunAborted as e:
                if runner.budget is None or runner.budget.refused == 0:
                    raise
                stopped_by = e
            latest = {row["key"]: row for row in runner.store.episodes()}
            for cell in list(open_cells):
                frame = frame_of(episodes_table([latest[j.key] for j in ordered[cell][:n] if j.key in latest]))
                if metric not in metric_names(frame):
                    raise UserError(f"--target-metric {metric} is not a metric of this run; "
                                    f"choose one of {', '.join(metric_names(frame))}")
                iv = cell_metrics(frame, confidence)[metric]
                reason = "budget" if stopped_by is not None else stop_reason(halfwidth(iv), n, sizes[-1],
                                                                              config.target_halfwidth)
                if reason:
                    stops[cell] = CellStop(policy=cell[0], counterpart=cell[1], policy_role=cell[2],
                                           planned=n, episodes=len(frame), looks=r + 1, reason=reason, interval=iv)
                    open_cells.remove(cell)
            if stopped_by is not None or not open_cells:
                break
    finally:
        await runner.aclose_agents()
    report = AdaptiveReport(metric=metric, target_halfwidth=config.target_halfwidth, looks=sizes,
                            confidence=confidence, rule=rule_text(sizes, confidence, config.target_halfwidth, metric),
                            cells=[stops[cell] for cell in ordered])
    runner.store.write_text("adaptive.json", report.model_dump_json(indent=2))
    if stopped_by is not None:
        raise stopped_by
    return report


def adaptive_table(report: AdaptiveReport):
    from rich.table import Table

    table = Table(title=f"adaptive sampling: {report.metric} to half-width {report.target_halfwidth:g} "
                        f"({report.episodes} episodes)")
    for name in ("policy", "counterpart", "role", "episodes", "estimate", "interval", "half-width", "stopped"):
        table.add_column(name, justify="right" if name in ("episodes", "estimate", "half-width") else "left")

    def fmt(x):
        return "-" if x is None else f"{x:.3f}"

    for c in report.cells:
        iv = c.interval
        table.add_row(c.policy, c.counterpart, c.policy_role, str(c.episodes), fmt(iv.estimate),
                      f"[{fmt(iv.low)}, {fmt(iv.high)}]", fmt(c.halfwidth), c.reason)
    return table


async def play_matrix(runner, on_progress: Callable | None = None) -> None:
    """What `crossplay` plays: the whole matrix, or with target_halfwidth set, the adaptive rounds."""
    if runner.config.target_halfwidth is None:
        await runner.run(on_progress)
    else:
        await run_adaptive(runner, on_progress)


def planned(runner) -> tuple[int, AdaptiveReport | None]:
    """The episodes the command planned (see `planned_in`), and the adaptive report where there is one."""
    report = read_report(runner.store.folder) if runner.config.target_halfwidth is not None else None
    return planned_in(runner.store.folder, runner.manifest().identity, report is not None), report


def planned_in(folder, identity: dict, adaptive: bool) -> int:
    """The episodes a run folder's command planned: for an adaptive run that finished, the sizes
    its cells stopped at (adaptive.json); otherwise the whole matrix of `identity`. The one count
    that `show`, the analyses and the report call a run finished against."""
    from ibrl_bench.runner.crossplay import planned_episodes

    report = read_report(folder) if adaptive else None
    return sum(c.planned for c in report.cells) if report is not None else planned_episodes(identity)


def read_report(folder) -> AdaptiveReport | None:
    from pathlib import Path

    path = Path(folder) / "adaptive.json"
    return AdaptiveReport.model_validate_json(path.read_text()) if path.is_file() else None


def print_adaptive(report: AdaptiveReport, console) -> None:
    """The per-cell stops of an adaptive run, with the rule."""
    console.print(adaptive_table(report))
    console.print(f"[dim]rule: {report.rule}. The cell table above holds the fixed-size {NOMINAL:.0%} "
                  "intervals of the same episodes, which do not allow for the stopping rule[/dim]", highlight=False)
