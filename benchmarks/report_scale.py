"""How `ibrl-bench report` and `load_run` scale with the size of a run: 10,000 vs 100,000 episodes.

For each size it plays (or reuses, with --keep) a scripted Deal-or-NoDeal run of 5 policies x 5
counterparts x 2 roles (10,000: 200 scenarios x 1 seed; 100,000: 500 scenarios x 4 seeds), then
times, each in a fresh process: `ibrl-bench report`, `load_run`, and a bare `import ibrl_bench`
(the floor both pay). Wall and CPU seconds, and peak memory (max RSS) of the process. The baseline,
measured in the same run: the same commands on a view of the folder without its summaries sidecar
(manifest and log linked, nothing else), which reads every line of the log as a folder written
before the sidecar existed does. Where Chromium is installed it also times opening each report
headless (--dump-dom, which returns once the page has loaded and its scripts ran) against an empty
page in the same run.

    nice -n 10 python benchmarks/report_scale.py [--keep DIR] [--repeats 1] [--json OUT]

Targets: report of 14,400 episodes <= 10 s, of 100,000 <= 60 s and <= 2 GB; load_run of 100,000
<= 15 s; the page opens in under 3 s. The ratio 100k / 10k shows whether the cost grows linearly
(10x) or worse. On a shared machine wall time follows the other jobs' load: read CPU seconds too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POLICIES = ["boulware", "conceder", "tit_for_tat", "fair", "random"]
COUNTERPARTS = ["hardliner", "random", "fair", "boulware", "conceder"]
# episodes -> (scenarios, seeds); 14,400 is the size of the report target's run.
SIZES = {10_000: (200, 1), 14_400: (288, 1), 100_000: (500, 4)}


def timed(cmd: list[str]) -> dict[str, float]:
    """Wall and CPU seconds and peak RSS (MB) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()[-2000:]}")
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "max_rss_mb": round(usage.ru_maxrss / 1024, 1)}


def make_run(folder: Path, episodes: int) -> None:
    scenarios, seeds = SIZES[episodes]
    if (folder / "results.json").exists():
        return
    cmd = [sys.executable, "-m", "ibrl_bench", "crossplay", "--quiet", "--concurrency", "64",
           "--scenarios", str(scenarios), "--seeds", str(seeds), "--out", str(folder)]
    for p in POLICIES:
        cmd += ["--policy", f"scripted:dealnodeal/{p}"]
    for c in COUNTERPARTS:
        cmd += ["--counterpart", f"scripted:dealnodeal/{c}"]
    print(f"playing {episodes:,} episodes into {folder} ...", file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def chromium_open(page: Path, profile: Path) -> float | None:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        return None
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--dump-dom", page.as_uri()]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    return round(time.perf_counter() - start, 2)


def log_only(run: Path, view: Path) -> Path:
    """A view of the run folder without its summaries sidecar: its manifest and log, linked."""
    if not view.exists():
        view.mkdir(parents=True)
        for name in ("manifest.json", "episodes.jsonl"):
            (view / name).symlink_to(run / name)
    return view


def measure(py: str, run: Path, repeats: int) -> dict[str, dict]:
    rows: dict[str, list[dict]] = {"import": [], "load_run": [], "report": []}
    for _ in range(repeats):
        rows["import"].append(timed([py, "-c", "import ibrl_bench"]))
        rows["load_run"].append(timed([py, "-c", f"import ibrl_bench; ibrl_bench.load_run({str(run)!r})"]))
        rows["report"].append(timed([py, "-m", "ibrl_bench", "report", str(run)]))
    return {k: min(v, key=lambda m: m["cpu_s"]) for k, v in rows.items()}


def targets(out: dict) -> list[str]:
    """Each target of the issue with the measured value and their ratio (below 1 meets it)."""
    checks = [("report of 14,400 episodes, wall s", out["14400"]["report"]["wall_s"], 10),
              ("report of 100,000 episodes, wall s", out["100000"]["report"]["wall_s"], 60),
              ("report of 100,000 episodes, peak MB", out["100000"]["report"]["max_rss_mb"], 2048),
              ("load_run of 100,000 episodes, wall s", out["100000"]["load_run"]["wall_s"], 15)]
    if "chromium_open_s" in out["100000"]:
        checks.append(("page of 100,000 episodes opens in Chromium, s", out["100000"]["chromium_open_s"], 3))
    return [f"target {name} <= {limit}: {value} ({value / limit:.2f} of it, {'met' if value <= limit else 'NOT met'})"
            for name, value, limit in checks]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", default=None, help="folder to keep (and reuse) the generated runs in")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", default=None, help="write the numbers to this file")
    args = ap.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="report-scale-"))
    py = sys.executable
    out: dict[str, dict] = {}
    for episodes in SIZES:
        run = base / f"run-{episodes}"
        make_run(run, episodes)
        best = measure(py, run, args.repeats)
        page = run / "report.html"
        best["report_html_mb"] = round(page.stat().st_size / 2**20, 2)
        best["log_only"] = measure(py, log_only(run, base / f"log-only-{episodes}"), args.repeats)
        with tempfile.TemporaryDirectory() as tmp:
            blank = Path(tmp) / "blank.html"
            blank.write_text("<!doctype html><title>blank</title>")
            opened = chromium_open(page, Path(tmp) / "p1")
            if opened is not None:
                best["chromium_open_s"] = opened
                best["chromium_blank_s"] = chromium_open(blank, Path(tmp) / "p2")
        out[str(episodes)] = best
        print(json.dumps({episodes: best}), file=sys.stderr, flush=True)
    small, large = out["10000"], out["100000"]
    out["ratio_100k_over_10k"] = {
        f"{k} {t}": round(large[k][t] / small[k][t], 2) for k in ("load_run", "report") for t in ("wall_s", "cpu_s")
    }
    out["ratio_log_only_over_sidecar"] = {
        f"{n} {k} {t}": round(out[str(n)]["log_only"][k][t] / out[str(n)][k][t], 2)
        for n in SIZES for k in ("load_run", "report") for t in ("wall_s", "cpu_s")
    }
    out["targets"] = targets(out)
    print(json.dumps(out, indent=2))
    for line in out["targets"]:
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
