"""Terminal output with rich: the cell table of a run and a transcript printed turn by turn."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ibrl_bench.domains.base import Outcome, Turn
from ibrl_bench.stats.intervals import Interval
from ibrl_bench.stats.matrix import Results

# (metric key, column title, shown as a percentage)
COLUMNS = [
    ("success_at_1", "Success@1", True),
    ("agreement", "agreement", True),
    ("policy_score", "policy score", False),
    ("counterpart_score", "counterpart score", False),
    ("pareto", "Pareto (of deals)", True),
    ("policy_invalid", "policy invalid", True),
]


def fmt(iv: Interval | None, percent: bool) -> str:
    if iv is None or iv.estimate is None:
        return "n/a"
    scale, spec = (100, ".0f") if percent else (1, ".2f")
    est = format(iv.estimate * scale, spec)
    if iv.low is None or iv.high is None:
        return est
    return f"{est} [{format(iv.low * scale, spec)}, {format(iv.high * scale, spec)}]"


def cells_table(results: Results, title: str | None = None) -> Table:
    table = Table(title=title, header_style="bold", show_lines=False)
    for name in ("policy", "counterpart", "role", "n", "err"):
        table.add_column(name, no_wrap=name in ("role", "n", "err"), justify="right" if name in ("n", "err") else "left")
    for _, title_, _ in COLUMNS:
        table.add_column(title_, justify="right")
    for cell in results.cells:
        table.add_row(
            cell.policy,
            cell.counterpart,
            cell.policy_role,
            str(cell.n_scored),
            str(cell.n_errors) if cell.n_errors else "",
            *(fmt(cell.metrics.get(key), pct) for key, _, pct in COLUMNS),
        )
    return table


def methods_note(results: Results) -> str:
    methods = sorted({iv.method for c in results.cells for iv in c.metrics.values() if iv.low is not None})
    level = f"{results.confidence:.0%}"
    return f"{level} intervals; rates in %; methods: {'; '.join(methods) or 'none'}"


def print_transcript(console: Console, transcript: list[Turn], outcome: Outcome, labels: dict[str, str]) -> None:
    for t in transcript:
        tag = "" if t.public else " [dim](private)[/dim]"
        who = f"[bold]{t.role}[/bold] ({labels.get(t.role, '')}){tag}"
        console.print(f"{who}: ", end="")
        console.print(t.text, markup=False, highlight=False)
        if t.violation:
            console.print(f"  [red]violation: {t.violation}[/red]")
    rewards = ", ".join(f"{r}={v:g}" for r, v in outcome.rewards.items())
    console.print(
        f"[bold]outcome[/bold]: status={outcome.status} agreement={outcome.agreement} rewards: {rewards}"
        + (f" ({outcome.detail})" if outcome.detail else "")
    )
