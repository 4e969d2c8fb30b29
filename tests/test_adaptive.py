"""Adaptive sampling: fixed looks, new scenarios before seeds, per-cell stops, resumable."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from ibrl_bench.cli import cli
from ibrl_bench.errors import UserError
from ibrl_bench.runner.adaptive import LOOK_CONFIDENCE, looks, run_adaptive
from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig

FAIR = "scripted:dealnodeal/fair"
RANDOM = "scripted:dealnodeal/random"  # fair agrees with it every time: a cell without variance
HARDLINER = "scripted:dealnodeal/hardliner"  # about 70% agreement: a wide cell


def test_the_looks_depend_on_the_split_alone():
    assert looks(100) == [10, 13, 17, 22, 28, 35, 44, 55, 69, 87, 100]
    assert looks(7) == [7]


def test_cells_get_episodes_until_their_interval_is_narrow_enough_and_a_rerun_decides_the_same(tmp_path):
    config = CrossplayConfig(policies=[FAIR], counterparts=[RANDOM, HARDLINER], roles=["a"], scenarios=30, seeds=2,
                             target_halfwidth=0.12)
    runner = Crossplay(config, tmp_path / "run")
    report = asyncio.run(run_adaptive(runner))
    by_counterpart = {c.counterpart: c for c in report.cells}
    narrow, wide = by_counterpart[RANDOM], by_counterpart[HARDLINER]
    assert narrow.reason == "reached H" and narrow.interval.estimate == 1.0
    assert narrow.halfwidth <= 0.12 and narrow.interval.confidence == LOOK_CONFIDENCE
    assert wide.episodes > narrow.episodes  # the wide cell got more of the split
    assert wide.reason in ("reached H", "split exhausted") and wide.episodes in report.looks
    records = runner.store.records()
    assert len(records) == report.episodes  # nothing played beyond what the looks asked for
    order = [s.id for s in runner.scenario_set.scenarios]
    for cell in report.cells:
        played = [(r.seed, r.scenario_id) for r in records if r.counterpart == cell.counterpart]
        # New scenarios first (seed 0 over the split, in its order), then the second seed.
        expected = [(0, s) for s in order] + [(1, s) for s in order]
        assert sorted(played, key=expected.index) == expected[:cell.episodes]
    saved = json.loads((tmp_path / "run" / "adaptive.json").read_text())
    assert [c["reason"] for c in saved["cells"]] == [c.reason for c in report.cells]

    again = Crossplay(config, tmp_path / "run")
    second = asyncio.run(run_adaptive(again))
    assert second.cells == report.cells and len(again.store.records()) == len(records)


def test_crossplay_prints_each_cells_stop_and_the_rule(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["crossplay", "--policy", FAIR, "--counterpart", RANDOM, "--role", "a",
                                      "--scenarios", "20", "--target-halfwidth", "0.2", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "reached H" in result.output and "fixed before the data" in result.output
    assert "unfinished" not in result.output  # the design's episodes are the plan, not the whole split
    # Read back later, by every command, against the same plan: an adaptive run that stopped its
    # cells is finished, also where results.json is gone and is recomputed from the episodes.
    (out / "results.json").unlink()
    for command in (["show", str(out)], ["episodes", str(out)], ["report", str(out)]):
        again = CliRunner().invoke(cli, command)
        assert again.exit_code == 0, again.output
        assert "unfinished" not in again.output and "unfinished" not in (again.stderr or ""), command
    stopped = json.loads((out / "adaptive.json").read_text())["cells"]
    assert json.loads((out / "results.json").read_text())["n_planned"] == sum(c["planned"] for c in stopped) < 20


def test_an_unknown_target_metric_is_refused_before_anything_is_played(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["crossplay", "--policy", FAIR, "--counterpart", RANDOM, "--scenarios", "20",
                                      "--target-halfwidth", "0.2", "--target-metric", "pareto", "--out", str(out)])
    # (the `ibrl-bench` entry point prints a UserError as its one line)
    assert isinstance(result.exception, UserError)
    assert "--target-metric pareto is not a metric of dealnodeal" in str(result.exception)
    assert "pareto_optimal" in str(result.exception)  # the domain's own metrics are offered
    assert not out.exists()


@pytest.mark.parametrize("domain, policy, counterpart, role", [
    ("dealnodeal", FAIR, HARDLINER, "a"),
    ("telesales", "scripted:telesales/consultative", "scripted:telesales/skeptical", "seller"),
])
def test_a_domain_declares_exactly_the_metrics_its_outcomes_carry(tmp_path, domain, policy, counterpart, role):
    # The declaration is what --target-metric is checked against before a run; an outcome path that
    # adds or drops a key would make that check refuse a real metric or admit a missing one.
    runner = Crossplay(CrossplayConfig(domain=domain, policies=[policy], counterparts=[counterpart], roles=[role],
                                       scenarios=12),
                       tmp_path / "run")
    asyncio.run(runner.run())
    records = runner.store.records()
    assert {r.outcome.status for r in records} >= {"ok"}
    for r in records:
        assert set(r.outcome.metrics) == set(runner.domain.metric_names), (r.outcome.status, r.outcome.detail)
