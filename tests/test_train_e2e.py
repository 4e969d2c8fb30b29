"""End to end on the CPU, as a user runs it: scripted transcripts -> SFT of a tiny model from scratch
-> a few IB-RL and unilateral steps from the SFT checkpoint -> cross-play of the trained checkpoints
against the scripted held-out panel. The shipped tiny recipes, shrunk by command-line overrides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("accelerate")

ROOT = Path(__file__).parent.parent
RECIPES = ROOT / "training"
# Small enough for CI: a 1-layer model, one scenario of two episodes per step, short dialogues.
RL = ["--quiet", "steps=2", "scenarios_per_step=1", "group_size=2", "max_new_tokens=12", "max_turns=4",
      "rollout_batch_size=8", "micro_batch_size=8", "max_length=384", "model.model=hf:sft/checkpoint"]


def spec_lines(proc) -> dict[str, str]:
    """{seat: spec} from the `  seat: hf:...` lines `ibrl-bench train` prints."""
    seats = {}
    for line in proc.stdout.splitlines():
        seat, sep, spec = line.strip().partition(": ")
        if sep and spec.startswith("hf:"):
            seats[seat] = spec
    return seats


@pytest.mark.slow
def test_transcripts_to_sft_to_ibrl_and_unilateral_to_crossplay(ibrl, tmp_path):
    scripted = ibrl("crossplay", "--policy", "scripted:dealnodeal/fair", "--policy", "scripted:dealnodeal/boulware",
                    "--counterpart", "scripted:dealnodeal/tit_for_tat", "--split", "train", "--scenarios", "4",
                    "--quiet", "--out", "runs/scripted", cwd=tmp_path)
    assert scripted.returncode == 0, scripted.stderr

    sft = ibrl("train", "sft", "--recipe", str(RECIPES / "dealnodeal-tiny-sft.yaml"), "--quiet",
               "transcripts=[runs/scripted]", "out=sft", "steps=6", "batch_size=8", "max_length=384",
               "heldout_share=0.25",
               "from_scratch.shape={hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1}", cwd=tmp_path)
    assert sft.returncode == 0, sft.stderr
    summary = json.loads((tmp_path / "sft" / "sft_summary.json").read_text())
    assert summary["heldout_loss_after"] < summary["heldout_loss_before"]
    assert spec_lines(sft) == {"policy": f"hf:{(tmp_path / 'sft' / 'checkpoint').resolve()}"}

    bilateral = ibrl("train", "ibrl", "--recipe", str(RECIPES / "dealnodeal-tiny-ibrl.yaml"), *RL, "out=ibrl",
                     cwd=tmp_path)
    assert bilateral.returncode == 0, bilateral.stderr
    unilateral = ibrl("train", "unilateral", "--recipe", str(RECIPES / "dealnodeal-tiny-unilateral.yaml"), *RL,
                      "out=uni", cwd=tmp_path)
    assert unilateral.returncode == 0, unilateral.stderr
    trained = {f"ibrl-{k}": v for k, v in spec_lines(bilateral).items()}
    trained |= {f"uni-{k}": v for k, v in spec_lines(unilateral).items()}
    assert set(trained) == {"ibrl-a", "ibrl-b", "uni-a"}
    for out in ("ibrl", "uni"):
        steps = [json.loads(x) for x in (tmp_path / out / "train_log.jsonl").read_text().splitlines()]
        assert [s["step"] for s in steps] == [1, 2]
        assert {"reward", "kl", "entropy", "tokens_per_s"} <= set(steps[-1])

    policies = [f"{spec}?max_new_tokens=12" for spec in trained.values()]
    args = [x for p in policies for x in ("--policy", p)]
    played = ibrl("crossplay", *args, "--panel", "dealnodeal-scripted-heldout", "--scenarios", "1",
                  "--max-turns", "4", "--quiet", "--out", "runs/heldout", cwd=tmp_path)
    assert played.returncode == 0, played.stderr
    results = json.loads((tmp_path / "runs" / "heldout" / "results.json").read_text())
    cells = results["cells"]
    assert {c["policy"] for c in cells} == set(policies)
    assert {c["counterpart"] for c in cells} == {"scripted:dealnodeal/conceder", "scripted:dealnodeal/hardliner",
                                                  "scripted:dealnodeal/random"}
    assert sum(c["n_episodes"] for c in cells) == 3 * 3 * 2 and not any(c["n_errors"] for c in cells)
