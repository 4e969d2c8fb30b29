"""The miniature (train/miniature.py) end to end at a toy size: every stage runs and leaves its
output, and a warm start that fails the gate stops the run before any RL."""

import json
from pathlib import Path

import pytest

from cli_helpers import assert_one_line_error

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from ibrl_bench.train import miniature  # noqa: E402

TOY = dict(transcript_scenarios=3, max_turns=4, max_new_tokens=8, max_length=160, eval_scenarios=2,
           sft={"from_scratch": {"shape": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1}},
                "steps": 2, "batch_size": 8, "min_own_reward": 0, "heldout_share": 0},
           rl={"steps": 2, "scenarios_per_step": 1, "group_size": 2, "micro_batch_size": 16},
           learning_window=1)
# The pipeline of the experiment, written out here rather than read from the module: a stage taken
# out of miniature.STAGES (or never run) fails the test instead of shrinking what it expects.
PIPELINE = ["transcripts", "sft", "gate", "ibrl", "unilateral-sft", "unilateral-boulware", "learning", "crossplay",
            "mismatch", "report"]


@pytest.mark.slow
def test_every_stage_runs_and_leaves_its_output(tmp_path):
    # The toy SFT model cannot play; the gate is opened so that the rest of the pipeline runs.
    config = miniature.MiniatureConfig(out=str(tmp_path / "mini"), gate={"scenarios": 2, "max_invalid": 1.0,
                                                                         "min_paying": 0.0}, **TOY)
    stages = miniature.run(config)
    assert [s.name for s in stages] == PIPELINE
    assert all(s.status == "ran" and s.wall_s > 0 for s in stages)
    out = tmp_path / "mini"
    summary = json.loads((out / "summary.json").read_text())
    assert [s["name"] for s in summary["stages"]] == PIPELINE
    for name in PIPELINE:  # each stage wrote its own record of having finished
        assert json.loads((out / name / "done.json").read_text())["stage"]["status"] == "ran", name
    for folder in ("ibrl/checkpoint-a", "ibrl/checkpoint-b", "unilateral-sft/checkpoint-a",
                   "unilateral-boulware/checkpoint-a", "sft/checkpoint"):
        assert (out / folder / "config.json").is_file(), folder
    for folder in ("ibrl", "unilateral-sft", "unilateral-boulware"):
        lines = (out / folder / "train_log.jsonl").read_text().splitlines()
        first = json.loads(lines[0])
        assert len(lines) == 2 and "reward_groups" in first and 0 <= min(first["signal_groups"].values()) <= 1
    # Every checkpoint declares the context the trainers cut to, so cross-play cuts to it as well.
    for folder in ("sft/checkpoint", "ibrl/checkpoint-a", "unilateral-boulware/checkpoint-a"):
        assert json.loads((out / folder / "config.json").read_text())["max_position_embeddings"] == 160, folder
    # The learning gate: every trained role, final checkpoint and SFT start on the same fresh
    # scenarios (eval_scenarios of them, group_size episodes each), Holm over the four roles.
    learning = json.loads((out / "learning/done.json").read_text())["stage"]["result"]
    gates = learning["gates"]
    assert [(g["run"], g["role"]) for g in gates] == [("IB-RL", "a"), ("IB-RL", "b"), ("unilateral vs SFT", "a"),
                                                       ("unilateral vs boulware", "a")]
    assert learning["scenarios"] == 2 and learning["temperature"] == 1.0
    for g in gates:
        assert g["scenarios"] == 2 and isinstance(g["learned"], bool)
        assert g["p_holm"] is None or g["p_holm"] >= g["p"]
    cases = json.loads((out / "learning/episodes.json").read_text())
    for case in cases:
        assert set(case["trained"]) == set(case["sft"]) and len(case["trained"]) == 2
        assert all(len(rewards) == 2 for rewards in [*case["trained"].values(), *case["sft"].values()])
    assert cases[0]["partner"].startswith(f"hf:{out.resolve()}/ibrl/checkpoint-b?")
    assert cases[3]["partner"] == miniature.BOULWARE
    episodes = (out / "crossplay/run/episodes.jsonl").read_text().splitlines()
    # 4 policies x (3 held-out + SFT copy + boulware + IB-RL's other role) x 2 scenarios, in role a
    assert len(episodes) == 4 * 6 * 2
    mismatch = json.loads((out / "mismatch/mismatch.json").read_text())
    assert set(mismatch["methods"]) == {"SFT reference", "IB-RL", "unilateral vs SFT", "unilateral vs boulware"}
    assert mismatch["methods"]["IB-RL"]["did"] is not None
    # IB-RL's DiD minus each unilateral run's, with its interval (the method-vs-method number).
    assert set(mismatch["versus"]) == {"unilateral vs SFT", "unilateral vs boulware"}
    for v in mismatch["versus"].values():  # toy checkpoints may score alike: an interval can be undefined, never wrong
        assert v["estimate"] is not None and v["method"]
        assert v["low"] is None or v["low"] <= v["estimate"] <= v["high"]
    report = (out / "report.md").read_text()
    assert "Learning gate (decides what is claimed)" in report and "Holm over the 4 trained roles" in report
    assert "last steps minus first (descriptive; does not decide)" in report and "groups with signal" in report
    assert "| unilateral vs boulware | a | " in report and "at the evaluation temperature" in report
    assert "| unilateral vs boulware | 2 |" in report
    assert "curves.png" in report and (out / "curves.png").stat().st_size > 1000
    # A repeated command reuses every finished stage and rewrites the report.
    again = miniature.run(config)
    assert [s.status for s in again] == ["reused"] * (len(PIPELINE) - 1) + ["ran"]
    # Another RL rollout temperature keeps the SFT model and the gate (played at `temperature`) and
    # trains anew from the RL stages on; the evaluation still plays every policy at `temperature`.
    sft_model = (out / "sft/checkpoint/model.safetensors").stat().st_mtime_ns
    hotter = {s.name: s for s in miniature.run(config.model_copy(update={"rl_temperature": 0.7}))}
    assert [hotter[name].status for name in PIPELINE] == ["reused"] * 3 + ["ran"] * (len(PIPELINE) - 3)
    assert (out / "sft/checkpoint/model.safetensors").stat().st_mtime_ns == sft_model
    assert hotter["gate"].result["temperature"] == 1.0
    for name in ("ibrl", "unilateral-sft", "unilateral-boulware"):
        assert hotter[name].result["temperature"] == 0.7, name
    assert "temperature=0.7" in hotter["unilateral-sft"].result["counterpart"]  # the frozen partner samples too
    manifest = (out / "crossplay/run/manifest.json").read_text()
    assert "temperature=1&" in manifest and "temperature=0.7" not in manifest
    assert "Rollouts (both roles, and the frozen SFT partner) at temperature 0.7" in (out / "report.md").read_text()


@pytest.mark.slow
def test_a_warm_start_that_fails_the_gate_stops_the_run_with_the_numbers(tmp_path):
    config = miniature.MiniatureConfig(out=str(tmp_path / "mini"), gate={"scenarios": 2, "min_paying": 1.0}, **TOY)
    stages = miniature.run(config)
    assert [s.name for s in stages] == ["transcripts", "sft", "gate"] and stages[-1].status == "stopped"
    assert not (tmp_path / "mini" / "ibrl").exists()
    report = (tmp_path / "mini" / "report.md").read_text()
    assert "stopped at the warm-start gate" in report and "| self_play | 4 |" in report
    # The same command stops at the same gate again, from its record (no RL either).
    assert [s.status for s in miniature.run(config)] == ["reused", "reused", "stopped"]
    assert not (tmp_path / "mini" / "ibrl").exists()
    # Another rollout temperature plays the gate anew in a fresh folder (the old run would refuse it).
    hotter = miniature.run(config.model_copy(update={"temperature": 0.5}))
    assert [s.status for s in hotter] == ["reused", "reused", "stopped"] and hotter[-1].result["temperature"] == 0.5
    assert "temperature=0.5" in (tmp_path / "mini" / "gate" / "run" / "manifest.json").read_text()
    assert "temperature=1" not in (tmp_path / "mini" / "gate" / "run" / "manifest.json").read_text()


def test_a_bad_miniature_recipe_is_one_line(ibrl, tmp_path):
    recipe = tmp_path / "mini.yaml"
    recipe.write_text("version: 1\nmethod: miniature\nout: x\nrl_steps: 3\n")
    assert_one_line_error(ibrl("miniature", "--recipe", str(recipe)), "unknown key rl_steps")
    shipped = Path(__file__).parent.parent / "training" / "miniature" / "miniature.yaml"
    assert_one_line_error(ibrl("miniature", "--recipe", str(shipped), "gate.min_paying=2"), "gate.min_paying")


def test_the_frozen_sft_partner_samples_at_partner_temperature_else_at_the_rl_temperature():
    state = {"sft": {"checkpoint": "/ckpt"}}
    base = miniature.MiniatureConfig(out="unused", temperature=0.3)
    assert "temperature=0.3&" in miniature.sft_partner(base, state)
    hotter = base.model_copy(update={"rl_temperature": 1.0})
    assert "temperature=1&" in miniature.sft_partner(hotter, state)
    calm = base.model_copy(update={"rl_temperature": 1.0, "partner_temperature": 0.3})
    assert "temperature=0.3&" in miniature.sft_partner(calm, state)
    assert miniature.rl_temperature(calm) == 1.0  # the trained role still explores
    with pytest.raises(ValueError):
        miniature.MiniatureConfig(out="unused", partner_temperature=0)


def test_the_paired_check_pairs_each_method_with_the_sft_reference_on_the_same_scenarios():
    import pandas as pd

    from ibrl_bench.train.miniature_report import paired_gains

    methods = {"SFT reference": {"policy": "sft", "train_counterpart": "sft"},
               "IB-RL": {"policy": "ib-a", "train_counterpart": "ib-b"}}
    rows = []
    for k, scenario in enumerate(["s1", "s2", "s3", "s4"]):
        # The SFT start scores differently per scenario; IB-RL scores 1 more on each one, against
        # its partner: a pairing by scenario finds +1 exactly, an unpaired mean of other cells would not.
        rows += [{"policy": "sft", "counterpart": "ib-b", "scenario_id": scenario, "policy_score": 2.0 * k,
                  "status": "ok"},
                 {"policy": "ib-a", "counterpart": "ib-b", "scenario_id": scenario,
                  "policy_score": 2.0 * k + 1 + k % 2 * 0.2, "status": "ok"},
                 {"policy": "ib-a", "counterpart": "other", "scenario_id": scenario, "policy_score": 9.0,
                  "status": "ok"},
                 {"policy": "sft", "counterpart": "ib-b", "scenario_id": scenario, "policy_score": 50.0,
                  "status": "error"}]
    (row,) = paired_gains(pd.DataFrame(rows), methods)
    assert row["method"] == "IB-RL" and row["scenarios"] == 4
    assert row["estimate"] == pytest.approx(1.1)
    assert row["low"] < 1.1 < row["high"] and row["high"] - row["low"] < 0.5


def test_the_learning_gate_pairs_by_scenario_and_holm_runs_over_the_roles():
    import numpy as np
    from scipy import stats

    from ibrl_bench.train.miniature_report import paired_gates

    # Scenarios differ widely (0 to 9.5 points) and training adds about +0.5 on each one: paired by
    # scenario the gain is clear; unpaired (or paired by position, the trained side listed in
    # another order) the spread between scenarios hides it. Fixed numbers, no randomness: the test
    # fails if the gate stops pairing by scenario id, or if it does not correct across roles.
    ids = [f"s{k:02d}" for k in range(20)]
    base = {i: 0.5 * k for k, i in enumerate(ids)}
    jitter = [0.1, -0.1, 0.2, 0.0]
    trained = {i: [base[i] + 0.5 + jitter[k % 4]] * 2 for k, i in enumerate(reversed(ids))}
    sft = {i: [base[i], base[i]] for i in ids}
    assert list(trained) != list(sft)  # another order: a pairing by position would be wrong
    welch = stats.ttest_ind([np.mean(v) for v in trained.values()], [np.mean(v) for v in sft.values()],
                            equal_var=False).confidence_interval(0.95)
    assert welch.low < 0 < welch.high  # unpaired, this data says nothing
    null = {i: [base[i] + jitter[k % 4] - 0.05] * 2 for k, i in enumerate(ids)}  # mean gain 0
    gates = paired_gates([{"run": "IB-RL", "role": "a", "trained": trained, "sft": sft},
                          {"run": "IB-RL", "role": "b", "trained": null, "sft": sft}])
    gain, flat = gates
    assert gain["scenarios"] == 20 and gain["estimate"] == pytest.approx(0.55)
    assert 0 < gain["low"] < 0.55 < gain["high"] < 1 and gain["learned"]
    assert gain["p_holm"] == pytest.approx(min(1.0, 2 * gain["p"]))  # Holm: the smaller p of two doubled
    assert not flat["learned"] and flat["low"] < 0 < flat["high"]
    # A gain that only the uncorrected p would pass: Holm over the roles withholds it.
    weak = {i: [base[i] + (0.3 if k % 2 else -0.1)] * 2 for k, i in enumerate(ids)}
    (alone,) = paired_gates([{"run": "x", "role": "a", "trained": weak, "sft": sft}])
    many = paired_gates([{"run": "x", "role": "a", "trained": weak, "sft": sft}]
                        + [{"run": "y", "role": r, "trained": null, "sft": sft} for r in "abc"])
    assert alone["p"] < 0.05 and alone["learned"]
    assert many[0]["p"] == alone["p"] and many[0]["p_holm"] > 0.05 and not many[0]["learned"]


def test_the_learning_gate_plays_scenarios_no_rl_step_drew():
    from ibrl_bench.domains.base import Scenario, ScenarioSet
    from ibrl_bench.errors import UserError
    from ibrl_bench.train.rollout import step_scenarios

    pool = ScenarioSet(domain="d", version="1", split="train",
                       scenarios=tuple(Scenario(id=f"s{k}", domain="d", data={"k": k}) for k in range(12)))
    # 2 steps of 3 draw 6 of 12; the 4 fresh ones come after them in the run's order and repeat nothing.
    drawn = {s.id for step in (1, 2) for s in step_scenarios(pool, step, 3, seed=7)}
    fresh = miniature.fresh_scenarios(pool, steps=2, per_step=3, count=4, seed=7)
    assert len({s.id for s in fresh}) == 4 and not drawn & {s.id for s in fresh}
    # When the walk after the last step enters the order's next epoch (3 steps of 3 end at position
    # 11 of 12), the drawn scenarios come round again and are skipped; too few left is one line.
    drawn = {s.id for step in (1, 2, 3) for s in step_scenarios(pool, step, 3, seed=7)}
    fresh = miniature.fresh_scenarios(pool, steps=3, per_step=3, count=12 - len(drawn), seed=7)
    assert {s.id for s in fresh} == {s.id for s in pool.scenarios} - drawn
    with pytest.raises(UserError, match="eval_scenarios"):
        miniature.fresh_scenarios(pool, steps=3, per_step=3, count=13 - len(drawn), seed=7)
