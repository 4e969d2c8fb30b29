"""report.html: one self-contained page for a run, plus heatmap.png next to it.

Self-contained means the page opens with no network: its CSS and JavaScript are inlined, it loads
no font, image or script, and its Content-Security-Policy forbids every fetch (`default-src
'none'`), so a stray external reference fails loudly in the browser instead of leaking a request.

The page is rendered here, in Python, as static HTML (it reads without JavaScript, except the
transcript browser); the script only switches metric tabs, sorts tables and drives the transcript
browser. A first tiny script records any script error, failed load or policy violation on the
<html> element (`data-js-errors`) and shows a banner, so that the tests, and readers, can see
that the page works.
"""

from __future__ import annotations

import base64
import html
import json
import math
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, Field

from ibrl_bench import __version__
from ibrl_bench.errors import UserError
from ibrl_bench.report.heatmap import color_span
from ibrl_bench.report.numbers import decimals, format_interval, format_number, methods_note
from ibrl_bench.report.tables import short
from ibrl_bench.runs import Run
from ibrl_bench.stats.cells import metric_values
from ibrl_bench.stats.intervals import Interval
from ibrl_bench.stats.mismatch import GapCell, MismatchReport, gap_matrix, mismatch_many
from ibrl_bench.stats.passk import PassK, passk_table
from ibrl_bench.stats.ranking import Rankings, rankings

LABELS = {
    "success_at_1": "Success@1", "agreement": "agreement", "policy_score": "policy score",
    "counterpart_score": "counterpart score", "invalid": "invalid (either side)", "policy_invalid": "invalid (policy)",
    "max_turns": "hit the turn limit", "pareto_optimal": "Pareto-optimal deals",
}
# Perceptually uniform and colour-blind safe (matplotlib's viridis), as in heatmap.png.
VIRIDIS = [(0.0, (68, 1, 84)), (0.25, (59, 82, 139)), (0.5, (33, 145, 140)), (0.75, (94, 201, 98)),
           (1.0, (253, 231, 37))]
DIVERGING = [(0.0, (33, 102, 172)), (0.5, (247, 247, 247)), (1.0, (178, 24, 43))]

ERROR_RECORDER = """(function(){var d=document.documentElement,errs=[];window.__reportErrors=errs;
function rec(m){errs.push(String(m));d.setAttribute('data-js-errors',String(errs.length));
var p=document.getElementById('js-errors');if(p)p.textContent=errs.join('\\n');}
d.setAttribute('data-js-errors','0');
window.addEventListener('error',function(e){var t=e.target;\
rec(e.message||('failed to load '+(t&&(t.src||t.href)||'a resource')));},true);
window.addEventListener('unhandledrejection',function(e){rec('unhandled rejection: '+e.reason);});
document.addEventListener('securitypolicyviolation',function(e){rec('blocked by the page policy: '+e.blockedURI);});
var ce=console.error;\
console.error=function(){rec(Array.prototype.join.call(arguments,' '));return ce.apply(console,arguments);};
})();"""

CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
       "base-uri 'none'; form-action 'none'")


class ReportOptions(BaseModel):
    metric: str = "success_at_1"  # the metric of rankings, mismatch and pass@k
    train_counterpart: str | None = None  # adds the detailed mismatch section
    policies: list[str] = Field(default_factory=list)  # trained against it (default: all but the reference)
    reference: str | None = None
    max_episodes: int = 5000  # transcripts embedded in the page
    confidence: float = 0.95
    full_scale: bool = True  # rates coloured on 0-100%; False: on the span of the data


# ------------------------------------------------------------------------- small helpers

def esc(x: object) -> str:
    return html.escape(str(x), quote=True)


def _ramp(stops: list[tuple[float, tuple[int, int, int]]], t: float) -> tuple[int, int, int]:
    t = min(max(t, 0.0), 1.0)
    for (t0, c0), (t1, c1) in zip(stops, stops[1:], strict=False):
        if t <= t1:
            u = (t - t0) / (t1 - t0)
            return tuple(round(a + u * (b - a)) for a, b in zip(c0, c1, strict=True))  # type: ignore[return-value]
    return stops[-1][1]


def _color(rgb: tuple[int, int, int]) -> tuple[str, bool]:
    """Background hex and whether it is light (dark ink on it)."""
    lum = (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255
    return f"#{rgb[0]:02x}{rgb[1]:02x}{rgb[2]:02x}", lum > 0.5


def _gradient(stops) -> str:
    return "linear-gradient(90deg, " + ", ".join(f"rgb{c} {t * 100:.0f}%" for t, c in stops) + ")"


def describe(iv: Interval | None) -> str:
    """The tooltip of a number: how it was made and from how much data."""
    if iv is None:
        return ""
    return (f"{iv.confidence:.0%} interval, {iv.method}; n = {iv.n} episodes over {iv.n_clusters} "
            f"scenario{'s' if iv.n_clusters != 1 else ''}")


def label(metric: str) -> str:
    return LABELS.get(metric, metric.replace("_", " "))


def _asset(name: str) -> str:
    return resources.files("ibrl_bench.report").joinpath("assets", name).read_text(encoding="utf-8")


# ------------------------------------------------------------------------- sections

class _Page:
    """Everything the sections share: the run, its tables, the ordering of rows and columns."""

    def __init__(self, run: Run, options: ReportOptions):
        self.run = run
        self.options = options
        self.results = run.results
        self.frame = run.frame
        self.domain = run.manifest.domain
        present = set(self.frame["policy"])
        self.policies = [p for p in run.policies if p in present]
        counterparts = set(self.frame["counterpart"])
        self.counterparts = [c for c in run.counterparts if c in counterparts]
        self.roles = list(self.frame["policy_role"].unique())
        self.columns = [(c, r) for c in self.counterparts for r in self.roles
                        if ((self.frame["counterpart"] == c) & (self.frame["policy_role"] == r)).any()]
        self.cells = {(c.policy, c.counterpart, c.policy_role): c for c in self.results.cells}
        scored = self.frame[self.frame["status"] != "error"]
        self.kinds = {}
        metric_set = {m for c in self.results.cells for m in c.metrics}
        for m in metric_set:
            try:
                self.kinds[m] = metric_values(scored, m)[0]
            except ValueError:
                self.kinds[m] = "mean"
        self.metrics = [m for m in ["success_at_1", "agreement", "policy_score", "counterpart_score"]
                        if m in metric_set]
        self.metrics += sorted(m for m in metric_set if m not in self.metrics and m not in
                               ("invalid", "policy_invalid", "max_turns"))
        self.metrics += [m for m in ("policy_invalid", "invalid", "max_turns") if m in metric_set]
        if "agreement" in self.metrics and all(c.metrics.get("agreement") == c.metrics.get("success_at_1")
                                               for c in self.results.cells):
            self.metrics.remove("agreement")  # Deal-or-NoDeal: Success@1 is agreement; one tab says it
        self.seeds = len(run.manifest.identity.get("seeds", [])) or int(self.frame["seed"].nunique())
        self.notes: list[str] = []  # sections that could not be computed, and why

    def percent(self, metric: str) -> bool:
        return self.kinds.get(metric) == "rate"


def _header(page: _Page) -> str:
    m = page.run.manifest
    res = page.results
    n_eps = sum(c.n_episodes for c in res.cells)
    n_err = sum(c.n_errors for c in res.cells)
    status = ('<span class="badge ok">complete</span>' if res.complete
              else f'<span class="badge warn">incomplete: {n_eps - n_err} of {res.n_planned} episodes scored</span>')
    ss = m.scenario_set
    facts = [
        ("domain", m.domain), ("split", f"{ss.get('split')} ({ss.get('version')}, hash {ss.get('hash')})"),
        ("scenarios", ss.get("n")), ("seeds per scenario", page.seeds),
        ("policies", len(page.policies)), ("counterparts", len(page.counterparts)),
        ("episodes", f"{n_eps:,}" + (f", {n_err} infrastructure errors (not scored)" if n_err else "")),
        ("created", m.created_at), ("harness", m.harness_version),
    ]
    items = "".join(f"<span>{esc(k)}: <b>{esc(v)}</b></span>" for k, v in facts)
    return (f'<header class="top"><div class="inner"><h1>Cross-play report</h1>'
            f'<div class="sub">{esc(page.run.name)} &nbsp; {status}</div>'
            f'<div class="facts">{items}</div></div></header>')


def _nav(page: _Page, has_passk: bool) -> str:
    links = [("matrix", "Matrix"), ("rankings", "Rankings"), ("mismatch", "Mismatch")]
    if has_passk:
        links.append(("passk", "pass@k"))
    links += [("cells", "All cells"), ("transcripts", "Transcripts"), ("methods", "Methods")]
    return ('<nav class="toc"><div class="inner">' + "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in links)
            + "</div></nav>")


def _heat_cell(iv: Interval | None, lo: float, hi: float, stops, percent: bool, signed: bool, attrs: str,
               tip: str, clickable: bool = True) -> str:
    if iv is None or iv.estimate is None:
        return f'<td class="na" title="{esc(tip)}">n/a</td>'
    span = hi - lo or 1.0
    bg, light = _color(_ramp(stops, (iv.estimate - lo) / span))
    ink = "#111" if light else "#fff"
    est, _, bounds = format_interval(iv, percent, signed, unit=True, stacked=True).partition("\n")
    ci, bar = "", ""
    if iv.low is not None and iv.high is not None:
        ci = f'<div class="ci">{esc(bounds)}</div>'
        left = 100 * (min(max(iv.low, lo), hi) - lo) / span
        width = max(1.0, 100 * (min(max(iv.high, lo), hi) - lo) / span - left)
        mark = 100 * (min(max(iv.estimate, lo), hi) - lo) / span
        bar = (f'<div class="bar"><span style="left:{left:.1f}%;width:{width:.1f}%"></span>'
               f'<i style="left:calc({mark:.1f}% - 1px)"></i></div>')
    classes = " ".join(c for c in ("dark" if light else "", "" if clickable else "static") if c)
    return (f'<td {attrs} class="{classes}" style="background:{bg};color:{ink}" '
            f'title="{esc(tip)}"><div class="est">{esc(est)}</div>{ci}{bar}</td>')


def _matrix(page: _Page) -> str:
    tabs, panels = [], []
    for i, metric in enumerate(page.metrics):
        percent = page.percent(metric)
        ivs = [c.metrics.get(metric) for c in page.results.cells]
        vals = [x for iv in ivs if iv is not None for x in (iv.estimate, iv.low, iv.high) if x is not None]
        lo, hi = color_span(vals, percent, page.options.full_scale)
        head1 = "".join(f'<th class="group" colspan="{sum(1 for c2, _ in page.columns if c2 == c)}" title="{esc(c)}">'
                        f"{esc(short(c))}</th>" for c in page.counterparts)
        head2 = "".join(f"<th>role {esc(r)}</th>" for _, r in page.columns)
        rows = []
        for pi, p in enumerate(page.policies):
            tds = []
            for c, r in page.columns:
                cell = page.cells.get((p, c, r))
                iv = cell.metrics.get(metric) if cell else None
                tip = (f"{short(p)} vs {short(c)}, policy in role {r}: {format_interval(iv, percent, unit=True)}. "
                       f"{describe(iv)}")
                if cell and cell.n_errors:
                    tip += f"; {cell.n_errors} error episodes not scored"
                attrs = f'data-p="{pi}" data-c="{page.counterparts.index(c)}" data-r="{esc(r)}"'
                tds.append(_heat_cell(iv, lo, hi, VIRIDIS, percent, False, attrs, tip + " Click: its transcripts."))
            rows.append(f'<tr><th class="row" title="{esc(p)}">{esc(short(p))}</th>{"".join(tds)}</tr>')
        scale = f"{lo:.0%} to {hi:.0%}" if percent else f"{format_number(lo)} to {format_number(hi)}"
        how = methods_note(ivs, "Hover a cell for its sample size; click it to read its transcripts.")
        legend = (f'<div class="legend"><span>{esc(label(metric))}: {esc(scale)}</span>'
                  f'<span>low</span><div class="ramp" style="background:{_gradient(VIRIDIS)}"></div><span>high</span>'
                  f'<span>· under each estimate: its {page.results.confidence:.0%} interval, and as a bar on the '
                  f'same scale (tick: the estimate)</span></div><div class="note">{esc(how)}</div>')
        panel_id = f"hm-{metric}"
        tabs.append(f'<button type="button" data-target="{esc(panel_id)}" aria-pressed="{str(i == 0).lower()}">'
                    f"{esc(label(metric))}</button>")
        panels.append(f'<div id="{esc(panel_id)}"{"" if i == 0 else " hidden"}><div class="heatwrap">'
                      f'<table class="heat"><thead><tr><th></th>{head1}</tr><tr><th></th>{head2}</tr></thead>'
                      f'<tbody>{"".join(rows)}</tbody></table></div>{legend}</div>')
    return (f'<section id="matrix"><h2>The cross-play matrix</h2><p class="lead">Each policy (row) against '
            f"each counterpart, in each role the policy played. Estimates are means over scenarios of the "
            f"per-scenario mean; intervals treat the scenario as the unit (rates: Clopper-Pearson at the "
            f'design-effect effective sample size), so correlated seeds are not counted as independent evidence.</p>'
            f'<div class="tabs">{"".join(tabs)}</div>{"".join(panels)}</section>')


def _table(headers: list[tuple[str, bool]], rows: list[list[str]], sortable: bool = False) -> str:
    """headers: (title, numeric); rows: already-escaped cell HTML (<td> included)."""
    head = "".join(f'<th class="{"num" if num else ""}">{esc(h)}</th>' for h, num in headers)
    body = "".join("<tr>" + "".join(r) + "</tr>" for r in rows)
    return (f'<div class="scroll"><table class="data{" sortable" if sortable else ""}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def _td(iv: Interval | None, percent: bool = False, signed: bool = False, unit: bool = True,
        stacked: bool = False) -> str:
    """A number with its interval; `stacked` puts the interval on a second line (narrow columns)."""
    sort = "" if iv is None or iv.estimate is None else f' data-sort="{iv.estimate}"'
    est, _, ci = format_interval(iv, percent, signed, unit=unit, stacked=stacked).partition("\n")
    body = f'{esc(est)}<div class="ci">{esc(ci)}</div>' if ci else esc(est)
    return f'<td class="num"{sort} title="{esc(describe(iv))}">{body}</td>'


def _note(ivs: list[Interval | None], extra: str = "") -> str:
    return f'<div class="note">{esc(methods_note(ivs, extra))}</div>'


def _rankings(page: _Page, r: Rankings | None) -> str:
    metric = page.options.metric
    if r is None:
        return (f'<section id="rankings"><h2>Rankings</h2><p class="lead">No ranking: '
                f"{esc(' '.join(page.notes))}</p></section>")
    percent = page.percent(metric)
    uni = _table([("rank", True), ("policy", False), (f"mean {label(metric)}", True)],
                 [[f'<td class="num">{esc(x.rank if x.rank is not None else "n/a")}</td>',
                   f'<td title="{esc(x.policy)}">{esc(short(x.policy))}</td>', _td(x.mean, percent)]
                  for x in r.uniform])
    nash_rows = sorted(r.nash.values, key=lambda v: -(v.value.estimate or 0))
    nash = _table([("policy", False), ("equilibrium weight", True), ("Nash value", True)],
                  [[f'<td title="{esc(v.policy)}">{esc(short(v.policy))}</td>', f'<td class="num">{v.weight:.3f}</td>',
                    _td(v.value, percent)] for v in nash_rows])
    chips = "".join(f"<span>{esc(short(c))}: <b>{w:.2f}</b></span>" for c, w in r.nash.counterpart_weights.items())
    norm = _table([("policy", False), ("IQM of score / column best", True)],
                  [[f'<td title="{esc(s.policy)}">{esc(short(s.policy))}</td>', _td(s.iqm)]
                   for s in sorted(r.normalized, key=lambda s: -(s.iqm.estimate or 0))])
    dropped = ""
    if r.n_scenarios_dropped:
        dropped = f" {r.n_scenarios_dropped} scenarios left out: not scored in every cell."
    if r.columns_dropped:
        dropped += (" Left out for lack of scored episodes: "
                    + ", ".join(f"{short(c)} (role {ro})" for c, ro in r.columns_dropped) + ".")
    norm_dropped = ""
    if r.normalized_dropped:
        norm_dropped = ("Left out (best score 0): "
                        + ", ".join(f"{short(c)}/{ro}" for c, ro in r.normalized_dropped) + ".")
    uni_note = _note([x.mean for x in r.uniform], "Rank = 1 + the number of policies whose interval lies wholly "
                     "above this one's; overlapping intervals share a rank.")
    nash_note = _note([v.value for v in r.nash.values], "Maximum-entropy equilibrium of the zero-sum game policy "
                      f"vs counterpart (Balduzzi et al. 2018); solver: {r.nash.solver}.")
    norm_note = _note([s.iqm for s in r.normalized], "Each cell divided by the best policy in its column, then the "
                      "interquartile mean over columns. " + norm_dropped)
    return f"""<section id="rankings"><h2>Rankings</h2>
<p class="lead">Three ways to sum the matrix up on {esc(label(metric))}, over the {r.n_scenarios} scenarios that every
cell scored.{esc(dropped)}</p>
<div class="cards">
<div class="card"><h3>Uniform mean over the {len(r.columns)} columns</h3>{uni}{uni_note}</div>
<div class="card"><h3>Nash averaging (agent vs counterpart)</h3>{nash}
<div class="small" style="margin-top:8px">weights the equilibrium puts on the panel \
(game value {r.nash.game_value:.3f}):</div>
<div class="weights">{chips}</div>{nash_note}</div>
<div class="card"><h3>Normalized score (IQM)</h3>{norm}{norm_note}</div>
</div></section>"""


def _mismatch(page: _Page, gaps: list[GapCell], detail: MismatchReport | None) -> str:
    metric = page.options.metric
    percent = page.percent(metric)
    if not gaps:
        body = '<p class="lead">Mismatch needs at least two counterparts.</p>'
    else:
        by = {(g.policy, g.counterpart): g.gap for g in gaps}
        span = max([abs(x) for g in gaps for x in (g.gap.estimate, g.gap.low, g.gap.high) if x is not None] or [1.0])
        head = "".join(f'<th class="group" title="{esc(c)}">{esc(short(c))}</th>' for c in page.counterparts)
        rows = []
        for p in page.policies:
            tds = []
            for c in page.counterparts:
                iv = by.get((p, c))
                tip = (f"{short(p)}: score vs {short(c)} minus its mean vs the other counterparts: "
                       f"{format_interval(iv, percent, True)}{' points' if percent else ''}. {describe(iv)}")
                tds.append(_heat_cell(iv, -span, span, DIVERGING, percent, True, "", tip, clickable=False))
            rows.append(f'<tr><th class="row" title="{esc(p)}">{esc(short(p))}</th>{"".join(tds)}</tr>')
        unit = " (in points)" if percent else ""
        body = (f'<p class="lead">Static-counterpart mismatch: a policy trained against one counterpart may exploit '
                f"its quirks and do worse against others. Each cell: the policy's {esc(label(metric))} against that "
                f"counterpart minus its mean against all the others{unit}, paired by game (scenario, seed, role). "
                f"Red: the policy does better against this counterpart than against the rest; if that counterpart "
                f"is the one it trained with, that is the mismatch.</p>"
                f'<div class="heatwrap"><table class="heat"><thead><tr><th></th>{head}</tr></thead>'
                f'<tbody>{"".join(rows)}</tbody></table></div>'
                f'<div class="legend"><span>{format_number(-span, percent, True)}</span><div class="ramp" '
                f'style="background:{_gradient(DIVERGING)}"></div>'
                f'<span>{format_number(span, percent, True)}</span></div>'
                + _note([g.gap for g in gaps]))
    if detail is not None:
        for m in detail.results:
            rows = [
                [f"<td>score vs {esc(short(m.train_counterpart))} (training counterpart)</td>", _td(m.gap.a, percent),
                 "<td></td>"],
                [f"<td>score vs the held-out panel ({len(m.heldout)})</td>", _td(m.gap.b, percent), "<td></td>"],
                ["<td><b>gap</b> (training minus held-out)</td>", _td(m.gap.difference, percent, True),
                 f'<td class="num" title="{esc(m.gap.test.test)}">{_p(m.gap.test.p_value)}</td>'],
                ["<td>proportional loss (gap / training score)</td>", _td(m.proportional_loss, True), "<td></td>"],
            ]
            for h in m.per_heldout:
                worst = " <b>(worst, selected)</b>" if h.scope == m.worst else ""
                rows.append([f"<td>&nbsp;&nbsp;gap vs {esc(short(h.scope))}{worst}</td>",
                             _td(h.difference, percent, True),
                             f'<td class="num" title="{esc(h.test.test)}">{_p(h.test.p_value)}</td>'])
            ivs = [m.gap.a, m.gap.b, m.gap.difference, m.proportional_loss, *(h.difference for h in m.per_heldout)]
            if m.reference and m.did and m.did_test and m.reference_gap:
                rows.append([f"<td>gap of the reference {esc(short(m.reference))}</td>",
                             _td(m.reference_gap.difference, percent, True),
                             f'<td class="num">{_p(m.reference_gap.test.p_value)}</td>'])
                rows.append(["<td><b>difference-in-differences</b></td>", _td(m.did, percent, True),
                             f'<td class="num" title="{esc(m.did_test.test)}">{_p(m.did_test.p_value)}</td>'])
                ivs += [m.did]
            holm = (f" Holm-adjusted p over {len(detail.results)} policies ({detail.holm_over}): {_p(m.p_holm)}."
                    if detail.holm_over else "")
            tests = "; ".join(sorted({m.gap.test.test, *(h.test.test for h in m.per_heldout)}))
            body += (f'<h3>{esc(short(m.policy))}, trained against {esc(short(m.train_counterpart))}</h3>'
                     + _table([("", False), ("estimate [interval]", True), ("p", True)], rows)
                     + _note(ivs, f"{m.n_games} games, {m.n_dropped} dropped for a missing episode. "
                                  f"Tests: {tests}.{holm}"))
        body += "".join(f'<p class="note">{esc(n)}</p>' for n in detail.notes)
    return f'<section id="mismatch"><h2>Mismatch</h2>{body}</section>'


def _p(p: float | None) -> str:
    return "n/a" if p is None else ("&lt;0.0001" if p < 1e-4 else f"{p:.4f}")


def _passk(page: _Page, rows: list[PassK]) -> str:
    ks = sorted({r.k for r in rows})
    by_cell: dict[tuple[str, str, str], dict[int, PassK]] = {}
    for r in rows:
        by_cell.setdefault((r.policy, r.counterpart, r.policy_role), {})[r.k] = r
    headers = [("policy", False), ("counterpart", False), ("role", False)]
    headers += [(f"pass@{k}", True) for k in ks] + [(f"pass^{k}", True) for k in ks if k > 1]
    body = []
    for (p, c, role), per in by_cell.items():
        cells = [f"<td>{esc(short(p))}</td>", f"<td>{esc(short(c))}</td>", f"<td>{esc(role)}</td>"]
        cells += [_td(per[k].pass_at_k if k in per else None, True) for k in ks]
        cells += [_td(per[k].pass_hat_k if k in per else None, True) for k in ks if k > 1]
        body.append(cells)
    return (f'<section id="passk"><h2>pass@k and pass^k</h2><p class="lead">With {page.seeds} seeds per scenario: '
            f"pass@k, the chance that at least one of k attempts succeeds, and pass^k, the chance that all k do "
            f"(reliability), estimated without bias from the seeds of each scenario (1 - C(n-c,k)/C(n,k) and "
            f"C(c,k)/C(n,k)), averaged over scenarios. Metric: {esc(label(page.options.metric))}.</p>"
            + _table(headers, body, sortable=True) + _note([x for r in rows for x in (r.pass_at_k, r.pass_hat_k)])
            + "</section>")


# The cell table shows this many metrics at a time (tabs switch between groups): with more, the
# table would be wider than a 1,000-pixel window and hide columns behind a scroll bar.
CELL_METRICS_PER_TABLE = 5


def _cells(page: _Page) -> str:
    groups = [page.metrics[i:i + CELL_METRICS_PER_TABLE] for i in range(0, len(page.metrics), CELL_METRICS_PER_TABLE)]
    tabs, panels = [], []
    for g, metrics in enumerate(groups):
        headers = [("policy", False), ("counterpart", False), ("role", False), ("episodes", True), ("errors", True)]
        headers += [(label(m) + (" %" if page.percent(m) else ""), True) for m in metrics]
        rows = []
        for c in page.results.cells:
            tds = [f'<td title="{esc(c.policy)}">{esc(short(c.policy))}</td>',
                   f'<td title="{esc(c.counterpart)}">{esc(short(c.counterpart))}</td>',
                   f"<td>{esc(c.policy_role)}</td>",
                   f'<td class="num" data-sort="{c.n_episodes}">{c.n_episodes}</td>',
                   f'<td class="num" data-sort="{c.n_errors}">{c.n_errors or ""}</td>']
            tds += [_td(c.metrics.get(m), page.percent(m), unit=False, stacked=True) for m in metrics]
            rows.append(tds)
        panel_id = f"cells-{g}"
        tabs.append(f'<button type="button" data-target="{panel_id}" aria-pressed="{str(g == 0).lower()}">'
                    f"{esc(', '.join(label(m) for m in metrics))}</button>")
        panels.append(f'<div id="{panel_id}"{"" if g == 0 else " hidden"}>'
                      + _table(headers, rows, sortable=True) + "</div>")
    ivs = [iv for c in page.results.cells for iv in c.metrics.values()]
    switch = f'<div class="tabs">{"".join(tabs)}</div>' if len(groups) > 1 else ""
    return (f'<section id="cells"><h2>All cells</h2><p class="lead">Every metric of every cell with its '
            f"{page.results.confidence:.0%} interval (rates in %), {CELL_METRICS_PER_TABLE} metrics at a time. Click "
            f"a header to sort; hover a number for its method and sample size.</p>" + switch + "".join(panels)
            + _note(ivs) + "</section>")


def _transcripts(page: _Page, total: int, shown: int) -> str:
    return f"""<section id="transcripts"><h2>Transcripts</h2>
<p class="lead">Filter the episodes and read any of them turn by turn (the policy on the left, the counterpart on the
right; dashed: private moves the other side never saw). Clicking a cell of the matrix opens its episodes here; the
address bar then links to the episode.</p>
<div class="filters">
<label>policy<select id="f-policy"><option value="">all</option></select></label>
<label>counterpart<select id="f-counterpart"><option value="">all</option></select></label>
<label>policy's role<select id="f-role"><option value="">all</option></select></label>
<label>status<select id="f-status"><option value="">all</option></select></label>
<label>outcome<select id="f-outcome"><option value="">all</option><option value="success">success</option>
<option value="failure">failure</option></select></label>
<label>scenario or episode id<input id="f-scenario" type="search" placeholder="e.g. dnd-239f"></label>
</div>
<div class="count" id="episode-count">{shown} of {total} episodes</div>
<div class="browser">
<div class="episodes"><table><thead><tr><th>policy · counterpart · role</th><th>scenario</th><th>seed</th>
<th>status</th><th>outcome</th><th class="num">score</th></tr></thead><tbody id="episode-rows"></tbody></table>
<button type="button" class="more" id="episode-more" hidden>show more</button></div>
<div class="viewer" id="viewer"><div class="empty">Pick an episode on the left.</div></div>
</div></section>"""


def _methods(page: _Page, rank: Rankings | None, extra: list[str]) -> str:
    items = [
        ("unit of replication", "the scenario: seeds, roles and counterparts of one scenario are correlated, so every "
         "interval treats whole scenarios as the sample (docs/statistics.md)"),
        ("cell intervals", f"rates: Clopper-Pearson at the Kish effective sample size with Korn-Graubard degrees of "
         f"freedom (plain Clopper-Pearson with one seed per scenario), never zero-width at 0 or 1; scores: t on "
         f"scenario means; confidence {page.results.confidence:.0%}"),
        ("estimates", "means over scenarios of per-scenario means; infrastructure errors are dropped, never scored "
         "as the policy's failure"),
        ("mismatch", "score against a counterpart minus the mean against the others, paired by game (scenario, "
         "seed, role); matrix: paired t over scenarios (panel fixed); detail: the view named in its notes"),
        ("p-values", "each p-value is its interval inverted: the interval excludes 0 exactly when p < 1 - level"),
        ("rankings", "uniform mean over (counterpart, role) columns, ranks from paired comparisons (Holm) with "
         "bootstrap rank intervals; Nash averaging (maximum-entropy equilibrium) re-solved on every bootstrap "
         "resample; normalized score by column best, interquartile mean"),
    ]
    if rank is not None:
        items.append(("Nash solver", rank.nash.solver))
    items += [("note", x) for x in extra]
    items.append(("produced by", f"ibrl-bench {__version__}, "
                                 f"{datetime.now(UTC).isoformat(timespec='seconds')}; "
                                 "heatmap.png sits next to this file"))
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items)
    return f'<section id="methods"><h2>Methods</h2><dl class="methods">{dl}</dl></section>'


# ------------------------------------------------------------------------- transcripts data

def _episode_data(page: _Page, limit: int) -> tuple[str, int, int]:
    """The episodes for the browser, as JSON safe to inline in a <script> element."""
    t = page.run.table
    keys, policies, counterparts = t["key"].tolist(), t["policy"].tolist(), t["counterpart"].tolist()
    roles = t["policy_role"].tolist()
    pol = {p: i for i, p in enumerate(page.policies)}
    cpt = {c: i for i, c in enumerate(page.counterparts)}
    order_keys = list(zip([pol.get(p, 0) for p in policies], [cpt.get(c, 0) for c in counterparts], roles,
                          t["scenario_id"].tolist(), t["seed"].tolist(), range(len(keys)), strict=True))
    positions = sorted(range(len(keys)), key=order_keys.__getitem__)
    if len(positions) > limit:
        # Keep every cell represented: take the first episodes of each cell, round-robin.
        by_cell: dict[tuple, list[int]] = {}
        for i in positions:
            by_cell.setdefault((policies[i], counterparts[i], roles[i]), []).append(i)
        rank = {i: n for n, i in enumerate(positions)}
        kept: list[int] = []
        depth = 0
        while len(kept) < limit:
            for group in by_cell.values():
                if depth < len(group) and len(kept) < limit:
                    kept.append(group[depth])
            depth += 1
        positions = sorted(kept, key=rank.__getitem__)
    order = page.run.transcribed([keys[i] for i in positions])
    eps, turns = [], []
    for r in order:
        o = r.outcome
        other = next((role for role in r.agents if role != r.policy_role), None)
        eps.append({
            "k": r.key, "p": pol.get(r.policy, 0), "c": cpt.get(r.counterpart, 0), "r": r.policy_role,
            "s": r.scenario_id, "sd": r.seed, "st": o.status, "win": o.success, "ag": o.agreement,
            "ps": o.rewards.get(r.policy_role), "cs": o.rewards.get(other) if other else None,
            "first": r.starter, "d": o.detail, "m": o.metrics, "err": r.errors, "n": len(r.transcript),
        })
        turns.append([[t.role, t.phase, t.text, t.public, t.violation,
                       json.dumps(t.parsed, sort_keys=True) if t.parsed else None] for t in r.transcript])
    payload = {
        "policies": [short(p) for p in page.policies], "counterparts": [short(c) for c in page.counterparts],
        "roles": page.roles, "statuses": sorted(t["status"].unique()),
        "episodes": eps, "total": len(keys),
        # Scores shown with the decimals their scale needs (TeleSales 0-1: 0.50, not 0.5).
        "digits": decimals((v for r in order for v in r.outcome.rewards.values()), whole=True),
    }
    payload["private"], payload["private_note"] = _private_views(page, order)
    # The turns are most of the page (about 1 KB an episode) and only read when an episode is opened:
    # deflated and in base64, the browser neither parses nor holds them until then, and the page
    # opens in about the time of one without them.
    packed = json.dumps(turns, separators=(",", ":"), allow_nan=False, default=_json_default).encode()
    payload["turns"] = base64.b64encode(zlib.compress(packed, 6)).decode("ascii")
    text = json.dumps(payload, separators=(",", ":"), allow_nan=False, default=_json_default)
    # Inside <script>, "</script" (or "<!--") in a transcript would end the element: escape "<".
    return text.replace("<", "\\u003c"), len(keys), len(eps)


def _private_views(page: _Page, shown: list) -> tuple[dict[str, dict[str, dict]], str]:
    """What each side knew in each shown scenario (its opening observation's private part), so a
    reader can judge a deal: {scenario id: {role: private}}, and why some are missing. A scenario
    that cannot be rebuilt as it was played (a moved context file, a changed generator) is left out."""
    from ibrl_bench.domains import get_domain

    try:
        scenarios = page.run.scenarios
    except UserError as e:
        return {}, str(e)
    domain = get_domain(page.domain)
    views: dict[str, dict[str, dict]] = {}
    for r in shown:
        scenario = scenarios.get(r.scenario_id)
        if r.scenario_id in views or scenario is None or scenario.hash != r.scenario_hash:
            continue
        state = domain.start(scenario, 0)
        # The catalog is the same public list in every TeleSales scenario: left out, it would
        # repeat the page's largest block once per scenario.
        views[r.scenario_id] = {role: {k: v for k, v in domain.observe(state, role).private.items() if k != "catalog"}
                                for role in domain.roles}
    missing = len({r.scenario_id for r in shown} - set(views))
    return views, f"{missing} scenarios could not be rebuilt as they were played" if missing else ""


def _json_default(x: object) -> object:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)


# ------------------------------------------------------------------------- the page

def _quiet(stage: str) -> None:
    pass


def build_report(run: Run, options: ReportOptions, progress: Callable[[str], None] = _quiet) -> str:
    """The page; `progress` hears the name of each stage as it starts (a large run takes a while)."""
    progress(f"reading {run.name}")
    return _build(_Page(run, options), progress)


def _build(page: _Page, progress: Callable[[str], None]) -> str:
    run, options = page.run, page.options
    progress(f"rankings and mismatch of {len(page.frame):,} episodes")
    frame = page.frame
    metric = options.metric
    scored = frame[frame["status"] != "error"]
    try:
        metric_values(scored, metric)  # an unknown metric fails here, before any work
    except ValueError as e:
        raise UserError(f"{e}; pass one of them to --metric") from None
    extra: list[str] = []

    try:
        rank = rankings(frame, metric=metric, confidence=options.confidence)
    except Exception as e:  # noqa: BLE001 - a section that cannot be computed is explained, not fatal
        rank = None
        page.notes.append(str(e))
    gaps = gap_matrix(frame, metric=metric, confidence=options.confidence)
    detail = None
    if options.train_counterpart:
        policies = options.policies or [p for p in page.policies if p != options.reference]
        detail = mismatch_many(frame, policies, options.train_counterpart, reference=options.reference,
                               metric=metric, confidence=options.confidence)
    passk_rows: list[PassK] = []
    if page.seeds > 1 and page.kinds.get(metric) == "rate":
        passk_rows = passk_table(frame, metric=metric, confidence=options.confidence)
    elif page.seeds > 1:
        extra.append(f"pass@k is not shown: {metric} is a score, not a success/failure")

    progress(f"transcripts (up to {options.max_episodes:,})")
    data, total, shown = _episode_data(page, options.max_episodes)
    title = f"ibrl-bench report · {run.short_name}"
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<title>{esc(title)}</title>
<script>{ERROR_RECORDER}</script>
<style>{_asset("report.css")}</style>
</head>
<body>
{_header(page)}
{_nav(page, bool(passk_rows))}
<main>
<div class="error-banner">This page hit a script error; some parts may not work: <pre id="js-errors"></pre></div>
{_matrix(page)}
{_rankings(page, rank)}
{_mismatch(page, gaps, detail)}
{_passk(page, passk_rows) if passk_rows else ""}
{_cells(page)}
{_transcripts(page, total, shown)}
{_methods(page, rank, extra)}
<footer>ibrl-bench {esc(__version__)} · cross-play report of {esc(run.name)} · \
open offline, nothing here loads from the network</footer>
</main>
<script type="application/json" id="episodes-data">{data}</script>
<script>{_asset("report.js")}</script>
</body>
</html>
"""


def write_report(run: Run, options: ReportOptions, out: Path | None = None,
                 progress: Callable[[str], None] = _quiet) -> tuple[Path, Path]:
    """Write report.html (to `out`, default RUN/report.html) and heatmap.png next to it."""
    from ibrl_bench.report.heatmap import render_heatmap  # matplotlib: imported here only

    out = out or run.folder / "report.html"
    progress(f"reading {run.name}")
    page = _Page(run, options)
    text = _build(page, progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)

    progress("heatmap.png")
    metric = options.metric if options.metric in page.kinds else "success_at_1"
    cells = {k: c.metrics.get(metric) for k, c in page.cells.items()}
    ivs = [iv for iv in cells.values() if iv is not None and iv.low is not None]
    note = methods_note(ivs, f"{page.seeds} seed(s) per scenario; {run.name}")
    png = render_heatmap(out.parent / "heatmap.png", page.policies, page.columns, cells,
                         metric_label=label(metric), percent=page.percent(metric),
                         title=f"{label(metric)} by cell, {run.manifest.domain}", note=note,
                         full_scale=options.full_scale)
    return out, png

