"""Terminal output with rich: the cell table of a run and a transcript printed turn by turn."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ibrl_bench.domains.base import Outcome, Turn
from ibrl_bench.report.numbers import decimals, format_interval, methods_note
from ibrl_bench.secrets import scrub

if TYPE_CHECKING:  # annotations only: `play` prints a transcript without loading scipy and pandas
    from ibrl_bench.stats.matrix import Results

# (metric key, column title, shown as a percentage)
COLUMNS = [
    ("success_at_1", "Success@1", True),
    ("agreement", "agreement", True),
    ("policy_score", "score", False),
    ("counterpart_score", "cpt score", False),
    ("pareto_optimal", "Pareto", True),
    ("price_share_of_list", "price/list", True),
    ("policy_invalid", "invalid", True),
]


def short(spec: str, domain: str) -> str:
    """Scripted agents of the run's own domain by name alone; other specs as given."""
    return spec.removeprefix(f"scripted:{domain}/")


def cells_table(results: Results, title: str | None = None, width: int = 160) -> Table:
    # A domain's own metrics only where its episodes define them (no Pareto column in TeleSales).
    columns = [col for col in COLUMNS if any(col[0] in c.metrics for c in results.cells)]
    # In games where Success@1 is agreement (Deal-or-NoDeal), one column says it all.
    if all(c.metrics.get("agreement") == c.metrics.get("success_at_1") for c in results.cells):
        columns = [col for col in columns if col[0] != "agreement"]
    columns_err = any(c.n_errors for c in results.cells)
    table = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                  show_lines=width < 120)
    stacked = width < 120
    if stacked:  # below 120 columns: intervals under the estimates, and no counterpart score
        columns = [col for col in columns if col[0] != "counterpart_score"]
    table.add_column("policy", overflow="fold", min_width=11)
    table.add_column("counterpart", overflow="fold", min_width=11)
    table.add_column("role", no_wrap=True)
    table.add_column("n", justify="right", no_wrap=True)
    if columns_err:
        table.add_column("err", justify="right", no_wrap=True)
    for _, heading, _ in columns:
        table.add_column(heading, justify="right", no_wrap=not stacked)
    # A score column's precision follows its scale (TeleSales 0-1: two decimals; points 0-10: one).
    places = {key: decimals(c.metrics[key].estimate for c in results.cells if key in c.metrics)
              for key, _, pct in columns if not pct}
    for cell in results.cells:
        table.add_row(
            short(cell.policy, results.domain),
            short(cell.counterpart, results.domain),
            cell.policy_role,
            str(cell.n_scored),
            *([str(cell.n_errors) if cell.n_errors else ""] if columns_err else []),
            *(format_interval(cell.metrics.get(key), pct, digits=places.get(key), stacked=stacked)
              for key, _, pct in columns),
        )
    return table


def cells_note(results: Results) -> str:
    """The note under the cell table: how its intervals were made, and how to read its numbers."""
    return methods_note((iv for c in results.cells for iv in c.metrics.values()),
                        "Rates in %, scores of the policy (cpt: counterpart)")


def print_transcript(console: Console, transcript: list[Turn], outcome: Outcome, labels: dict[str, str]) -> None:
    """Every text a model wrote passes the run log's masking (secrets.scrub) and is printed as is,
    never read as rich markup."""
    for t in transcript:
        tag = "" if t.public else " [dim](private)[/dim]"
        who = f"[bold]{t.role}[/bold] ({escape(labels.get(t.role, ''))}){tag}"
        console.print(f"{who}: ", end="")
        console.print(scrub(t.text), markup=False, highlight=False)
        if t.violation:
            console.print(f"  [red]violation: {escape(scrub(t.violation))}[/red]")
    places = decimals(outcome.rewards.values(), whole=True)
    rewards = ", ".join(f"{r}={v:.{places}f}" for r, v in outcome.rewards.items())
    console.print(
        f"[bold]outcome[/bold]: status={outcome.status} agreement={outcome.agreement} rewards: {rewards}"
        + (f" ({escape(scrub(outcome.detail))})" if outcome.detail else "")
    )


def episodes_listing(episodes: list, domain: str, limit: int) -> Table:
    """One row per episode (the first `limit`): what it was and how it ended, from the policy's side."""
    table = Table(header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for name, right in (("episode", False), ("policy", False), ("counterpart", False), ("role", False),
                        ("scenario", False), ("seed", True), ("status", False), ("success", False),
                        ("score", True), ("cpt score", True), ("moves", True)):
        table.add_column(name, justify="right" if right else "left", overflow="fold")
    shown = episodes[:limit]
    places = decimals((v for e in shown for v in e.outcome.rewards.values()), whole=True)
    for e in shown:
        o = e.outcome
        other = next((r for r in e.agents if r != e.policy_role), None)
        table.add_row(e.key, short(e.policy, domain), short(e.counterpart, domain), e.policy_role, e.scenario_id,
                      str(e.seed), o.status, "yes" if o.success else "no",
                      f"{o.rewards.get(e.policy_role, 0):.{places}f}",
                      f"{o.rewards.get(other, 0):.{places}f}" if other else "", str(o.turns))
    return table


def print_episode(console: Console, record, scenario_text: str | None) -> None:
    """One recorded episode: its seats, what each side knew, every move, and how it ended."""
    console.print(f"[bold]episode {record.key}[/bold]  {record.scenario_id}  seed={record.seed}  "
                  f"policy {record.policy} as {record.policy_role} vs {record.counterpart}"
                  + (f"  ({record.starter} opens)" if record.starter else ""), highlight=False)
    if scenario_text is not None:
        console.print(scenario_text, markup=False, highlight=False)
    else:
        console.print("[dim](the scenario could not be rebuilt as it was played: private information not shown)[/dim]")
    labels = {role: spec for role, spec in record.agents.items()}
    print_transcript(console, record.transcript, record.outcome, labels)
    if record.errors:
        console.print(f"[yellow]infrastructure errors ({record.attempts} attempts):[/yellow] "
                      + " | ".join(record.errors), markup=True, highlight=False)
