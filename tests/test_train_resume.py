"""Resuming an RL training (train/resume.py): a run stopped after a saved step and rerun ends with
the same checkpoint bytes as a run that was never stopped, in process and through the CLI after a
SIGKILL; a state of another recipe is refused; the step log continues without repeating steps.

Rewards are given by hand (a random tiny model never reaches a deal, so every advantage would be
0 and no step would change the weights: a resume bug would go unseen)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("accelerate")

from ibrl_bench.errors import UserError  # noqa: E402
from ibrl_bench.train import ibrl, resume  # noqa: E402
from ibrl_bench.train.steplog import read_log  # noqa: E402
from train_helpers import config, hand_rewards  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def rewarded(monkeypatch):
    collect = ibrl.collect
    monkeypatch.setattr(ibrl, "collect", lambda *a, **k: hand_rewards(collect(*a, **k)))


def adapters(out: Path, roles=("a", "b")) -> dict[str, bytes]:
    return {role: (out / f"checkpoint-{role}" / "adapter_model.safetensors").read_bytes() for role in roles}


@pytest.mark.slow
def test_a_run_stopped_after_a_saved_step_resumes_to_the_same_bytes(tiny_model_1layer, tmp_path, rewarded, monkeypatch):
    straight = tmp_path / "straight"
    ibrl.run(config(tiny_model_1layer, tmp_path, out=str(straight), steps=3))
    one_step = tmp_path / "one"
    ibrl.run(config(tiny_model_1layer, tmp_path, out=str(one_step), steps=1))
    assert adapters(one_step) != adapters(straight)  # the steps change the weights

    stopped = tmp_path / "stopped"
    update_all = ibrl.update_all

    def crash_in_step_3(policies, groups, cfg, accelerator):
        if crash_in_step_3.calls == 2:
            raise RuntimeError("killed")
        crash_in_step_3.calls += 1
        return update_all(policies, groups, cfg, accelerator)

    crash_in_step_3.calls = 0
    monkeypatch.setattr(ibrl, "update_all", crash_in_step_3)
    with pytest.raises(RuntimeError, match="killed"):
        ibrl.run(config(tiny_model_1layer, tmp_path, out=str(stopped), steps=3, save_every=2))
    monkeypatch.setattr(ibrl, "update_all", update_all)
    assert resume.saved_step(config(tiny_model_1layer, tmp_path, out=str(stopped), steps=3)) == 2
    assert not (stopped / "checkpoint-a").exists()
    # steps 1-2 from the state, 3 again
    ibrl.run(config(tiny_model_1layer, tmp_path, out=str(stopped), steps=3, save_every=2))
    assert adapters(stopped) == adapters(straight)
    # A finished run rerun changes nothing; raising `steps` continues it.
    ibrl.run(config(tiny_model_1layer, tmp_path, out=str(stopped), steps=3))
    assert adapters(stopped) == adapters(straight)


def test_a_state_of_another_recipe_is_refused_in_one_line(tiny_model_1layer, tmp_path, rewarded):
    first = config(tiny_model_1layer, tmp_path, steps=1)
    ibrl.run(first)
    with pytest.raises(UserError, match=r"another recipe \(lr: 0.01 there, 0.02 here\)"):
        ibrl.run(config(tiny_model_1layer, tmp_path, steps=2, lr=2e-2))
    # Where the folder lies, how far to go and how often to save may change.
    moved = tmp_path / "moved"
    os.rename(first.out, moved)
    assert resume.saved_step(config(tiny_model_1layer, tmp_path, out=str(moved), steps=5, save_every=3)) == 1


def test_an_unreadable_state_says_how_to_start_over(tiny_model_1layer, tmp_path):
    cfg = config(tiny_model_1layer, tmp_path)
    path = resume.state_path(cfg.out)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"PK\x03\x04 torn")
    with pytest.raises(UserError, match="remove it to start over"):
        resume.saved_step(cfg)


WRAPPER = """
import sys
from ibrl_bench import cli
from ibrl_bench.train import ibrl
sys.path.insert(0, sys.argv[1])
from train_helpers import hand_rewards
collect = ibrl.collect
ibrl.collect = lambda *a, **k: hand_rewards(collect(*a, **k))
cli.main(sys.argv[2:])
"""


@pytest.mark.slow
def test_the_cli_resumes_after_a_sigkill_with_one_log_line_per_step(tiny_model_1layer, tmp_path, rewarded):
    straight = tmp_path / "straight"
    # in process: the same training, never stopped
    ibrl.run(config(tiny_model_1layer, tmp_path, out=str(straight), steps=4))
    fields = config(tiny_model_1layer, tmp_path, steps=4, save_every=1).model_dump(mode="json")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"version": 1, "method": "ibrl", **fields}))
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(WRAPPER)

    def train(out: Path, **popen) -> subprocess.Popen:
        argv = [sys.executable, str(wrapper), str(ROOT / "tests"), "train", "ibrl", "--recipe", str(recipe),
                "--quiet", f"out={out}"]
        return subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)

    killed = tmp_path / "killed"
    proc = train(killed)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if (killed / "train_log.jsonl").exists() and len(read_log(killed)) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "checkpoint-a").exists()
    again = train(killed)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert "resuming" in err and "of 4" in err
    assert [r["step"] for r in read_log(killed)] == [1, 2, 3, 4]
    assert adapters(killed) == adapters(straight)
