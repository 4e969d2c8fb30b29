"""load_run, the analysis commands, and report.html, opened in a real headless Chromium.

How the browser check works, without a DevTools connection: Chromium runs headless twice, once
with --dump-dom (the page's DOM after its scripts ran, on stdout) and once with --screenshot.
The page itself records every script error, failed load and Content-Security-Policy violation on
<html data-js-errors=N>, and sets data-report-ready=1 when its script finished; the test reads both
from the dumped DOM. Chromium's own console log (--enable-logging=stderr) must also be free of
console messages: the page writes none, so any is an error or a blocked request. A page with a
deliberate error proves that this detection fires.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from ibrl_bench.cli import main
from ibrl_bench.report.html import ReportOptions, build_report, write_report
from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig
from ibrl_bench.runs import Run, load_run

POLICIES = ["scripted:dealnodeal/boulware", "scripted:dealnodeal/fair", "scripted:dealnodeal/tit_for_tat"]
COUNTERPARTS = ["scripted:dealnodeal/conceder", "scripted:dealnodeal/hardliner", "scripted:dealnodeal/random"]
HOSTILE = '</script><script>document.title="pwned"</script><img src="https://example.com/x.png"> & <b>bold</b>'


def play(folder: Path, seeds: int) -> Path:
    config = CrossplayConfig(policies=POLICIES, counterparts=COUNTERPARTS, scenarios=8, seeds=seeds, split="dev")
    asyncio.run(Crossplay(config, folder).run())
    return folder


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """A real 3 x 3 x 2-role run, 8 scenarios x 2 seeds; one episode's first move is replaced by
    markup, as a model might write, to check it is shown as text and never run."""
    folder = play(tmp_path_factory.mktemp("report") / "run", seeds=2)
    path = folder / "episodes.jsonl"
    first = json.loads(path.read_text().splitlines()[0])
    first["transcript"][0]["text"] = HOSTILE
    with path.open("a") as f:
        f.write(json.dumps(first) + "\n")  # the newest record of a key wins
    return folder


@pytest.fixture(scope="module")
def one_seed_run(tmp_path_factory) -> Path:
    return play(tmp_path_factory.mktemp("report") / "one", seeds=1)


def cli(*args: str, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


# ------------------------------------------------------------------------- load_run

def test_load_run_returns_episodes_and_cells(run_folder):
    episodes, cells = load_run(run_folder, transcripts=True)
    assert len(episodes) == 3 * 3 * 2 * 8 * 2
    assert {"policy", "counterpart", "policy_role", "scenario_id", "seed", "status", "success", "policy_score",
            "m_pareto_optimal", "transcript"} <= set(episodes.columns)
    assert episodes.loc[0, "transcript"][0]["text"] == HOSTILE
    assert len(cells) == 18 * cells["metric"].nunique()
    row = cells[(cells["metric"] == "success_at_1")].iloc[0]
    assert row["method"] and row["confidence"] == 0.95 and row["n"] == 16 and row["n_clusters"] == 8
    assert row["low"] <= row["estimate"] <= row["high"]


def test_import_stays_light_and_load_run_is_exported():
    code = ("import sys, ibrl_bench; assert 'pandas' not in sys.modules and 'matplotlib' not in sys.modules; "
            "f = ibrl_bench.load_run; assert 'pandas' in sys.modules; print(f.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "load_run"


def test_a_capped_transcript_browser_keeps_every_cell_in_matrix_order(run_folder):
    from ibrl_bench.report.html import _episode_data, _Page

    page = _Page(Run(run_folder), ReportOptions(max_episodes=20))
    data, total, shown = _episode_data(page, 20)
    episodes = json.loads(data)["episodes"]
    assert (total, shown, len(episodes)) == (288, 20, 20)
    cells = [(e["p"], e["c"], e["r"]) for e in episodes]
    assert len(set(cells)) == 18  # 18 cells, 20 places: every cell shown, two of them twice
    order = [(e["p"], e["c"], e["r"], e["s"], e["sd"]) for e in episodes]
    assert order == sorted(order)


# ------------------------------------------------------------------------- the commands

@pytest.mark.slow
def test_analysis_commands(run_folder, one_seed_run, capsys):
    run = str(run_folder)
    code, out, err = cli("compare", run, "boulware", "fair", capsys=capsys)
    assert code == 0, err
    assert "boulware - fair on success_at_1" in out and "all cells" in out and "interval inverted" in out
    assert "p (Holm)" in out and "adjusted over" in out
    code, out, _ = cli("compare", str(one_seed_run), "boulware", "fair", "--role", "a", "--equivalence-margin", "0.2",
                       capsys=capsys)
    assert code == 0 and "TOST p" in out and "Clopper-Pearson" in out
    code, out, _ = cli("compare", run, "conceder", "random", "--json", capsys=capsys)
    assert code == 0 and json.loads(out)["kind"] == "counterpart"

    code, out, err = cli("mismatch", run, "--policy", "boulware", "--policy", "fair", "--train-counterpart",
                         "conceder", "--reference", "tit_for_tat", capsys=capsys)
    assert code == 0, err
    assert "difference-in-differences" in out and "p (Holm)" in out and "worst (selected)" in out
    assert "view: crossed" in out and "only 2 held-out counterparts" in out

    # Method vs method: each policy with its own training counterpart, one reference.
    code, out, err = cli("mismatch", run, "--method", "boulware", "conceder", "--method", "fair", "hardliner",
                         "--reference", "tit_for_tat", "--view", "panel", "--equivalence-margin", "0.1", capsys=capsys)
    assert code == 0, err
    assert "method vs method" in out and "DiD(a) - DiD(b)" in out and "raw gap difference" in out
    assert "view: panel fixed" in out and "TOST" in out
    code, out, _ = cli("mismatch", run, "--method", "boulware", "conceder", "--method", "fair", "hardliner",
                       "--reference", "tit_for_tat", "--json", capsys=capsys)
    report = json.loads(out)
    assert report["heldout"] == ["scripted:dealnodeal/random"] and len(report["comparisons"]) == 1

    code, out, _ = cli("rank", run, "--json", capsys=capsys)
    ranked = json.loads(out)
    assert code == 0 and "linprog" in ranked["nash"]["solver"]
    assert all(r["rank_low"] <= r["rank"] <= r["rank_high"] or r["rank_low"] <= r["rank_high"]
               for r in ranked["uniform"])
    assert all(0 <= v["p_support"] <= 1 for v in ranked["nash"]["values"])
    assert abs(sum(ranked["nash"]["counterpart_weights"].values()) - 1) < 1e-6

    code, out, _ = cli("passk", run, capsys=capsys)
    assert code == 0 and "pass@k" in out and "C(n-c,k)" in out
    code, out, _ = cli("plan", "--delta", "0.1", "--from", run, capsys=capsys)
    assert code == 0 and "scenarios needed" in out and "Miller 2024" in out
    code, out, _ = cli("plan", "--delta", "0.05", "--rate", "0.8", "--icc", "0.2", "--seeds", "1,4", "--json",
                       capsys=capsys)
    assert code == 0 and [r["seeds"] for r in json.loads(out)["rows"]] == [1, 4]


@pytest.mark.parametrize("args, fragment", [
    (["compare", "{run}", "boulware", "nobody"], "not both policies nor both counterparts"),
    (["compare", "{run}", "boulware", "fair", "--metric", "elo"], "unknown metric 'elo'"),
    (["mismatch", "{run}", "--policy", "nobody", "--train-counterpart", "conceder"],
     "policy 'nobody' is not in the run"),
    (["mismatch", "{run}", "--policy", "fair", "--train-counterpart", "fair"], "counterpart 'fair' is not in the run"),
    (["mismatch", "{run}", "--method", "fair", "conceder", "--heldout", "conceder", "--heldout", "random"],
     "--include-train-in-panel"),
    (["mismatch", "{run}", "--policy", "fair"], "--train-counterpart"),
    (["rank", "{run}", "--role", "seller"], "role 'seller' is not in the run"),
    (["passk", "{one}"], "one seed per scenario"),
    (["plan", "--delta", "0.05"], "plan needs the variance"),
    (["plan", "--delta", "0.05", "--from", "{one}"], "--icc"),
    (["plan", "--delta", "0.05", "--rate", "0.5", "--seeds", "0,2"], "--seeds"),
    (["report", "/nonexistent/run"], "not a run folder"),
])
def test_bad_input_gets_one_clear_line(args, fragment, run_folder, one_seed_run, capsys):
    args = [a.format(run=run_folder, one=one_seed_run) for a in args]
    code, _, err = cli(*args, capsys=capsys)
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in err


# ------------------------------------------------------------------------- report.html

@pytest.fixture(scope="module")
def report(run_folder) -> Path:
    html_path, png = write_report(Run(run_folder), ReportOptions(
        train_counterpart=COUNTERPARTS[0], policies=POLICIES[:2], reference=POLICIES[2]))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    return html_path


def test_the_report_reads_the_same_with_and_without_the_summaries_sidecar(report, run_folder, tmp_path):
    # The folder's sidecar lacks the record the fixture appended by hand; without it every row comes from the log.
    sidecar = run_folder / "summaries.jsonl"
    assert len(sidecar.read_bytes().splitlines()) == len((run_folder / "episodes.jsonl").read_bytes().splitlines()) - 1
    moved = sidecar.rename(tmp_path / "summaries.jsonl")
    try:
        without = build_report(Run(run_folder), ReportOptions(
            train_counterpart=COUNTERPARTS[0], policies=POLICIES[:2], reference=POLICIES[2]))
    finally:
        moved.rename(sidecar)
    stamp = re.compile(r"\d{4}-\d\d-\d\dT[\d:]+\+00:00")
    assert stamp.sub("", report.read_text()) == stamp.sub("", without)


def test_report_is_self_contained_and_complete(report):
    text = report.read_text()
    assert 'http-equiv="Content-Security-Policy"' in text and "default-src 'none'" in text
    # Nothing that would load from elsewhere: no external src/href, stylesheet links or CSS imports.
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', text)
    assert "<link" not in text and "@import" not in text and "url(" not in text
    for section in ('id="matrix"', 'id="rankings"', 'id="mismatch"', 'id="passk"', 'id="cells"',
                    'id="transcripts"', 'id="methods"'):
        assert section in text, section
    for fragment in ("difference-in-differences", "Nash averaging", "interquartile mean", "pass@2", "linprog"):
        assert fragment in text, fragment
    # The hostile transcript is data inside the JSON block (its turns deflated, in base64): it cannot end the script.
    assert HOSTILE not in text and text.count("</script>") == 3  # the error recorder, the data block and the app
    data = json.loads(text.split('id="episodes-data">', 1)[1].split("</script>", 1)[0])
    turns = json.loads(zlib.decompress(base64.b64decode(data["turns"])))
    assert len(turns) == len(data["episodes"]) and any(t[2] == HOSTILE for episode in turns for t in episode)


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def chromium(url: str, *args: str, profile: Path) -> subprocess.CompletedProcess:
    exe = chromium_binary()
    assert exe
    cmd = [exe, "--headless", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage", "--no-first-run",
           "--hide-scrollbars", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=5000", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90)


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


needs_chromium = pytest.mark.skipif(
    chromium_binary() is None,
    reason="Chromium is not installed (Debian: apt-get install -y chromium); the report's browser check needs it")


@needs_chromium
@pytest.mark.slow
def test_error_detection_fires_on_a_broken_page(report, tmp_path):
    """The checks below would pass vacuously if the recorder never fired: break a copy on purpose."""
    broken = tmp_path / "broken.html"
    text = report.read_text().replace('<main>', '<main><img src="https://example.com/x.png">', 1)
    broken.write_text(text.replace("var PAGE = 200", "var PAGE = undefinedName", 1))
    proc = chromium(broken.as_uri(), "--dump-dom", profile=tmp_path / "profile")
    errors = re.search(r'data-js-errors="(\d+)"', proc.stdout)
    assert errors and int(errors.group(1)) >= 2, proc.stdout[:500]  # the blocked image and the ReferenceError
    assert 'data-report-ready="1"' not in proc.stdout
    assert any("undefinedName" in line for line in console_lines(proc.stderr))


@needs_chromium
@pytest.mark.slow
def test_report_in_headless_chromium(report, run_folder, tmp_path):
    first = json.loads((run_folder / "episodes.jsonl").read_text().splitlines()[0])
    url = report.as_uri() + "#episode=" + first["key"]
    proc = chromium(url, "--dump-dom", profile=tmp_path / "profile")
    dom = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'data-report-ready="1"' in dom, dom[:300]
    assert 'data-js-errors="0"' in dom
    assert console_lines(proc.stderr) == [], console_lines(proc.stderr)
    # The markup in the transcript became text, not elements: no title change, no image.
    assert "<title>pwned</title>" not in dom and '<img src="https://example.com' not in dom
    # The deep link opened the episode turn by turn, the markup shown as text.
    viewer = dom.split('id="viewer"', 1)[1].split("</section>", 1)[0]
    assert "&lt;/script&gt;&lt;script&gt;document.title" in viewer
    assert viewer.count('class="turn ') == len(first["transcript"])
    assert "private, not shown to the other side" in viewer
    # Beside the transcript, what each side knew: the item counts and both sides' values.
    from ibrl_bench.domains import get_domain

    domain = get_domain("dealnodeal")
    scenario = Run(run_folder).scenarios[first["scenario_id"]]
    private = domain.observe(domain.start(scenario, 0), "a").private
    table = viewer.split('class="private-table"', 1)[1].split("</table>", 1)[0]
    cells = re.findall(r"<td>([^<]*)</td>", table)
    values_b = domain.observe(domain.start(scenario, 0), "b").private["values"]
    policy_role = first["policy_role"]
    own, other = (private["values"], values_b) if policy_role == "a" else (values_b, private["values"])
    expected = [str(x) for item, count, v, w in zip(private["items"], private["counts"], own, other, strict=True)
                for x in (item, count, v, w)]
    assert cells == expected
    # The browser lists the episodes of that cell (filtered by the link), 16 = 8 scenarios x 2 seeds.
    rows = re.findall(r'<tr class="ep[^"]*" data-key="', dom)
    assert len(rows) == 16
    assert "16 of 288 episodes match" in dom

    shot = tmp_path / "report.png"
    proc = chromium(report.as_uri(), f"--screenshot={shot}", "--window-size=1400,2400", profile=tmp_path / "p2")
    assert shot.exists(), proc.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    assert console_lines(proc.stderr) == []
    if os.environ.get("IBRL_REPORT_SCREENSHOT"):  # keep it for a human look: IBRL_REPORT_SCREENSHOT=path
        shutil.copy(shot, os.environ["IBRL_REPORT_SCREENSHOT"])


def test_report_command(run_folder, tmp_path, capsys):
    out = tmp_path / "r" / "report.html"
    code, stdout, err = cli("report", str(run_folder), "--out", str(out), "--train-counterpart", "hardliner",
                            "--max-episodes", "50", capsys=capsys)
    assert code == 0, err
    assert str(out) in stdout and out.exists() and (out.parent / "heatmap.png").exists()
    text = out.read_text()
    data = json.loads(text.split('id="episodes-data">', 1)[1].split("</script>", 1)[0])
    assert len(data["episodes"]) == 50 and data["total"] == 288
    assert len({(e["p"], e["c"], e["r"]) for e in data["episodes"]}) == 18  # every cell kept


def test_an_interval_with_a_negative_bound_is_not_written_with_a_dash():
    from ibrl_bench.report.numbers import format_interval
    from ibrl_bench.stats.intervals import Interval

    def iv(est, low, high):
        return Interval(estimate=est, low=low, high=high, method="t", confidence=0.95, n=10, n_clusters=10)

    assert format_interval(iv(0.94, 0.84, 0.98), percent=True, digits=1) == "94 [84-98]"
    assert format_interval(iv(-0.01, -0.06, 0.08), percent=True, digits=1) == "-1 [-6, 8]"
    assert format_interval(iv(-2.5, -3.0, -2.0), digits=1) == "-2.5 [-3.0, -2.0]"
    # The same formatter in report.html: a unit after a rate, signs on differences (then never a dash).
    assert format_interval(iv(0.94, 0.84, 0.98), percent=True, unit=True) == "94% [84-98]"
    assert format_interval(iv(0.12, 0.04, 0.2), percent=True, signed=True) == "+12 [+4, +20]"
    assert format_interval(Interval(estimate=0.5, low=None, high=None, method="none", confidence=0.95, n=1,
                                    n_clusters=1), digits=3) == "0.500"


def test_rates_are_coloured_on_the_full_scale_unless_asked_to_span_the_data():
    from ibrl_bench.report.heatmap import color_span

    assert color_span([0.72, 0.95, 1.0], percent=True) == (0.0, 1.0)  # 72% is not drawn as the worst colour
    assert color_span([0.72, 0.95, 1.0], percent=True, full_scale=False) == (0.7, 1.0)
    assert color_span([0.98, 0.99], percent=True, full_scale=False) == (0.9, 1.0)  # never narrower than 10 points
    assert color_span([3.5, 7.25], percent=False) == (3.5, 7.25)  # scores span their data
    assert color_span([5.0, 5.0], percent=False) == (4.5, 5.5)


def test_episodes_lists_the_matching_episodes_and_prints_one_whole(run_folder, capsys):
    code, out, err = cli("episodes", str(run_folder), "--policy", "boulware", "--counterpart", "hardliner",
                         "--role", "a", capsys=capsys)
    assert code in (0, None), err
    assert "16 episodes match" in out  # 8 scenarios x 2 seeds of one cell
    assert out.count("boulware") == 16 and "conceder" not in out

    first = json.loads((run_folder / "episodes.jsonl").read_text().splitlines()[0])
    newest = json.loads((run_folder / "episodes.jsonl").read_text().splitlines()[-1])  # the rewritten record
    code, out, err = cli("episodes", str(run_folder), "--show", first["key"][:12], capsys=capsys)
    assert code in (0, None), err
    assert f"episode {first['key']}" in out
    assert HOSTILE in out  # the newest record of the key, its markup printed as text
    assert newest["key"] == first["key"]
    assert '"counts"' in out and '"values"' in out  # what both sides knew
    assert f"status={first['outcome']['status']}" in out


@pytest.mark.parametrize("args, fragment", [
    (["--policy", "nobody"], "policy 'nobody' is not in the run"),
    (["--scenario", "dnd-nope"], "no episode of"),
    (["--show", ""], "matches 288 episodes; give more of the key"),
])
def test_episodes_refuses_with_one_line(run_folder, capsys, args, fragment):
    code, out, err = cli("episodes", str(run_folder), *args, capsys=capsys)
    assert code != 0 and fragment in err and len(err.strip().splitlines()) == 1, err


# Run in the page after it loaded: every element that hides part of its content behind a scroll bar
# or a cut (overflow auto/scroll/hidden/clip with content wider than its box), and the page itself
# when it is wider than the window. Written to <html data-overflow>, which --dump-dom shows.
OVERFLOW_PROBE = """(function(){function check(){var out=[];
document.querySelectorAll('main *').forEach(function(el){if(el.offsetParent===null)return;
var ox=getComputedStyle(el).overflowX;
if((ox==='auto'||ox==='scroll'||ox==='hidden'||ox==='clip')&&el.scrollWidth>el.clientWidth+1)
out.push(((el.closest('section')||{}).id||'')+'/'+(el.id||el.className||el.tagName)+':'+el.scrollWidth+'>'+el.clientWidth);});
var d=document.documentElement;if(d.scrollWidth>d.clientWidth+1)out.push('page:'+d.scrollWidth+'>'+d.clientWidth);
d.setAttribute('data-overflow',out.join('|')||'none');}
if(document.readyState==='complete')check();else window.addEventListener('load',check);})();"""


@pytest.fixture(scope="module")
def telesales_report(tmp_path_factory) -> tuple[Path, Path]:
    """A TeleSales run (4 sellers x 4 buyers) and its report: longer names and 0-1 scores."""
    config = CrossplayConfig(domain="telesales", policies=[f"scripted:telesales/{s}" for s in (
        "consultative", "discount_led", "pushy_upseller", "by_the_book")], counterparts=[
        f"scripted:telesales/{b}" for b in ("hurried", "skeptical", "friendly", "analytical")], roles=["seller"],
        scenarios=8)
    folder = tmp_path_factory.mktemp("ts") / "run"
    asyncio.run(Crossplay(config, folder).run())
    html_path, _ = write_report(Run(folder), ReportOptions())
    return html_path, folder


@needs_chromium
@pytest.mark.slow
@pytest.mark.parametrize("domain", ["dealnodeal", "telesales"])
@pytest.mark.parametrize("width", [1000, 1600])
def test_nothing_is_clipped_from_1000_to_1600_pixels(request, domain, tmp_path, width):
    report, run_folder = ((request.getfixturevalue("report"), request.getfixturevalue("run_folder"))
                          if domain == "dealnodeal" else request.getfixturevalue("telesales_report"))
    probed = tmp_path / "probed.html"
    probed.write_text(report.read_text().replace("</body>", f"<script>{OVERFLOW_PROBE}</script></body>"))
    first = json.loads((run_folder / "episodes.jsonl").read_text().splitlines()[0])
    url = probed.as_uri() + "#episode=" + first["key"]  # the transcript viewer open, as a reader has it
    proc = chromium(url, "--dump-dom", f"--window-size={width},2000", profile=tmp_path / "profile")
    found = re.search(r'data-overflow="([^"]*)"', proc.stdout)
    assert found, proc.stdout[:300]
    assert html_unescape(found.group(1)) == "none"
    shot = tmp_path / f"report-{width}.png"
    chromium(url, f"--screenshot={shot}", f"--window-size={width},5000", profile=tmp_path / "p2")
    assert shot.exists()
    if os.environ.get("IBRL_REPORT_SCREENSHOT"):  # keep them for a human look
        shutil.copy(shot, Path(os.environ["IBRL_REPORT_SCREENSHOT"]).with_suffix(f".{domain}.{width}.png"))


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)
