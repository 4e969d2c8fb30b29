"""The training log: one flushed JSON line per step, strict JSON, no mixing of two trainings."""

import json

import pytest

from ibrl_bench.train.steplog import LOG_NAME, StepLog, read_log, summary


def test_each_step_is_on_disk_as_soon_as_it_is_logged(tmp_path):
    with StepLog(tmp_path, total_steps=3, description="test", quiet=True) as log:
        log.log(1, loss=0.5, reward={"a": 1.0, "b": 2.0})
        # Read while the log is still open: the line must already be there, whole.
        lines = (tmp_path / LOG_NAME).read_text().splitlines()
        assert len(lines) == 1 and json.loads(lines[0])["reward"] == {"a": 1.0, "b": 2.0}
        log.log(2, loss=float("nan"), kl=float("inf"))
    records = read_log(tmp_path)
    assert [r["step"] for r in records] == [1, 2]
    assert records[1]["loss"] == "nan" and records[1]["kl"] == "inf"  # strict JSON, still visible


def test_a_rerun_moves_the_earlier_log_aside_instead_of_appending(tmp_path):
    for run in range(3):
        with StepLog(tmp_path, total_steps=1, description="test", quiet=True) as log:
            log.log(1, run=run)
    assert read_log(tmp_path) == [r for r in read_log(tmp_path) if r["run"] == 2]
    assert json.loads((tmp_path / "train_log.1.jsonl").read_text())["run"] == 0
    assert json.loads((tmp_path / "train_log.2.jsonl").read_text())["run"] == 1


def test_a_resumed_training_keeps_its_steps_up_to_the_saved_one_and_continues(tmp_path):
    with StepLog(tmp_path, 5, "ibrl", quiet=True) as log:
        for step in (1, 2, 3):
            log.log(step, loss=float(step))
    with open(tmp_path / LOG_NAME, "a") as f:
        f.write('{"step": 4, "lo')  # torn by a kill
    with StepLog(tmp_path, 5, "ibrl", quiet=True, resume_after=2) as log:  # the state was saved at step 2
        with pytest.raises(ValueError):
            log.log(2, loss=9.0)
        log.log(3, loss=30.0)
    assert [(r["step"], r["loss"]) for r in read_log(tmp_path)] == [(1, 1.0), (2, 2.0), (3, 30.0)]
    assert not list(tmp_path.glob("train_log.*.jsonl"))  # continued, not archived


def test_steps_must_increase_within_a_log(tmp_path):
    with StepLog(tmp_path, total_steps=5, description="test", quiet=True) as log:
        log.log(2, loss=1.0)
        with pytest.raises(ValueError, match="step 2 logged after step 2"):
            log.log(2, loss=1.0)


def test_tensors_become_numbers_and_the_bar_shows_key_metrics_first():
    torch = pytest.importorskip("torch")
    text = summary({"tokens_per_s": 10.0, "custom": 3, "loss": torch.tensor(0.25), "reward": {"a": 1.5}})
    assert text.startswith("loss 0.25  reward a=1.5  tokens_per_s 10")
    assert "custom 3" in text



def test_written_to_a_file_each_step_is_one_whole_line(tmp_path):
    import io

    from rich.console import Console

    sink = io.StringIO()  # not a terminal: no bar redrawn in place
    long_reward = {f"role_{i}": 1.0 + i for i in range(8)}  # wider than the console's 80 columns
    with StepLog(tmp_path, total_steps=3, description="test", console=Console(file=sink, width=80)) as log:
        for step in (1, 2, 3):
            log.log(step, loss=0.5 / step, reward=long_reward, kl=0.01)
    lines = sink.getvalue().splitlines()
    assert [line.split("  ")[0] for line in lines] == ["test step 1/3", "test step 2/3", "test step 3/3"]
    assert all("role_7=8" in line and line.endswith(" s") for line in lines)  # nothing cut
    assert "loss 0.1667" in lines[2]
