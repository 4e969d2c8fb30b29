"""A real `ibrl-bench crossplay` process killed with SIGKILL mid-run, then resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from ibrl_bench.runner.store import SUMMARIES, RunStore
from ibrl_bench.runs import Run

TESTS = Path(__file__).parent


def crossplay(out: Path, n: int) -> list[str]:
    return [
        sys.executable, "-m", "ibrl_bench", "crossplay", "--quiet",
        "--policy", "python:plugins:make_slow?delay=0.003",
        "--counterpart", "scripted:dealnodeal/conceder",
        "--counterpart", "scripted:dealnodeal/random",
        "--scenarios", str(n), "--concurrency", "8", "--out", str(out),
    ]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}


def from_the_log_alone(folder: Path, tmp: Path) -> pd.DataFrame:
    """The episode table of a copy of the folder without its summaries sidecar."""
    tmp.mkdir()
    for name in ("manifest.json", "episodes.jsonl"):
        (tmp / name).write_bytes((folder / name).read_bytes())
    return Run(tmp).table.drop(columns="at")


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True) if path.exists() else []


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [7, 41])
def test_sigkill_loses_nothing_and_repeats_nothing(tmp_path, kill_at):
    out, n = tmp_path / "run", 30
    planned = 1 * 2 * 2 * n
    proc = subprocess.Popen(crossplay(out, n), env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log = out / "episodes.jsonl"
    deadline = time.monotonic() + 60
    while len(lines(log)) < kill_at:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = log.read_bytes()
    complete = before[: before.rfind(b"\n") + 1]  # a torn tail, if any, is the only thing dropped
    done_before = [json.loads(x)["key"] for x in complete.splitlines()]
    assert kill_at <= len(done_before) < planned
    # The sidecar may lag the log after the kill; what a reader gets must not.
    assert (out / SUMMARIES).exists()
    pd.testing.assert_frame_equal(Run(out).table.drop(columns="at"), from_the_log_alone(out, tmp_path / "killed"))

    resumed = subprocess.run(crossplay(out, n), env=env(), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(done_before)} of {planned} episodes already done" in resumed.stderr
    after = log.read_bytes()
    assert after.startswith(complete), "finished episodes were rewritten"
    keys = [json.loads(x)["key"] for x in after.splitlines()]
    assert len(keys) == planned == len(set(keys)), "an episode was repeated or dropped"
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and sum(c["n_episodes"] for c in results["cells"]) == planned
    entries, _, covered, _ = RunStore(out)._confirmed()  # the resumed run left one entry per line, all confirmed
    assert len(entries) == planned and covered == len(after)
    pd.testing.assert_frame_equal(Run(out).table.drop(columns="at"), from_the_log_alone(out, tmp_path / "resumed"))
