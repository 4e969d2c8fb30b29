"""The command line as a user runs it: exit codes, written results, one-line errors.

Most cases run `cli.main(argv)` in this process (the `ibrl` fixture); the exit status of a stopped
run is checked on a real process as well (`ibrl_process`)."""

from __future__ import annotations

import csv
import json

import pytest

from cli_helpers import assert_one_line_error


@pytest.mark.slow
def test_crossplay_without_arguments_runs_the_demo(ibrl, tmp_path):
    proc = ibrl("crossplay", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "runs").iterdir()
    results = json.loads((run / "results.json").read_text())
    assert len(results["cells"]) == 3 * 3 * 2
    assert results["complete"] and results["scenario_set"]["split"] == "test"
    assert "Success@1" in proc.stdout and "Clopper-Pearson" in proc.stdout
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["harness_version"] and manifest["scenario_set"]["hash"]
    assert manifest["identity"]["counterparts"] == [
        "scripted:dealnodeal/conceder", "scripted:dealnodeal/hardliner", "scripted:dealnodeal/random"]


def test_crossplay_writes_the_documented_results(ibrl, tmp_path):
    out = tmp_path / "run"
    proc = ibrl("crossplay", "--policy", "scripted:dealnodeal/fair", "--counterpart", "scripted:dealnodeal/boulware",
                "--role", "a", "--scenarios", "8", "--seeds", "2", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    (cell,) = results["cells"]
    assert cell["policy"] == "scripted:dealnodeal/fair" and cell["policy_role"] == "a"
    assert cell["n_episodes"] == 16 and cell["n_errors"] == 0
    for name in ("agreement", "success_at_1", "policy_score", "counterpart_score", "pareto_optimal", "policy_invalid"):
        m = cell["metrics"][name]
        assert set(m) >= {"estimate", "low", "high", "method", "confidence"}
        assert m["confidence"] == 0.95
    assert "Kish effective n" in cell["metrics"]["agreement"]["method"]  # two seeds per scenario
    rows = list(csv.DictReader((out / "cells.csv").open()))
    assert len(rows) == 1 and float(rows[0]["agreement"]) == cell["metrics"]["agreement"]["estimate"]
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 16

    shown = ibrl("show", str(out))
    assert shown.returncode == 0 and " fair " in shown.stdout and " boulware " in shown.stdout

    again = ibrl("crossplay", "--policy", "scripted:dealnodeal/fair", "--counterpart",
                 "scripted:dealnodeal/boulware", "--role", "a", "--scenarios", "8", "--seeds", "2",
                 "--out", str(out), "--quiet")
    assert again.returncode == 0 and "16 of 16 episodes already done" in again.stderr


def test_show_recomputes_a_run_that_never_finished(ibrl, scripted_run_copy):
    out = scripted_run_copy
    (out / "results.json").unlink()
    proc = ibrl("show", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "results.json").read_text())["complete"]


def test_show_of_a_folder_it_cannot_write_prints_the_table_and_says_so(ibrl, scripted_run_copy):
    out = scripted_run_copy
    (out / "results.json").unlink()
    (out / "results.json.tmp").mkdir()  # the write fails (as on a read-only folder, which root ignores)
    proc = ibrl("show", str(out))
    assert proc.returncode == 0, proc.stderr
    assert " fair " in proc.stdout and "note: results.json not updated" in proc.stderr
    assert not (out / "results.json").exists()


def test_play_prints_one_episode_turn_by_turn(ibrl):
    proc = ibrl("play", "--policy", "scripted:dealnodeal/boulware", "--counterpart", "scripted:dealnodeal/fair",
                "--scenario", "3", "--seed", "1")
    assert proc.returncode == 0, proc.stderr
    assert "<propose>" in proc.stdout and "(private)" in proc.stdout and "outcome" in proc.stdout


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["crossplay", "--domain", "chess"], ["--domain", "chess"]),
        (["crossplay", "--policy", "boulware", "--counterpart", "scripted:dealnodeal/fair"], ["malformed agent spec"]),
        (["crossplay", "--policy", "scripted:dealnodeal/nope", "--counterpart", "scripted:dealnodeal/fair"],
         ["unknown scripted agent", "boulware"]),
        (["crossplay", "--policy", "warp:x", "--counterpart", "scripted:dealnodeal/fair"], ["unknown agent kind"]),
        (["crossplay", "--policy", "openai:gpt@http://127.0.0.1:9/v1?key_env=IBRL_TEST_UNSET_KEY",
          "--counterpart", "scripted:dealnodeal/fair"], ["$IBRL_TEST_UNSET_KEY, which is not set"]),
        (["crossplay", "--policy", "scripted:dealnodeal/fair", "--counterpart", "card:nope"], ["unknown card"]),
        (["crossplay", "--policy", "scripted:dealnodeal/fair", "--counterpart", "panel:nope"], ["unknown panel"]),
        (["crossplay", "--policy", "python:no_such_module:f", "--counterpart", "scripted:dealnodeal/fair"],
         ["cannot import"]),
        (["crossplay", "--policy", "python:plugins:NotAnAgent", "--counterpart", "scripted:dealnodeal/fair"],
         ["async def act"]),
        (["crossplay", "--policy", "scripted:dealnodeal/fair", "--counterpart", "scripted:dealnodeal/fair",
          "--scenarios", "0"], ["--scenarios", "0"]),
        (["crossplay", "--policy", "scripted:dealnodeal/fair", "--counterpart", "scripted:dealnodeal/fair",
          "--role", "seller"], ["unknown role", "seller"]),
        (["crossplay", "--policy", "scripted:dealnodeal/fair", "--panel", "nope"], ["unknown panel"]),
        (["crossplay", "--policy", "scripted:dealnodeal/fair", "--counterpart", "scripted:dealnodeal/fair",
          "--contexts", "/nonexistent/ctx.txt"], ["cannot read context file"]),
        (["crossplay", "--counterpart", "scripted:dealnodeal/fair"], ["no --policy"]),
        (["crossplay", "--policy", "scripted:dealnodeal/fair?beta=x&&", "--counterpart", "scripted:dealnodeal/fair"],
         ["scripted:dealnodeal/fair"]),
        (["crossplay", "--seeds", "-1"], ["--seeds"]),
        (["crossplay", "--policy", "scripted:dealnodeal/fair", "--counterpart", "scripted:dealnodeal/fair",
          "--scenarios", "708"], ["--scenarios 708", "546"]),
        (["show", "/nonexistent/run"], ["not a run folder"]),
        (["play", "--scenario", "99999"], ["out of range"]),
        (["play", "--role", "seller"], ["unknown role 'seller' for dealnodeal"]),
        (["crossplay", "--bogus-flag"], ["--bogus-flag"]),
    ],
)
def test_bad_input_gets_one_clear_line(ibrl, args, fragments, tmp_path):
    assert_one_line_error(ibrl(*args, cwd=tmp_path), *fragments)


def test_a_run_folder_of_another_configuration_is_refused(ibrl, tmp_path):
    out = str(tmp_path / "run")
    base = ["crossplay", "--policy", "scripted:dealnodeal/fair", "--counterpart", "scripted:dealnodeal/random",
            "--out", out, "--quiet"]
    assert ibrl(*base, "--scenarios", "2").returncode == 0
    assert_one_line_error(ibrl(*base, "--scenarios", "3"), "different configuration", "another --out")


def test_infrastructure_errors_are_reported_not_scored(ibrl, tmp_path):
    out = tmp_path / "run"
    proc = ibrl("crossplay", "--policy", "scripted:dealnodeal/fair", "--counterpart", "python:plugins:Broken",
                "--counterpart", "scripted:dealnodeal/random", "--scenarios", "4", "--retries", "1",
                "--fail-on-error", "1", "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "8 episodes ended in infrastructure errors" in proc.stdout
    assert "8 x ConnectionResetError: simulated: endpoint down" in proc.stdout
    results = json.loads((out / "results.json").read_text())
    broken = [c for c in results["cells"] if c["counterpart"] == "python:plugins:Broken"]
    assert all(c["n_errors"] == 4 and c["metrics"]["agreement"]["estimate"] is None for c in broken)
    assert not results["complete"]


def test_broken_infrastructure_stops_the_run_with_exit_code_and_keeps_results(ibrl_process, tmp_path):
    out = tmp_path / "run"
    proc = ibrl_process("crossplay", "--policy", "scripted:dealnodeal/fair", "--counterpart", "python:plugins:Broken",
                "--scenarios", "30", "--retries", "0", "--concurrency", "1", "--out", str(out), "--quiet")
    assert proc.returncode == 2
    assert "infrastructure errors" in proc.stderr and "rerun the same command" in proc.stderr
    assert json.loads((out / "results.json").read_text())["complete"] is False


@pytest.mark.parametrize("argv, resumable", [(["crossplay", "--quiet"], True),
                                             (["train", "sft", "--recipe", "r.yaml"], False),
                                             (["train", "ibrl", "--recipe", "r.yaml"], True),
                                             (["play"], False)])
def test_ctrl_c_promises_a_resume_only_where_a_run_folder_resumes(argv, resumable, monkeypatch, capsys):
    from ibrl_bench import cli as cli_module
    from ibrl_bench.runner import matrix
    from ibrl_bench.train import recipes

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    # Ctrl-C arrives inside the command, where each command says whether it resumes.
    for module, name in [(matrix, "resolve_matrix"), (matrix, "resolve_episode"), (recipes, "trainer")]:
        monkeypatch.setattr(module, name, interrupted)
    with pytest.raises(SystemExit) as exit_info:
        cli_module.main(argv)
    assert exit_info.value.code == 130
    assert ("to resume" in capsys.readouterr().err) is resumable
