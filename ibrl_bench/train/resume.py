"""Resuming an RL training after a crash, a kill or a preemption.

Every `save_every` steps the trainers write `<out>/resume/state.pt`: the step, the recipe it
belongs to, and per trainable role the tensors its optimizer updates and the optimizer's state
(AdamW moments and step counts). Only trainable tensors are written: with LoRA that is the
adapters, not the frozen base, so a state of a 7B run is a few hundred MB, not a model copy.

A rerun with the same recipe and `out` continues after the last saved step. Rollouts are seeded
from (run seed, step, scenario, episode) (rollout.episode_seed), not from a random stream that
runs on, so the steps redone after a resume play the same episodes and apply the same updates as
an uninterrupted run: the final checkpoints are the same bytes (tests/test_train_resume.py).

Under FSDP the tensors are shards (DTensors): every process takes part in gathering them whole
before the main process writes, and on resume each process cuts its own shards back out of the
whole tensors, so a state does not depend on how the run was sharded.

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

    # Gathering shards is collective: every process runs it, in the same order.
    gathered = {role: _whole_state(policy) for role, policy in policies.items()}
    if accelerator.is_main_process:
        state = {
            "format": FORMAT,
            "step": step,
            "identity": identity(config),
            "policies": gathered,
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
            for p, t in zip(params, saved["parameters"], strict=True):
                p.copy_(_like(t, p))
            policy.optimizer.load_state_dict(_optimizer_like(saved["optimizer"], policy.optimizer))
    torch.set_rng_state(state["torch_rng"])
    return int(state["step"])


def _whole(t: Any) -> Any:
    """A tensor whole and on the CPU (a DTensor shard is gathered: collective)."""
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        t = t.full_tensor()
    return t.detach().cpu().clone()


def _like(whole: Any, ref: Any) -> Any:
    """`whole` placed as `ref` is: on its device and dtype, and cut into the same shards if `ref` is one."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(ref, DTensor):
        return distribute_tensor(whole.to(device=ref.device, dtype=ref.dtype), ref.device_mesh, ref.placements)
    return whole.to(device=ref.device, dtype=ref.dtype)


def _whole_state(policy: Any) -> dict[str, Any]:
    import torch

    optimizer = policy.optimizer.state_dict()
    optimizer["state"] = {i: {k: _whole(v) if torch.is_tensor(v) else v for k, v in per_param.items()}
                          for i, per_param in optimizer["state"].items()}
    return {"parameters": [_whole(p) for p in policy.parameters()], "optimizer": optimizer}


def _optimizer_like(saved: dict[str, Any], optimizer: Any) -> dict[str, Any]:
    """The saved optimizer state with every per-parameter tensor (AdamW's moments) placed like
    its parameter; scalars such as the step count stay as saved."""
    import torch

    params = [p for group in optimizer.param_groups for p in group["params"]]  # state_dict's numbering
    state = {}
    for i, per_param in saved["state"].items():
        p = params[int(i)]
        state[i] = {k: _like(v, p) if torch.is_tensor(v) and tuple(v.shape) == tuple(p.shape) and v.dim() else v
                    for k, v in per_param.items()}
    return {**saved, "state": state}


def _read(path: Path) -> dict[str, Any] | None:
    import torch

    if not path.exists():
        return None
    try:
        # weights_only: a state file is data; loading must not run code from it. mmap: tensors are
        # read when used, so the CLI's look at the step (`saved_step`) does not read a state of
        # hundreds of MB that `restore` then reads again.
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
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
