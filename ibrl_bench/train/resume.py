"""Resuming an RL training after a crash, a kill or a preemption.

Every `save_every` steps the trainers write `<out>/resume/state.pt`: the step, the recipe it
belongs to, and per trainable role the tensors its optimizer updates and the optimizer's state
(AdamW moments and step counts). Only trainable tensors are written: with LoRA that is the
adapters, not the frozen base, so a state of a 7B run is a few hundred MB, not a model copy.

A rerun with the same recipe and `out` continues after the last saved step. Rollouts are seeded
from (run seed, step, scenario, episode) (rollout.episode_seed), not from a random stream that
runs on, so the steps redone after a resume play the same episodes and apply the same updates as
an uninterrupted run: the final checkpoints are the same bytes (tests/test_train_resume.py).

The state is written to a temporary file and renamed over the old one, so a kill during a write
leaves the previous state whole. A state written by another recipe (any field but `steps`,
`save_every` and `out` differs) is refused with the first differing field, never mixed in.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ibrl_bench.errors import UserError

FOLDER = "resume"
NAME = "state.pt"
FORMAT = 1
# Fields that may change between the run and its resume: how far to go, how often to save, and
# where the folder now is (a moved folder resumes).
FREE_FIELDS = {"steps", "save_every", "out"}


def state_path(out: str | Path) -> Path:
    return Path(out) / FOLDER / NAME


def identity(config: BaseModel) -> dict[str, Any]:
    return {k: v for k, v in config.model_dump(mode="json").items() if k not in FREE_FIELDS}


def saved_step(config: BaseModel) -> int:
    """The last step saved under `config.out` for this recipe; 0 when there is none.

    Raises a UserError when the folder holds the state of another recipe."""
    state = _read(state_path(config.out))
    if state is None:
        return 0
    _check(state, config)
    return int(state["step"])


def save(config: BaseModel, step: int, policies: dict[str, Any], accelerator: Any) -> None:
    """Write the state after `step` (main process; the others wait, so none runs ahead of it)."""
    import torch

    if accelerator.is_main_process:
        state = {
            "format": FORMAT,
            "step": step,
            "identity": identity(config),
            "policies": {role: {"parameters": [p.detach().cpu().clone() for p in policy.parameters()],
                                "optimizer": policy.optimizer.state_dict()}
                         for role, policy in policies.items()},
            "torch_rng": torch.get_rng_state(),
        }
        path = state_path(config.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        torch.save(state, partial)
        with open(partial, "rb") as f:
            os.fsync(f.fileno())
        os.replace(partial, path)
    accelerator.wait_for_everyone()


def restore(config: BaseModel, policies: dict[str, Any]) -> int:
    """Load the saved state into the policies (every process); return the step it was saved at."""
    import torch

    state = _read(state_path(config.out))
    if state is None:
        return 0
    _check(state, config)
    if set(state["policies"]) != set(policies):
        raise UserError(f"{state_path(config.out)} holds roles {sorted(state['policies'])}, this training "
                        f"has {sorted(policies)}; give another out folder")
    with torch.no_grad():
        for role, policy in policies.items():
            saved = state["policies"][role]
            params = policy.parameters()
            shapes = [tuple(t.shape) for t in saved["parameters"]]
            if shapes != [tuple(p.shape) for p in params]:
                raise UserError(f"{state_path(config.out)} does not fit the model of role {role} "
                                "(its trainable tensors differ); give another out folder")
            for p, t in zip(params, saved["parameters"]):
                p.copy_(t.to(device=p.device, dtype=p.dtype))
            policy.optimizer.load_state_dict(saved["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    return int(state["step"])


def _read(path: Path) -> dict[str, Any] | None:
    import torch

    if not path.exists():
        return None
    try:
        # weights_only: a state file is data; loading must not run code from it.
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign file: say which, and what to do
        raise UserError(f"cannot read the training state {path} ({type(e).__name__}); "
                        "remove it to start over") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise UserError(f"{path} is not a training state of this version; remove it to start over")
    return state


def _check(state: dict[str, Any], config: BaseModel) -> None:
    mine = identity(config)
    saved = state["identity"]
    for key in sorted(set(mine) | set(saved)):
        if mine.get(key) != saved.get(key):
            raise UserError(f"{config.out} holds a training of another recipe ({key}: {saved.get(key)!r} there, "
                            f"{mine.get(key)!r} here); give another out folder, or remove {FOLDER}/ to start over")
