"""`ibrl-bench`: the command line. Thin: parses flags and calls into the modules."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sys
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import click
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ibrl_bench import __version__
from ibrl_bench.domains import DOMAINS
from ibrl_bench.errors import UserError
from ibrl_bench.secrets import register_environment, scrub

console = Console()
if not console.is_terminal:
    console = Console(width=160)  # a pipe or a log file has no width to fit; keep table rows whole
err_console = Console(stderr=True, soft_wrap=True)  # messages stay on one line

class Interrupted(Exception):
    """Ctrl-C inside a command; the message says how to resume, where the command can."""


@contextmanager
def interrupt_hint(hint: str | None):
    """Turn Ctrl-C inside the block into Interrupted(hint): each command says whether it resumes."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(hint or "") from None


RESUME_RUN = "rerun the same command with the same --out to resume"


class Finite(click.FloatRange):
    """A FloatRange that refuses nan, which passes every comparison of a range."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value!r} is not a number; give one such as 1.5", param, ctx)
        return number


MAX_SEEDS = 10_000
MAX_TURNS = 1_000  # messages; two agents that never settle would otherwise talk until memory runs out
MOVE_TIMEOUT = Finite(min=0, min_open=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ibrl-bench")
def cli() -> None:
    """Cross-play benchmark harness for strategic dialogue agents."""


@cli.command()
@click.option("--domain", type=click.Choice(DOMAINS), default=None, help="Game to play (default dealnodeal).")
@click.option("--policy", "policies", multiple=True, metavar="SPEC",
              help="Policy under evaluation; repeatable (panel:NAME adds a panel).")
@click.option("--counterpart", "counterparts", multiple=True, metavar="SPEC",
              help="Counterpart: a spec, card:NAME or panel:NAME; repeatable.")
@click.option("--panel", "panels", multiple=True, metavar="NAME",
              help="Add a panel's counterparts (counterparts/panels/NAME.yaml).")
@click.option("--role", "roles", multiple=True, metavar="ROLE", help="Role(s) the policy plays (default: every role).")
@click.option("--split", type=click.Choice(["train", "dev", "test"]), default="test", show_default=True)
@click.option("--scenarios", type=click.IntRange(min=1), default=50, show_default=True,
              help="First N scenarios of the split.")
@click.option("--contexts", type=click.Path(dir_okay=False), default=None,
              help="Deal-or-NoDeal: a Lewis-format context file instead of a split.")
@click.option("--seeds", type=click.IntRange(min=1, max=MAX_SEEDS), default=1, show_default=True,
              help="Seeds per scenario.")
@click.option("--max-turns", type=click.IntRange(min=2, max=MAX_TURNS), default=None,
              help="Message limit (domain default).")
@click.option("--concurrency", type=click.IntRange(min=1), default=16, show_default=True, help="Episodes in flight.")
@click.option("--retries", type=click.IntRange(min=0), default=2, show_default=True,
              help="Retries of an episode after an infrastructure error.")
@click.option("--move-timeout", type=MOVE_TIMEOUT, default=120.0, show_default=True,
              help="Seconds one move may take; time a local model's move waits queued behind other episodes' batches "
                   "does not count.")
@click.option("--fail-on-error", type=Finite(0, 1), default=0.2, show_default=True,
              help="Stop when this share of episodes ends in error.")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Run folder; an existing run there is resumed (default runs/crossplay-TIME).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Play in N local worker processes (Ray; pip install 'ibrl-bench[ray]'); --concurrency is shared "
                   "among them.")
@click.option("--ray", "ray_address", metavar="ADDRESS", default=None,
              help="Play on the Ray cluster at ADDRESS (e.g. auto); one worker per CPU, or per GPU for local model "
                   "seats, unless --workers says.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False), default=None,
              help="Response cache folder of model seats (default: the user's cache folder).")
@click.option("--no-cache", is_flag=True,
              help="Neither read nor write the response cache: every model move is paid for.")
@click.option("--budget-usd", type=Finite(0, min_open=True), default=None,
              help="Stop cleanly before this command pays more than this for model calls.")
@click.option("--dry-run", is_flag=True,
              help="Print the plan and its estimated tokens, cost and cache hits; play nothing.")
@click.option("--pilot", type=click.Path(file_okay=False, exists=True), default=None,
              help="With --dry-run: a run folder to measure calls and tokens per episode from.")
@click.option("--target-halfwidth", type=Finite(0, min_open=True), default=None,
              help="Add episodes in rounds (new scenarios, then seeds, up to --scenarios x --seeds) to cells whose "
                   "interval is wider than this (docs/statistics.md).")
@click.option("--target-metric", default=None, metavar="NAME",
              help="The metric --target-halfwidth narrows (default success_at_1).")
@interrupt_hint(RESUME_RUN)
def crossplay(domain, policies, counterparts, panels, roles, split, scenarios, contexts, seeds, max_turns,
              concurrency, retries, move_timeout, fail_on_error, workers, ray_address, out, quiet, cache_dir, no_cache,
              budget_usd, dry_run, pilot, target_halfwidth, target_metric) -> None:
    """Run the cross-play matrix: policies x counterparts x roles x scenarios x seeds.

    With no arguments: a demo matrix of scripted policies against the scripted held-out panel.
    Rerunning with the same --out resumes: only missing (or errored) episodes are played.
    """
    from ibrl_bench.runner.matrix import resolve_matrix

    matrix = resolve_matrix(
        domain, list(policies), list(counterparts), list(panels), list(roles), split=split, scenarios=scenarios,
        contexts_file=contexts, seeds=seeds, max_turns=max_turns, concurrency=concurrency, retries=retries,
        move_timeout=move_timeout, fail_on_error=fail_on_error, cache=not no_cache, cache_dir=cache_dir,
        budget_usd=budget_usd, target_halfwidth=target_halfwidth, target_metric=target_metric,
    )
    if pilot and not dry_run:
        raise UserError("--pilot goes with --dry-run (it measures what a run will cost); add --dry-run")
    if matrix.demo:
        err_console.print(f"[dim]{matrix.demo}[/dim]")
    if out is not None and not out.strip():
        raise UserError("--out is empty; give the run folder, or leave --out out for runs/crossplay-TIME")
    out = out or f"runs/crossplay-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"
    if dry_run:
        from ibrl_bench.runner.dryrun import dry_run_report

        table, lines = dry_run_report(matrix.config, Path(out), pilot)
        console.print(table)
        for line in lines:
            console.print(line, highlight=False)
        return
    from ibrl_bench.runner.workers import plan

    _run_crossplay(matrix.config, Path(out), quiet, plan(workers, ray_address))


def _run_crossplay(config, out: Path, quiet: bool, workers=None) -> None:
    from ibrl_bench.runner.adaptive import planned, play_matrix, print_adaptive
    from ibrl_bench.runner.crossplay import Crossplay, RunAborted

    runner = Crossplay(config, out, workers)
    bar = Progress(
        TextColumn("[bold]cross-play[/bold]"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[errors]} errors"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
        console=err_console, disable=quiet, transient=False,
    )
    task = bar.add_task("episodes", total=runner.total(), errors=0)

    announced = False

    def on_progress(p) -> None:
        nonlocal announced
        # A resumed folder is named at once; a new one with its first episode, since a run that
        # stops before any (a rejected key) leaves no folder behind.
        if not announced and p.resumed:
            grew = "; ".join(f"+{len(v)} {k}" for k, v in runner.store.added.items())
            doing = f"growing {out} ({grew})" if grew else f"resuming {out}"
            err_console.print(f"{doing}: {p.resumed} of {p.total} episodes already done", highlight=False)
            announced = True
        elif not announced and p.done + p.errors:
            err_console.print(f"run folder: {out}", highlight=False)
            announced = True
        bar.update(task, completed=p.done + p.errors, errors=p.errors)

    aborted: RunAborted | None = None
    with bar:
        try:
            asyncio.run(play_matrix(runner, on_progress))  # with --target-halfwidth, in rounds
        except RunAborted as e:
            aborted = e
        except KeyboardInterrupt:
            aborted = RunAborted(f"interrupted; finished episodes are kept in {out}: rerun with --out {out} to resume")
        finally:
            if not announced:  # stopped before its first episode: no bar is left behind its error line
                bar.live.transient = True
    if aborted and not runner.store.manifest_path.exists():
        raise aborted  # stopped before its first episode: the run left nothing behind
    n_planned, adaptive = planned(runner)
    results = runner.results(n_planned)
    runner.store.write_results(results)
    _print_results(results, out)
    if adaptive:
        print_adaptive(adaptive, console)
    if aborted:
        raise aborted


def _print_results(results, out: Path) -> None:
    from ibrl_bench.report.terminal import cells_note, cells_table

    title = f"{results.domain} · {results.scenario_set.get('split')} split · {out}"
    console.print(cells_table(results, title=title, width=console.width))
    console.print(f"[dim]{escape(cells_note(results))}[/dim]")
    seats = [u for c in results.cells for u in c.usage.values()]
    if any(u.prompt_tokens or u.completion_tokens or u.cache_hits for u in seats):
        prompt, completion = sum(u.prompt_tokens for u in seats), sum(u.completion_tokens for u in seats)
        cost = sum(u.cost_usd for u in seats)
        hits = sum(u.cache_hits for u in seats)
        saved = sum(u.saved_usd for u in seats)
        cached = f"; {hits:,} replies from the cache (${saved:.4f} not paid again)" if hits else ""
        console.print(f"usage: {prompt:,} prompt + {completion:,} completion tokens, ${cost:.4f} paid{cached} "
                      "(per cell and seat in results.json)", highlight=False)
    n_err = sum(c.n_errors for c in results.cells)
    if n_err:
        console.print(f"[yellow]{n_err} episodes ended in infrastructure errors and are not scored; "
                      f"rerun with --out {out} to retry them[/yellow]")
        for message, count in results.error_kinds.items():
            console.print(f"  {count} x {message}", markup=False, highlight=False)
    elif not results.complete:
        n_done = sum(c.n_scored for c in results.cells)
        console.print(f"[yellow]unfinished: {n_done} of {results.n_planned} planned episodes are recorded; "
                      f"rerun the crossplay command with --out {out} to finish it[/yellow]", highlight=False)
    retries = sum(n for c in results.cells for n in c.retries.values())
    if retries:
        console.print(f"{retries} remote retries absorbed (per cell and kind in results.json)", highlight=False)
    console.print(f"results: {out / 'results.json'}, {out / 'cells.csv'}")


@cli.command()
@click.argument("run", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "latex"]), default="table", show_default=True,
              help="The cell table as shown, as CSV, or as LaTeX (for a paper).")
def show(run: str, fmt: str) -> None:
    """Print the cell table of a run (recomputed from its episodes if it did not finish)."""
    from ibrl_bench.runs import Run

    r = Run(run)
    with err_console.status(f"reading {run}"):  # a run of 100,000 episodes takes seconds
        if r.saved_results() is None:  # never written, or stale: the log holds other episodes than it counts
            try:
                r.store.write_results(r.results)  # recomputed from the episodes
            except OSError as e:  # a folder shown read-only (another user's, a mounted archive)
                err_console.print(f"note: results.json not updated ({e.strerror}: {e.filename}); "
                                  "the table is recomputed from the episodes", highlight=False, markup=False)
    if fmt != "table":
        from ibrl_bench.report.export import cell_table

        click.echo(cell_table(r.results, f"{r.results.domain} · {r.results.scenario_set.get('split')} split · {run}",
                              fmt), nl=False)
        return
    _print_results(r.results, Path(run))


@cli.command()
@click.option("--domain", type=click.Choice(DOMAINS), default="dealnodeal", show_default=True)
@click.option("--policy", default=None, metavar="SPEC",
              help="Default: a scripted agent of the domain (dealnodeal: boulware).")
@click.option("--counterpart", default=None, metavar="SPEC",
              help="Default: a scripted agent of the domain (dealnodeal: conceder).")
@click.option("--role", default=None, help="Role of the policy (default: the domain's first role).")
@click.option("--split", type=click.Choice(["train", "dev", "test"]), default="test", show_default=True)
@click.option("--scenario", default="0", show_default=True, help="Index in the split, or a scenario id.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--max-turns", type=click.IntRange(min=2, max=MAX_TURNS), default=None)
@click.option("--move-timeout", type=MOVE_TIMEOUT, default=120.0, show_default=True, help="Seconds one move may take.")
def play(domain, policy, counterpart, role, split, scenario, seed, max_turns, move_timeout) -> None:
    """Play one episode and print it turn by turn."""
    from ibrl_bench.report.terminal import print_transcript
    from ibrl_bench.runner.matrix import resolve_episode
    from ibrl_bench.runner.play import play_one

    pairing = resolve_episode(domain, policy, counterpart, role, split, scenario)
    result = play_one(pairing, seed, max_turns, move_timeout)
    game, chosen, role, other = pairing.game, pairing.scenario, pairing.role, pairing.other
    console.print(f"[bold]{chosen.id}[/bold]  seed={seed}")
    console.print(game.describe(chosen), markup=False, highlight=False)
    print_transcript(console, result.state.transcript, result.outcome,
                     {role: pairing.policy, other: pairing.counterpart})


@cli.command()
@click.argument("run", type=click.Path(file_okay=False))
@click.option("--policy", default=None, metavar="P", help="Only this policy (a short name is enough).")
@click.option("--counterpart", default=None, metavar="C", help="Only this counterpart.")
@click.option("--role", default=None, help="Only episodes where the policy played this role.")
@click.option("--status", type=click.Choice(["ok", "invalid", "max_turns", "error"]), default=None)
@click.option("--scenario", default=None, metavar="ID", help="Only this scenario id.")
@click.option("--seed", type=click.IntRange(min=0), default=None)
@click.option("--show", "key", default=None, metavar="KEY", help="Print this episode (a key, or its first characters).")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Most rows in the table.")
def episodes(run, policy, counterpart, role, status, scenario, seed, key, limit) -> None:
    """Browse a run's recorded episodes: a table of those that match, or one of them turn by turn.

    When the filters leave exactly one episode (or --show picks one), it is printed whole: what
    each side knew, every move (private ones marked) and the outcome."""
    from ibrl_bench.domains import get_domain
    from ibrl_bench.report.terminal import episodes_listing, print_episode
    from ibrl_bench.runs import Run

    r = Run(run)
    with err_console.status(f"reading {run}"):  # a run of 100,000 episodes takes seconds
        found = r.select(policy=policy, counterpart=counterpart, role=role, status=status, scenario=scenario,
                         seed=seed, key=key)
    if not found:
        raise UserError(f"no episode of {run} matches these filters; {len(r.table)} episodes are recorded")
    if len(found) > 1 and key is None:
        console.print(episodes_listing(r.transcribed(found[:limit]), r.manifest.domain, limit))
        more = f"; the first {limit} shown (--limit)" if len(found) > limit else ""
        console.print(f"{len(found)} episodes match{more}. One of them turn by turn: --show KEY", highlight=False)
        return
    if len(found) > 1:
        raise UserError(f"--show {key} matches {len(found)} episodes; give more of the key")
    record = r.transcribed(found[:1])[0]
    game = get_domain(r.manifest.domain)
    try:
        scenario_obj = r.scenarios.get(record.scenario_id)
    except UserError:
        scenario_obj = None
    fits = scenario_obj is not None and scenario_obj.hash == record.scenario_hash
    print_episode(console, record, game.describe(scenario_obj) if fits else None)


@cli.group()
def counterparts() -> None:
    """Counterpart cards (counterparts/NAME.yaml) and panels (counterparts/panels/NAME.yaml)."""


@counterparts.command("list")
def counterparts_list() -> None:
    """Every card and panel, and whether each card's key is set."""
    import os

    from rich.table import Table

    from ibrl_bench.agents.cards import available_cards, load_card
    from ibrl_bench.agents.panels import available_panels, load_panel

    table = Table(title="cards", header_style="bold")
    for col in ("id", "backend", "model", "revision", "domains", "key"):
        table.add_column(col, overflow="fold")
    for name in available_cards():
        c = load_card(name)
        key = ("not needed" if not c.key_env
               else (f"${c.key_env} set" if os.environ.get(c.key_env) else f"${c.key_env} NOT set"))
        table.add_row(c.id, c.backend, c.model, c.revision or "", ", ".join(c.domains), key)
    console.print(table)
    panels = Table(title="panels", header_style="bold")
    for col in ("name", "domain", "roles", "members"):
        panels.add_column(col, overflow="fold")
    for name in available_panels():
        p = load_panel(name)
        panels.add_row(p.name, p.domain, ", ".join(p.roles or ["any"]), "\n".join(p.members))
    console.print(panels)


@counterparts.command("show")
@click.argument("name")
def counterparts_show(name: str) -> None:
    """A card (or panel) with its content hash and the spec it stands for."""
    from ibrl_bench.agents.cards import available_cards, load_card
    from ibrl_bench.agents.panels import available_panels, load_panel

    if name in available_cards():
        card = load_card(name)
        console.print(f"[bold]{card.id}[/bold] (card, hash {card.hash})")
        console.print(f"spec: {card.spec()}", markup=False, highlight=False)
        console.print(json.dumps(card.model_dump(mode="json"), indent=2), markup=False, highlight=False)
    elif name in available_panels():
        panel = load_panel(name)
        console.print(f"[bold]{panel.name}[/bold] (panel for {panel.domain})")
        console.print(json.dumps(panel.model_dump(mode="json"), indent=2), markup=False, highlight=False)
    else:
        known = ", ".join([*available_cards(), *available_panels()]) or "none found"
        raise UserError(f"no card or panel named {name!r}; known: {known}")


@counterparts.command("check")
@click.argument("name")
@click.option("--domain", type=click.Choice(DOMAINS), default=None,
              help="Domain to check in (default: the card's first).")
@click.option("--gate", is_flag=True, help="Run the fidelity gate (games against a scripted opponent on the dev "
              "split) and store the measured values in the card.")
@click.option("--concurrency", type=click.IntRange(min=1), default=16, show_default=True,
              help="--gate: episodes in flight.")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="--gate: run folder (default runs/fidelity/NAME-DOMAIN); the same command resumes it.")
def counterparts_check(name: str, domain: str | None, gate: bool, concurrency: int, out: str | None) -> None:
    """Send one tiny request to a card's counterpart (where its key is set), or with --gate run the
    fidelity gate a model card must pass before a track may pin it."""
    import os

    from ibrl_bench.agents.cards import load_card
    from ibrl_bench.agents.spec import build_agent
    from ibrl_bench.runner.play import first_move

    card = load_card(name)
    domain = domain or card.domains[0]
    if card.key_env and card.key_env.lower() != "none" and not os.environ.get(card.key_env):
        raise UserError(f"cannot check {name}: ${card.key_env} is not set; export the key to check this counterpart")
    if gate:
        from ibrl_bench.leaderboard import fidelity

        if not fidelity.is_model_card(card):
            raise UserError(f"card {name} is a scripted agent; the fidelity gate is for model counterparts")
        folder = Path(out) if out else Path("runs") / "fidelity" / f"{name}-{domain}"
        result = fidelity.measure(card, domain, folder, concurrency=concurrency)
        path = fidelity.store(card, domain, result)
        line = (f"the {domain} gate ({result.gate}): {result.rate_metric} {result.rate:.0%}, invalid "
                f"{result.invalid:.0%} over {result.episodes} episodes; stored in {path}")
        if not result.passed:
            raise UserError(f"{name} fails {line}; a track cannot pin it")
        console.print(f"{name} passes {line}", highlight=False, markup=False)
        return
    reply, seconds = first_move(build_agent(f"card:{name}", domain), domain)
    usage = reply.usage.model_dump() if reply.usage else {}
    console.print(f"{name}: answered in {seconds:.2f} s, usage {usage}", highlight=False)
    console.print(f"reply: {scrub(reply.text[:300])}", markup=False, highlight=False)


# ---------------------------------------------------------------- analysis of a run (stats, report)

_metric_option = click.option("--metric", default="success_at_1", show_default=True,
                              help="Metric by name: success_at_1, agreement, policy_score, ... or a domain metric.")
_role_option = click.option("--role", "roles", multiple=True, metavar="ROLE",
                            help="Only episodes where the policy plays ROLE; repeatable.")
_confidence_option = click.option("--confidence", type=Finite(0, 1, min_open=True, max_open=True), default=0.95,
                                  show_default=True)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON instead of a table.")
_format_option = click.option("--format", "fmt", type=click.Choice(["table", "csv", "latex"]), default="table",
                              show_default=True, help="Print the tables as shown, as CSV, or as LaTeX (for a paper).")


def _open_run(paths: str | tuple[str, ...], roles: tuple[str, ...] = (), every_cell: str | None = None):
    """The run (several folders of the same games read as one) and the episode table its analysis
    reads (`Run.analysed`); an unfinished run is named in a note on stderr."""
    from ibrl_bench.runs import open_runs

    run = open_runs([paths] if isinstance(paths, str) else paths)
    with err_console.status(f"reading {run.name}"):  # a run of 100,000 episodes takes seconds
        frame = run.analysed(roles, every_cell)
    note = run.unfinished()
    if note:
        err_console.print(f"[yellow]note: {escape(note)}[/yellow]", highlight=False)
    return run, frame


def _emit(result, renderable, as_json: bool, fmt: str = "table") -> None:
    if as_json and fmt != "table":
        raise UserError(f"--json and --format {fmt} both choose the output; give one of them")
    if as_json:
        click.echo(result.model_dump_json(indent=2) if hasattr(result, "model_dump_json")
                   else json.dumps([r.model_dump() for r in result], indent=2))
    elif fmt != "table":
        from ibrl_bench.report.export import render

        click.echo(render(renderable, fmt), nl=False)
    else:
        console.print(renderable)


@cli.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(file_okay=False), metavar="RUN...")
@click.argument("a")
@click.argument("b")
@click.option("--kind", type=click.Choice(["policy", "counterpart"]), default=None,
              help="Whether A and B are policies or counterparts (default: whichever both are).")
@_metric_option
@_role_option
@_confidence_option
@click.option("--equivalence-margin", "margin", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Also test equivalence (TOST): is |A - B| smaller than this margin?")
@_json_option
@_format_option
def compare(runs, a, b, kind, metric, roles, confidence, margin, as_json, fmt) -> None:
    """A minus B on the same games: paired by scenario, seed, role and opponent.

    A and B are two policies (or two counterparts) of the run, by spec or short name; several run
    folders of the same games are read as one run. Prints the
    difference with a paired interval over scenarios and the p-value of that interval inverted (they
    always agree), overall and per cell, with Holm-adjusted p-values across the cells.
    """
    from ibrl_bench.report import tables
    from ibrl_bench.stats.paired import compare as compare_stats

    r, frame = _open_run(runs, roles)
    kind = kind or r.kind_of(a, b)
    a, b = r.resolve(a, kind), r.resolve(b, kind)
    result = compare_stats(frame, a, b, kind=kind, metric=metric, confidence=confidence, margin=margin)
    _emit(result, tables.comparison(result), as_json, fmt)


@cli.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(file_okay=False), metavar="RUN...")
@click.option("--method", "methods", multiple=True, nargs=2, metavar="P C",
              help="A policy and the counterpart it trained against; repeatable, one per method compared.")
@click.option("--policy", "policies", multiple=True, metavar="P",
              help="Policy trained against --train-counterpart; repeatable.")
@click.option("--train-counterpart", default=None, metavar="C",
              help="The counterpart the --policy policies trained against.")
@click.option("--heldout", multiple=True, metavar="H",
              help="Held-out counterparts (default: every counterpart no method trained with).")
@click.option("--reference", default=None, metavar="P0",
              help="Common reference policy (e.g. the shared starting checkpoint): "
              "gives each method's difference-in-differences and the paired difference of those between methods.")
@click.option("--view", type=click.Choice(["crossed", "panel"]), default="crossed", show_default=True,
              help="crossed: held-out counterparts are a sample (resampled with scenarios); panel: they are fixed.")
@click.option("--equivalence-margin", "margin", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Also test equivalence (TOST): no mismatch (DiD, or gap without --reference) beyond this margin.")
@click.option("--include-train-in-panel", is_flag=True,
              help="Allow a training counterpart in --heldout (refused otherwise).")
@_metric_option
@_role_option
@_confidence_option
@_json_option
@_format_option
def mismatch(runs, methods, policies, train_counterpart, heldout, reference, view, margin, include_train_in_panel,
             metric, roles, confidence, as_json, fmt) -> None:
    """Static-counterpart mismatch, and method vs method.

    Each method's gap (score against its training counterpart minus the held-out panel, paired by
    game), per held-out counterpart (Holm), and with --reference its difference-in-differences; with
    several methods and --reference, the paired difference of their DiDs, with interval and p-value:

        ibrl-bench mismatch RUN --method ibrl-ckpt boulware --method uni-ckpt fair --reference base
    """
    from ibrl_bench.report import tables
    from ibrl_bench.stats.mismatch import mismatch_many

    r, frame = _open_run(runs, roles)
    if policies and not train_counterpart:
        raise UserError("--policy needs --train-counterpart C (or give each method as --method P C)")
    pairs = [(r.resolve(p, "policy"), r.resolve(c, "counterpart")) for p, c in methods]
    if train_counterpart:
        train = r.resolve(train_counterpart, "counterpart")
        pairs += [(r.resolve(p, "policy"), train) for p in policies]
    held = [r.resolve(h, "counterpart") for h in heldout] or None
    ref = r.resolve(reference, "policy") if reference else None
    identities = dict(r.manifest.identity.get("cards", {}))
    result = mismatch_many(frame, methods=pairs, reference=ref, heldout=held, metric=metric, confidence=confidence,
                           view=view, margin=margin, include_train_in_panel=include_train_in_panel,
                           identities=identities)
    _emit(result, tables.mismatch(result), as_json, fmt)


@cli.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(file_okay=False), metavar="RUN...")
@_metric_option
@_role_option
@_confidence_option
@_json_option
@_format_option
def rank(runs, metric, roles, confidence, as_json, fmt) -> None:
    """Rank the policies over the matrix: uniform mean, Nash averaging, normalized score (IQM).

    Several run folders of the same games are read as one run (their matrices joined)."""
    from ibrl_bench.report import tables
    from ibrl_bench.stats.ranking import rankings

    _, frame = _open_run(runs, roles, every_cell="rank")
    result = rankings(frame, metric=metric, confidence=confidence)
    _emit(result, tables.rankings(result), as_json, fmt)


@cli.command()
@click.argument("run", type=click.Path(file_okay=False))
@_metric_option
@_role_option
@_confidence_option
@_json_option
@_format_option
def passk(run, metric, roles, confidence, as_json, fmt) -> None:
    """pass@k and pass^k of every cell, over the seeds of each scenario (runs with --seeds > 1)."""
    from ibrl_bench.report import tables
    from ibrl_bench.stats.passk import passk_table

    _, frame = _open_run(run, roles)
    if frame.groupby(["policy", "counterpart", "policy_role", "scenario_id"]).size().max() < 2:
        raise UserError(f"{run} has one seed per scenario; pass@k needs a run with --seeds 2 or more")
    result = passk_table(frame, metric=metric, confidence=confidence)
    _emit(result, tables.passk(result), as_json, fmt)


def _int_list(ctx, param, value: str) -> list[int]:
    try:
        out = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"give whole numbers separated by commas, e.g. 1,2,4 (got {value!r})") from None
    if not out or min(out) < 1:
        raise click.BadParameter(f"give numbers of seeds >= 1, e.g. 1,2,4 (got {value!r})")
    return out


@cli.command()
@click.option("--delta", type=Finite(), required=True,
              help="The difference to detect, in the metric's units (0.05 = 5 points of a rate).")
@click.option("--rate", type=Finite(), default=None, help="Expected rate of a 0/1 metric (with --icc).")
@click.option("--icc", type=Finite(), default=None, help="Share of the variance that lies between scenarios (0..1).")
@click.option("--sd-between", type=Finite(min=0), default=None, help="SD of scenario means (scores).")
@click.option("--sd-within", type=Finite(min=0), default=None, help="SD of an episode around its scenario's mean.")
@click.option("--corr", type=Finite(-1, 1), default=None,
              help="Correlation of the two policies' scenario means (default 0.5, or estimated with --from).")
@click.option("--from", "from_run", type=click.Path(file_okay=False), default=None,
              help="Estimate the variance parameters from a pilot run.")
@_metric_option
@click.option("--seeds", "seeds", default="1,2,4,8", show_default=True, callback=_int_list,
              help="Seeds per scenario to plan for.")
@click.option("--alpha", type=Finite(), default=0.05, show_default=True)
@click.option("--power", type=Finite(), default=0.8, show_default=True)
@click.option("--unpaired", is_flag=True, help="The two policies play different scenarios (no pairing).")
@click.option("--domain", default="dealnodeal", show_default=True,
              help="Domain whose split caps the scenarios (with --from: the run's).")
@click.option("--split", default="test", show_default=True,
              help="Split whose size caps the scenarios (with --from: the run's).")
@_json_option
@_format_option
def plan(delta, rate, icc, sd_between, sd_within, corr, from_run, metric, seeds, alpha, power, unpaired, domain, split,
         as_json, fmt) -> None:
    """How many scenarios and seeds detect a difference of DELTA between two policies.

    From clustered standard errors (Miller 2024, "Adding Error Bars to Evals"): give --rate and
    --icc, or --sd-between and --sd-within, or --from a pilot run to estimate them. Never asks for
    more scenarios than the split holds: it says the smallest difference detectable with all of them.
    """
    from ibrl_bench.domains import get_domain
    from ibrl_bench.report import tables
    from ibrl_bench.stats import power as pw

    if from_run:
        pilot, frame = _open_run(from_run)
        domain = pilot.manifest.identity.get("domain", domain)
        split = pilot.manifest.identity.get("split", split)
        components = pw.estimate_components(frame, metric, icc=icc, corr=corr, source=from_run)
    elif rate is not None:
        components = pw.from_rate(rate, 0.3 if icc is None else icc, 0.5 if corr is None else corr)
        if icc is None:
            components = components.model_copy(update={"source": components.source + " (assumed; pass --icc)"})
    elif sd_between is not None and sd_within is not None:
        components = pw.Components(sd_between=sd_between, sd_within=sd_within, corr=0.5 if corr is None else corr,
                                   source="given")
    else:
        raise UserError("plan needs the variance: --rate R [--icc I], or --sd-between and --sd-within, "
                        "or --from RUN to estimate it from a pilot run")
    max_scenarios = len(get_domain(domain).scenario_set(split).scenarios)
    result = pw.plan(delta, components, seeds, alpha=alpha, power=power, paired=not unpaired,
                     max_scenarios=max_scenarios)
    _emit(result, tables.plan(result), as_json, fmt)


@cli.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(file_okay=False), metavar="RUN...")
@_metric_option
@click.option("--train-counterpart", default=None, metavar="C",
              help="Add a detailed mismatch section for this training counterpart.")
@click.option("--policy", "policies", multiple=True, metavar="P",
              help="Policies trained against --train-counterpart (default: all).")
@click.option("--reference", default=None, metavar="P0", help="Reference policy for the difference-in-differences.")
@click.option("--max-episodes", type=click.IntRange(min=0), default=5000, show_default=True,
              help="Most episodes embedded in the transcript browser.")
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="Where to write the report (default RUN/report.html; with several runs, required).")
@click.option("--scale", type=click.Choice(["full", "data"]), default="full", show_default=True,
              help="Colours of rates: on 0-100% (full), or on the span of the data (tells high rates apart).")
def report(runs, metric, train_counterpart, policies, reference, max_episodes, out, scale) -> None:
    """Write a self-contained report.html (heatmap, cells, rankings, mismatch, transcripts) and heatmap.png.

    Several run folders of the same games make one report (give --out)."""
    from ibrl_bench.report.html import ReportOptions, write_report
    from ibrl_bench.runs import open_runs

    if len(runs) > 1 and out is None:
        raise UserError("a report of several runs needs --out FILE.html (it belongs to none of their folders)")
    # A run of 100,000 episodes takes a while: the stage in progress is shown on a terminal.
    with err_console.status("report: reading the run") as status:
        r = open_runs(runs)
        r.analysed()  # refuses a run without a finished episode
        options = ReportOptions(
            metric=metric,
            train_counterpart=r.resolve(train_counterpart, "counterpart") if train_counterpart else None,
            policies=[r.resolve(p, "policy") for p in policies],
            reference=r.resolve(reference, "policy") if reference else None,
            max_episodes=max_episodes,
            full_scale=scale == "full",
        )
        html_path, png_path = write_report(r, options, Path(out) if out else None,
                                           progress=lambda stage: status.update(f"report: {stage}"))
    note = r.unfinished()
    if note:
        err_console.print(f"[yellow]note: {escape(note)}[/yellow]", highlight=False)
    console.print(f"report: {html_path}\nheatmap: {png_path}", highlight=False)

class _TrainCommand(click.Command):
    """`train METHOD --help` adds the keys of METHOD's recipe, with types and defaults."""

    def parse_args(self, ctx, args):
        ctx.meta["train_method"] = next((a for a in args if a in ("sft", "ibrl", "unilateral")), None)
        return super().parse_args(ctx, args)

    def format_help(self, ctx, formatter):
        super().format_help(ctx, formatter)
        method = ctx.meta.get("train_method")
        if method is None:
            formatter.write_paragraph()
            formatter.write_text("ibrl-bench train METHOD --help lists the recipe keys of METHOD.")
            return
        from ibrl_bench.train.recipes import config_class, recipe_keys

        with formatter.section(f"Recipe keys of {method} (KEY: type, default)"):
            formatter.write_dl([(key, f"{kind}; " + ("required" if default == "required" else f"default {default}"))
                                for key, kind, default
                                in recipe_keys(config_class(method))])


@cli.command(cls=_TrainCommand, context_settings={"ignore_unknown_options": True})
@click.argument("method", type=click.Choice(["sft", "ibrl", "unilateral"]))
@click.option("--recipe", required=True, type=click.Path(dir_okay=False), help="A recipe YAML (see training/).")
@click.option("--quiet", is_flag=True, help="No progress bar (the log file is written all the same).")
@click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")
def train(method, recipe, quiet, overrides) -> None:
    """Train a policy: sft (imitation of transcripts), ibrl (both roles) or unilateral (one role).

    KEY=VALUE pairs override the recipe (values read as YAML; dotted keys reach nested blocks):
    `ibrl-bench train ibrl --recipe training/dealnodeal-tiny-ibrl.yaml steps=2 model.lora.r=8`.
    Writes checkpoints, train_log.jsonl and the resolved recipe.yaml under the recipe's `out`.
    Under `accelerate launch` every process trains; only the first writes the log and prints.
    """
    from ibrl_bench.train.launch import Launch, ready_training_stack, try_commands
    from ibrl_bench.train.recipes import load_recipe, trainer

    with interrupt_hint("rerun the same command to resume from the last saved step (save_every)"
                        if method in ("ibrl", "unilateral") else None):
        module, config_class = trainer(method)
        config = load_recipe(recipe, config_class, list(overrides), method=method)
        ready_training_stack()  # after the recipe: a bad one fails fast
        launch = Launch(method, config)
        if launch.resumed_after and launch.main_process:
            err_console.print(f"resuming {launch.out} after step {launch.resumed_after} of {config.steps} "
                              "(its resume/state.pt)", highlight=False)
        specs = launch.run(module, quiet, err_console)
    if not launch.main_process:
        return
    out = launch.out
    console.print(f"trained: {method} from {recipe}; log {out / 'train_log.jsonl'}, "
                  f"resolved recipe {out / 'recipe.yaml'}", highlight=False, soft_wrap=True)
    for role, spec in specs.items():
        console.print(f"  {role}: {spec}", highlight=False, soft_wrap=True)
    console.print("try it in cross-play against the held-out panel:", highlight=False)
    for line in try_commands(config.domain, method, specs, config.max_new_tokens):
        console.print(f"  {line}", highlight=False, soft_wrap=True, markup=False)


@cli.command(context_settings={"ignore_unknown_options": True})
@click.option("--recipe", default="training/miniature/miniature.yaml", show_default=True,
              type=click.Path(dir_okay=False), help="A miniature recipe YAML (training/miniature/).")
@click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")
def miniature(recipe, overrides) -> None:
    """The paper's experiment in miniature, end to end on a CPU: transcripts, SFT, the warm-start
    gate, IB-RL, unilateral (vs the frozen SFT copy and vs boulware), the learning gate (each trained
    role against its SFT start, paired), cross-play, mismatch, report.

    Writes OUT/summary.json (every stage, wall and CPU seconds) and OUT/report.md with curves.png.
    Exits 3 when the warm-start gate stops the run (the numbers are in OUT/report.md). A repeated
    command reuses the stages that finished for the same recipe.
    """
    from ibrl_bench.train import miniature as pipeline
    from ibrl_bench.train.launch import ready_training_stack
    from ibrl_bench.train.recipes import load_recipe

    config = load_recipe(recipe, pipeline.MiniatureConfig, list(overrides), method="miniature")
    ready_training_stack()  # after the recipe: a bad one fails fast
    stages = pipeline.run(config, progress=lambda line: err_console.print(line, highlight=False))
    out = Path(config.out)
    wall, cpu = sum(s.wall_s for s in stages), sum(s.cpu_s for s in stages)
    console.print(f"miniature: {len(stages)} stages in {wall:.0f} s wall, {cpu:.0f} s CPU; "
                  f"summary {out / 'summary.json'}, "
                  f"report {out / 'report.md'}", highlight=False, soft_wrap=True)
    if stages[-1].status == "stopped":
        console.print(f"stopped at the {stages[-1].name} stage: see {out / 'report.md'}", highlight=False)
        sys.exit(3)


# ---------------------------------------------------------------- leaderboards

@cli.command()
@click.option("--track", "track_ref", required=True, metavar="T", help="Track id (dealnodeal/offline) or a track.yaml.")
@click.option("--policy", required=True, metavar="SPEC", help="The policy to submit.")
@click.option("--name", required=True, help="The entry's name on the board.")
@click.option("--org", default=None, help="Organisation, shown next to the name.")
@click.option("--train-counterpart", default=None, metavar="SPEC",
              help="The counterpart the policy trained against; adds its episodes, for the mismatch column.")
@click.option("--concurrency", type=click.IntRange(min=1), default=16, show_default=True, help="Episodes in flight.")
@click.option("--move-timeout", type=MOVE_TIMEOUT, default=120.0, show_default=True,
              help="Seconds one move may take (raise it for local models on a CPU).")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Run folder (default runs/submit/DOMAIN/TRACK/NAME); the same command resumes it.")
@click.option("--bundle", type=click.Path(file_okay=False), default=None,
              help="Bundle folder to write (default leaderboards/DOMAIN/TRACK/submissions/NAME-TIME).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@interrupt_hint(RESUME_RUN)
def submit(track_ref, policy, name, org, train_counterpart, concurrency, move_timeout, out, bundle, quiet) -> None:
    """Run a track's suite for a policy and write a submission bundle.

    The run is an ordinary cross-play run: rerunning the same command resumes it. The bundle
    (submission.json, episodes.jsonl.gz, manifest.json, README.md) is written once every episode
    has finished; open a pull request adding its folder to submit it.
    """
    from ibrl_bench.leaderboard import submit as sub
    from ibrl_bench.leaderboard.track import check_pins, load_track
    from ibrl_bench.runner.store import RunStore

    track = load_track(track_ref)
    check_pins(track)
    config = sub.suite_config(track, policy, train_counterpart, concurrency, move_timeout)
    out_path = Path(out) if out else sub.default_run_folder(track, name)
    bundle_path = Path(bundle) if bundle else sub.default_bundle_folder(track, name)
    sub.check_bundle_folder(bundle_path)  # before the run, not after it
    _run_crossplay(config, out_path, quiet)
    result = sub.make_bundle(track, RunStore(out_path), bundle_path, policy=policy, name=name, org=org,
                             train_counterpart=train_counterpart)
    overall = result.scores.metrics[track.primary].overall
    console.print(f"bundle: {bundle_path} ({result.counts.episodes} episodes; {track.primary} "
                  f"{overall.format(3)}); check it with: ibrl-bench leaderboard verify {bundle_path}", highlight=False)


@cli.group()
def leaderboard() -> None:
    """Verify submission bundles, build and show the boards (leaderboards/DOMAIN/TRACK/)."""


@leaderboard.command("verify")
@click.argument("bundle", type=click.Path())
def leaderboard_verify(bundle: str) -> None:
    """Recompute every number of a bundle from its transcripts and check it against its track."""
    from ibrl_bench.leaderboard.verify import verify_bundle

    verdict = verify_bundle(bundle)
    s = verdict.submission
    if verdict.ok:
        metric = next(iter(s.scores.metrics))  # the track's ranked metric comes first
        console.print(f"verified {bundle}: {s.name}, {verdict.n_episodes} episodes replayed on {verdict.track}; "
                      f"every metric recomputes ({metric} {s.scores.metrics[metric].overall.format(3)})",
                      highlight=False)
        for spec, note in verdict.seats.items():
            console.print(f"  seat {spec}: {note}", highlight=False, markup=False)
        return
    for problem in verdict.problems[:20]:
        console.print(f"- {problem}", markup=False, highlight=False)
    if len(verdict.problems) > 20:
        console.print(f"... and {len(verdict.problems) - 20} more", highlight=False)
    raise UserError(f"{bundle} does not verify: {len(verdict.problems)} problem(s), the first: {verdict.problems[0]}")


def _tracks(track_ref: str | None):
    from ibrl_bench.leaderboard.track import available_tracks, load_track

    refs = [track_ref] if track_ref else available_tracks()
    if not refs:
        raise UserError("no tracks found (leaderboards/DOMAIN/TRACK/track.yaml); run from the repository root")
    return [load_track(r) for r in refs]


@leaderboard.command("build")
@click.option("--track", "track_ref", default=None, metavar="T", help="One track (default: every track).")
def leaderboard_build(track_ref: str | None) -> None:
    """Regenerate board.md and board.json of each track from the bundles that verify."""
    from ibrl_bench.leaderboard.board import build_board, write_board

    refused = []
    for track in _tracks(track_ref):
        try:
            board = build_board(track)
        except UserError as e:  # the track as a whole (a constant column): the others still build
            refused.append(str(e))
            console.print(f"refused {e}", markup=False, highlight=False, soft_wrap=True)
            continue
        md, _ = write_board(board, track)
        console.print(f"{md}: {len(board.entries)} entries, {len(board.rejected)} bundles rejected", highlight=False)
        for r in board.rejected:
            console.print(f"  rejected {r.bundle}: {r.reason}", markup=False, highlight=False)
    if refused:
        raise UserError(f"{len(refused)} track(s) not built, the first: {refused[0]}")


@leaderboard.command("rescore")
@click.argument("bundle", type=click.Path())
def leaderboard_rescore(bundle: str) -> None:
    """Recompute a bundle's numbers from its episodes under this harness's scoring version (after
    the scoring changed) and rewrite its submission.json and README.md; the episodes are untouched."""
    from ibrl_bench.leaderboard.submit import rescore

    sub = rescore(Path(bundle))
    console.print(f"rescored {bundle} under scoring version {sub.scoring}; check it with: "
                  f"ibrl-bench leaderboard verify {bundle}", highlight=False)


@leaderboard.command("show")
@click.option("--track", "track_ref", default=None, metavar="T", help="One track (default: every track).")
def leaderboard_show(track_ref: str | None) -> None:
    """Print the built boards."""
    from ibrl_bench.leaderboard.board import board_table, read_board

    for track in _tracks(track_ref):
        console.print(board_table(read_board(track), track))


def main(argv: list[str] | None = None) -> None:
    register_environment()
    handler = RichHandler(console=err_console, show_path=False)
    handler.addFilter(_scrub_log_record)
    logging.basicConfig(level=logging.WARNING, format="%(message)s", handlers=[handler])
    try:
        code = cli.main(args=argv, prog_name="ibrl-bench", standalone_mode=False)
    except click.UsageError as e:
        hint = f" (see: {e.ctx.command_path} --help)" if e.ctx else ""
        err_console.print(f"error: {_one_line(scrub(e.format_message()))}{hint}", markup=False, highlight=False,
                          soft_wrap=True)
        sys.exit(2)
    except click.ClickException as e:
        err_console.print(f"error: {_one_line(scrub(e.format_message()))}", markup=False, highlight=False,
                          soft_wrap=True)
        sys.exit(e.exit_code)
    except Interrupted as e:
        # Only what keeps its progress on disk resumes: run folders, and RL trainings (resume.py).
        err_console.print(f"interrupted; {e}" if str(e) else "interrupted", highlight=False)
        sys.exit(130)
    except (click.Abort, KeyboardInterrupt):
        err_console.print("interrupted")
        sys.exit(130)
    except UserError as e:
        err_console.print(f"error: {_one_line(scrub(str(e)))}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except OSError as e:  # a file the command needs cannot be read or written (permissions, a full disk)
        where = f" {e.filename}" if e.filename else ""
        err_console.print(f"error: cannot use{where}: {e.strerror or e}; check the path and its permissions",
                          markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "unknown error"


def _scrub_log_record(record: logging.LogRecord) -> bool:
    """Log lines pass the same masking as everything the harness writes."""
    record.msg = scrub(record.getMessage())
    record.args = None
    return True


if __name__ == "__main__":
    main()
