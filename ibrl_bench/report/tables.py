"""Terminal tables for the analysis commands: compare, mismatch, rank, passk, plan.

Every table ends with a note that names the interval methods, the confidence level and the sample
sizes of the numbers above it, so a number is never shown without how it was made.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ibrl_bench.report.numbers import format_interval, methods_note
from ibrl_bench.stats.intervals import P_VALUE_RULE, Interval
from ibrl_bench.stats.mismatch import MismatchReport
from ibrl_bench.stats.paired import Comparison
from ibrl_bench.stats.passk import PassK
from ibrl_bench.stats.power import Plan
from ibrl_bench.stats.ranking import Rankings


def short(spec: str) -> str:
    """`scripted:dealnodeal/boulware` -> `boulware`; other specs as given."""
    return spec.rsplit("/", 1)[-1] if spec.startswith("scripted:") else spec


def iv(x: Interval | None) -> str:
    return format_interval(x, digits=3)


def pval(p: float | None) -> str:
    if p is None:
        return "n/a"
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


class _Titled(Table):
    """A table whose title is printed as its own line, full width, rather than squeezed to the
    table's width and wrapped."""


def _table(title: str) -> Table:
    t = _Titled(header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    t.heading = Text(title, style="bold")
    return t


def _group(*parts) -> Group:
    out = []
    for part in parts:
        if isinstance(part, _Titled):
            out.append(part.heading)
        out.append(part)
    return Group(*out)


def note(intervals: Iterable[Interval | None], extra: str = "") -> Text:
    return Text(methods_note(intervals, extra), style="dim")


def comparison(c: Comparison) -> Group:
    a, b = short(c.a), short(c.b)
    opponent = "counterpart" if c.kind == "policy" else "policy"
    kinds = "policies" if c.kind == "policy" else "counterparts"
    t = _table(f"{a} - {b} on {c.metric} (two {kinds}, paired by {opponent}, scenario, seed and role)")
    eq = c.overall.equivalence is not None
    cols = ("scope", a, b, f"{a} - {b}", "p", "p (Holm)", *(("TOST p",) if eq else ()), "pairs", "scenarios")
    for col in cols:
        t.add_column(col, justify="left" if col == "scope" else "right")
    rows = [c.overall, *c.by_cell]
    for d in rows:
        scope = d.scope.replace(c.a, a).replace(c.b, b)
        for spec in {s for s in scope.split() if s.startswith("scripted:")}:
            scope = scope.replace(spec, short(spec.rstrip(",")) + ("," if spec.endswith(",") else ""))
        tost = (pval(d.equivalence.p_value) if d.equivalence else "n/a",) if eq else ()
        t.add_row(scope, iv(d.a), iv(d.b), iv(d.difference), pval(d.test.p_value),
                  pval(d.p_holm) if d is not c.overall else "", *tost, str(d.test.n), str(d.test.n_clusters))
    tests = sorted({d.test.test for d in rows})
    extra = f"p-values: {P_VALUE_RULE}; {'; '.join(tests)}; per-cell p (Holm): adjusted over the {len(c.by_cell)} cells"
    if eq:
        extra += (f"; TOST: equivalence within +-{c.overall.equivalence.margin:g} "  # type: ignore[union-attr]
                  "(p < alpha when the 1 - 2 alpha interval lies inside the margin)")
    if c.n_unpaired:
        extra += f"; {c.n_unpaired} episodes without a partner left out"
    return _group(t, note([x for d in rows for x in (d.a, d.b, d.difference)], extra))


def mismatch(r: MismatchReport) -> Group:
    parts = []
    holm_col = bool(r.holm_over)
    for m in r.results:
        title = (f"mismatch of {short(m.policy)}, trained against {short(m.train_counterpart)}, on {m.metric} "
                 f"({m.n_games} games; {m.n_dropped} dropped for a missing episode)")
        t = _table(title)
        t.add_column("")
        t.add_column("estimate [interval]", justify="right")
        t.add_column("p", justify="right")
        t.add_column("p (Holm)", justify="right")
        t.add_row(f"score vs {short(m.train_counterpart)} (training)", iv(m.gap.a), "", "")
        t.add_row(f"score vs held-out panel ({len(m.heldout)})", iv(m.gap.b), "", "")
        t.add_row("[bold]gap[/bold] (training - held-out)", iv(m.gap.difference), pval(m.gap.test.p_value),
                  pval(m.p_holm) if r.holm_over == "gap" else "")
        t.add_row("proportional loss (gap / training score)", iv(m.proportional_loss), "", "")
        for h in m.per_heldout:
            mark = "  <- worst (selected)" if h.scope == m.worst else ""
            t.add_row(f"  gap vs {short(h.scope)}{mark}", iv(h.difference), pval(h.test.p_value), pval(h.p_holm))
        ivs = [m.gap.a, m.gap.b, m.gap.difference, m.proportional_loss, *(h.difference for h in m.per_heldout)]
        if m.reference and m.reference_gap and m.did and m.did_test:
            t.add_row(f"gap of reference {short(m.reference)}", iv(m.reference_gap.difference),
                      pval(m.reference_gap.test.p_value), "")
            t.add_row("[bold]difference-in-differences[/bold]", iv(m.did), pval(m.did_test.p_value),
                      pval(m.p_holm) if r.holm_over == "difference-in-differences" else "")
            ivs += [m.reference_gap.difference, m.did]
        eq = m.did_equivalence if m.reference else m.gap.equivalence
        if eq is not None:
            verdict = "equivalent" if eq.equivalent else "not shown equivalent"
            t.add_row(f"TOST: no mismatch beyond +-{eq.margin:g}", f"{verdict} ({iv(eq.interval)})",
                      pval(eq.p_value), "")
        extra = f"p-values: {P_VALUE_RULE}"
        if holm_col:
            extra += f"; Holm across {len(r.results)} methods ({r.holm_over})"
        parts += [t, note(ivs, extra), Text("")]
    if r.comparisons:
        c = _table(f"method vs method on {r.metric}: paired difference of DiDs against {short(r.reference or '')}")
        for col in ("a - b", "DiD(a) - DiD(b) [interval]", "p", "p (Holm)", "raw gap difference*"):
            c.add_column(col, justify="left" if col == "a - b" else "right")
        for d in r.comparisons:
            c.add_row(f"{short(d.a)} - {short(d.b)}", iv(d.did_difference), pval(d.test.p_value),
                      pval(d.p_holm) if d.p_holm is not None else "",
                      iv(d.raw_gap_difference))
        parts += [c, note([d.did_difference for d in r.comparisons]), Text("")]
    parts += [Text(f"* {n}" if n.startswith("raw gap") else n, style="dim") for n in r.notes]
    return _group(*parts)


def rankings(r: Rankings) -> Group:
    t = _table(f"uniform mean of {r.metric} over {len(r.columns)} columns (counterpart x role)")
    for col in ("rank", "rank interval", "policy", "mean [interval]"):
        t.add_column(col, justify="left" if col == "policy" else "right")
    for row in r.uniform:
        span = f"{row.rank_low}-{row.rank_high}" if row.rank_low is not None else "n/a"
        t.add_row(str(row.rank) if row.rank is not None else "n/a", span, short(row.policy), iv(row.mean))
    n = r.uniform[0].mean if r.uniform else None
    sizes = f"n = {n.n} episodes over {n.n_clusters} scenarios" if n else ""
    if r.n_scenarios_dropped:
        sizes += f" ({r.n_scenarios_dropped} scenarios left out: not scored in every cell)"
    if r.columns_dropped:
        sizes += "; columns left out, without scored episodes for every policy: " + ", ".join(
            f"{short(c)}/{ro}" for c, ro in r.columns_dropped)
    rank_note = r.rank_rule

    nash = _table(f"Nash averaging of {r.metric} (agent vs task; game value {r.nash.game_value:.3f})")
    for col in ("policy", "equilibrium weight", "P(in support)", "Nash value [interval]"):
        nash.add_column(col, justify="left" if col == "policy" else "right")
    for v in sorted(r.nash.values, key=lambda v: -(v.value.estimate or 0)):
        nash.add_row(short(v.policy), f"{v.weight:.3f}", "n/a" if v.p_support is None else f"{v.p_support:.2f}",
                     iv(v.value))
    weights = ", ".join(f"{short(c)} {w:.3f}" for c, w in r.nash.counterpart_weights.items())

    norm = _table(f"normalized {r.metric}: IQM over columns of score / best in column")
    for col in ("policy", "IQM [interval]"):
        norm.add_column(col, justify="left" if col == "policy" else "right")
    for s in sorted(r.normalized, key=lambda s: -(s.iqm.estimate or 0)):
        norm.add_row(short(s.policy), iv(s.iqm))
    dropped = (f"columns left out (best score <= 0): {', '.join(f'{short(c)}/{ro}' for c, ro in r.normalized_dropped)}"
               if r.normalized_dropped else "")
    return _group(
        t, note([x.mean for x in r.uniform], f"{rank_note}; {sizes}"), Text(""),
        nash, Text(f"counterpart weights: {weights}", style="dim"),
        note([v.value for v in r.nash.values],
             f"solver: {r.nash.solver}; rows or columns equal within {r.nash.merge_tolerance:g} (relative) merged; "
             f"P(in support): share of {r.nash.n_resamples} scenario resamples whose equilibrium uses the policy"),
        Text(""),
        norm, note([s.iqm for s in r.normalized], dropped),
    )


def passk(rows: list[PassK]) -> Group:
    metric = rows[0].metric if rows else "success_at_1"
    t = _table(f"pass@k and pass^k of {metric} (over the seeds of each scenario)")
    for col in ("policy", "counterpart", "role", "k", "pass@k [interval]", "pass^k [interval]", "scenarios"):
        t.add_column(col, justify="left" if col in ("policy", "counterpart", "role") else "right")
    for r in rows:
        t.add_row(short(r.policy), short(r.counterpart), r.policy_role, str(r.k), iv(r.pass_at_k), iv(r.pass_hat_k),
                  str(r.pass_at_k.n_clusters))
    extra = "unbiased estimators: pass@k = 1 - C(n-c,k)/C(n,k), pass^k = C(c,k)/C(n,k), averaged over scenarios"
    return _group(t, note([x for r in rows for x in (r.pass_at_k, r.pass_hat_k)], extra))


def plan(p: Plan) -> Group:
    c = p.components
    design = "paired: the same scenarios for both" if p.paired else "unpaired"
    t = _table(f"scenarios needed to detect a difference of {p.delta:g} ({design}, two-sided alpha {p.alpha:g}, "
               f"power {p.power:g})")
    ranged = any(r.needed_range for r in p.rows)
    cols = ("seeds per scenario", "scenarios", "episodes per policy and cell", "design effect",
            *(("needed if the pilot's variance is off (95%)",) if ranged else ()))
    for col in cols:
        t.add_column(col, justify="right")
    short_rows = []
    for r in p.rows:
        n = str(r.scenarios) if r.enough else f"{r.scenarios} (all; {r.needed} needed)"
        extra = ((f"{r.needed_range[0]}-{r.needed_range[1]}",) if ranged and r.needed_range
                 else (("",) if ranged else ()))
        t.add_row(str(r.seeds), n, str(r.episodes), f"{r.design_effect:.2f}", *extra)
        if not r.enough:
            short_rows.append(f"with {r.seeds} seed(s): all {r.scenarios} scenarios detect {r.detectable:.3g}, "
                              f"not {p.delta:g}")
    params = (f"sd between scenarios {c.sd_between:.3f}, sd within a scenario {c.sd_within:.3f}, "
              f"correlation of the two policies {c.corr:.2f} ({c.source})")
    parts = [t, Text(params, style="dim")]
    if p.max_scenarios:
        parts.append(Text(f"the split holds {p.max_scenarios} scenarios; " + ("; ".join(short_rows) if short_rows
                                                                               else "every row fits"), style="dim"))
    if ranged:
        parts.append(Text(f"range: scenarios needed at the 95% chi-square bounds of the variance estimated from the "
                          f"pilot's {c.n_scenarios} scenarios", style="dim"))
    return _group(*parts, Text(p.method, style="dim"))
