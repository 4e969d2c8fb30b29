"""`ibrl-bench train` as a user runs it: light help, one-line errors for bad recipes, and a run that
prints the checkpoint's hf: spec and a cross-play command that works."""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import assert_one_line_error

ROOT = Path(__file__).parent.parent
# What the trainers load after the recipe passed its checks (the [train] extra).
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="checked after the recipe loads, when training needs torch (the [train] extra)")


def test_help_of_the_cli_and_of_train_imports_no_model_stack():
    script = ("import sys\nfrom ibrl_bench.cli import cli\n"
              "for args in (['--help'], ['train', '--help'], ['train', 'sft', '--help'],"
              " ['train', 'unilateral', '-h']):\n"
              "    print('=====')\n"
              "    try:\n        cli.main(args=args, standalone_mode=False, terminal_width=200)\n"
              "    except SystemExit:\n        pass\n"
              "print([m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    _, top, train, sft, unilateral = proc.stdout.split("=====\n")
    assert "--recipe" in train and "KEY=VALUE" in train and "train METHOD --help lists the recipe keys" in train
    # Each method's help lists its own recipe's keys, nested blocks dotted, with type and default.
    assert "Recipe keys of sft" in sft and "Recipe keys of" not in train
    keys = {line.split()[0]: " ".join(line.split()[1:]) for line in sft.split("Recipe keys of sft")[1].splitlines()[1:]
            if line.strip()}
    assert keys["steps"] == "int (>= 1); default 200" and keys["transcripts"] == "list[str] (len >= 1); required"
    assert keys["model.lora.r"] == "int (>= 1); default 16" and keys["episodes"].startswith("one of: all, agreement")
    assert "counterpart " in unilateral and "transcripts " not in unilateral
    assert proc.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("args,fragments", [
    (["train", "sft", "--recipe", "missing.yaml"], ["recipe missing.yaml not found"]),
    (["train", "ibrl", "--recipe", str(ROOT / "training/dealnodeal-tiny-sft.yaml")],
     ["a recipe for method 'sft', not 'ibrl'", "ibrl-bench train sft"]),
    (["train", "sft", "--recipe", str(ROOT / "training/dealnodeal-tiny-sft.yaml"), "stepz=3"],
     ["dealnodeal-tiny-sft.yaml: unknown key stepz", "known keys here:", "steps"]),
    (["train", "unilateral", "--recipe", str(ROOT / "training/dealnodeal-tiny-unilateral.yaml"), "lr=-1"],
     ["dealnodeal-tiny-unilateral.yaml: lr (set by override lr=-1)", "greater than 0"]),
    pytest.param(["train", "sft", "--recipe", str(ROOT / "training/dealnodeal-tiny-sft.yaml"), "transcripts=[nowhere]"],
                 ["nowhere is not a run folder"], marks=needs_torch),
])
def test_a_bad_recipe_or_override_is_one_line(ibrl, tmp_path, args, fragments):
    assert_one_line_error(ibrl(*args, cwd=tmp_path), *fragments)


@pytest.mark.parametrize("missing", ["torch", "accelerate"])
@pytest.mark.parametrize("args", [["train", "sft", "--recipe", str(ROOT / "training/dealnodeal-tiny-sft.yaml")],
                                  ["miniature", "--recipe", str(ROOT / "training/miniature/miniature.yaml")]])
def test_training_without_the_train_extra_is_one_line_naming_it(ibrl, monkeypatch, tmp_path, args, missing):
    monkeypatch.setitem(sys.modules, missing, None)  # what an environment without the package shows
    result = ibrl(*args, f"out={tmp_path / 'out'}", cwd=tmp_path)
    # Names it: alone, or in the list of what an environment without torch lacks.
    assert_one_line_error(result, "training needs ", missing, "pip install 'ibrl-bench[train]'")
    assert not (tmp_path / "out").exists()  # refused before anything was written


@pytest.mark.slow
def test_sft_through_the_cli_prints_a_spec_and_a_crossplay_command_that_plays_it(ibrl, tmp_path):
    pytest.importorskip("torch", reason="trains a model (the [train] extra)")
    run = ibrl("crossplay", "--policy", "scripted:dealnodeal/fair", "--counterpart", "scripted:dealnodeal/boulware",
               "--split", "train", "--scenarios", "3", "--quiet", "--out", "runs/scripted", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    proc = ibrl("train", "sft", "--recipe", str(ROOT / "training/dealnodeal-tiny-sft.yaml"), "--quiet",
                "transcripts=[runs/scripted]", "out=ckpt", "steps=2", "batch_size=4", "episodes=all",
                "from_scratch.shape.num_hidden_layers=1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    resolved = (tmp_path / "ckpt" / "recipe.yaml").read_text()
    assert "steps: 2" in resolved and "num_hidden_layers: 1" in resolved  # the overrides, on record
    assert [json.loads(x)["step"] for x in (tmp_path / "ckpt" / "train_log.jsonl").read_text().splitlines()] == [1, 2]
    spec = f"hf:{(tmp_path / 'ckpt' / 'checkpoint').resolve()}"
    assert f"policy: {spec}" in proc.stdout
    (command,) = [x.strip() for x in proc.stdout.splitlines() if x.strip().startswith("ibrl-bench crossplay")]
    args = shlex.split(command)[1:]
    played_spec = f"{spec}?max_new_tokens=48"  # as the recipe trains it, not the hf: default
    assert args[args.index("--policy") + 1] == played_spec and "--panel" in args
    args[args.index("--scenarios") + 1] = "1"
    args[args.index("--panel") + 1] = "dealnodeal-scripted-heldout"
    played = ibrl(*args, "--quiet", "--max-turns", "2", cwd=tmp_path)
    assert played.returncode == 0, played.stderr
    results = json.loads(next((tmp_path / "runs").glob("dealnodeal-sft-policy/results.json")).read_text())
    assert {c["policy"] for c in results["cells"]} == {played_spec}
    assert sum(c["n_episodes"] for c in results["cells"]) == 6  # 3 panel members x 2 roles x 1 scenario
