"""Sharded training for the RL trainers: torch's FSDP2 (`fully_shard`) on the models of the policies.

    shard(policies, mixed_precision)       every decoder layer, then the whole model, sharded over
                                           the processes; each optimizer rebuilt on its own shards
    with full_parameters(policies): ...    every process holds the whole model (rollouts)
    with gradient_sync(policy, on): ...    accumulate micro-batches without a reduce-scatter
    state = full_state(policy.model, keep) the whole state, on the main process only (saving)

Why torch's `fully_shard` and not accelerate's FSDP plugin. accelerate (1.16) prepares one model
with its optimizers in one call and leaves the sharding to the same `fully_shard`; it ignores FSDP
on the CPU (the state stays MULTI_CPU), so its path could not be tested here; and it wraps what
it is given, while the trainers must shard the causal LM *inside* a PEFT model (below). So the
trainers shard themselves, under the process group accelerate started, and read from the launch
config only that FSDP is asked for (see `wanted`).

What is sharded. The causal LM (for LoRA: the one inside the PeftModel) is the FSDP root, each of
its `_no_split_modules` layers (the decoder layers) a unit of its own. The root has to be the
model whose forward both training and `generate` call: PEFT's `generate` calls the inner model,
and FSDP refuses a forward that enters a layer before its root. With two LoRA adapters on one
base, both adapters sit in the same shards; each role's optimizer holds its own adapter's shards
only, and PEFT's `set_adapter` keeps the other adapter out of the graph as without FSDP
(policy.Policy.active), so nothing reaches the other role's shards.

Lockstep. Every forward and backward of a sharded model all-gathers or reduce-scatters, so all
processes must make the same calls in the same order: the update pads the micro-batches to the
same count on every process (ibrl.update_role). Rollouts are the exception: episodes differ in
length between processes, so `full_parameters` gathers every weight once and makes forwards
local until the rollouts end (and `generate` is told not to sync processes: agents/hf_local.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ibrl_bench.train.policy import Policy, hf_model


def wanted(accelerator: Any) -> bool:
    """FSDP was asked for by the launch config: accelerate says so on GPUs; on the CPU it ignores
    ACCELERATE_USE_FSDP (what `distributed_type: FSDP` sets) and the trainers honour it."""
    from accelerate.utils import DistributedType

    if accelerator.distributed_type == DistributedType.FSDP:
        return True
    return accelerator.num_processes > 1 and os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true")


def is_sharded(model: Any) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return model is not None and isinstance(hf_model(model), FSDPModule)


def shard(policies: dict[str, Policy], mixed_precision: str) -> None:
    """Shard every distinct model (and a full fine-tuning reference) in place; give each policy
    the sharded parameters it trains and a fresh optimizer over them (none has state yet)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # bf16 compute on full-precision shards; gradients reduced in float32.
    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if mixed_precision == "bf16" else MixedPrecisionPolicy())
    # Parameters are replaced by sharded ones: each policy finds its own again by name.
    names = {role: {id(p): n for n, p in policy.model.named_parameters()} for role, policy in policies.items()}
    done: set[int] = set()
    models = [p.model for p in policies.values()] + [p.reference_model for p in policies.values()]
    for model in models:
        if model is None or id(model) in done:
            continue
        done.add(id(model))
        inner = hf_model(model)
        layers = set(getattr(inner, "_no_split_modules", None) or [])
        for module in inner.modules():
            if type(module).__name__ in layers:
                fully_shard(module, mp_policy=mp)
        # Resharded after forward like the layers, so that `full_parameters` restores it exactly.
        fully_shard(inner, mp_policy=mp, reshard_after_forward=True)
    for role, policy in policies.items():
        by_name = dict(policy.model.named_parameters())
        sharded = {id(p): by_name[names[role][id(p)]] for p in policy.parameters()}
        # The optimizer has taken no step (no state): pointing it at the shards is all it needs,
        # and keeps its class and settings whatever they are.
        for group in policy.optimizer.param_groups:
            group["params"] = [sharded[id(p)] for p in group["params"]]
        policy._trainable = [sharded[id(p)] for p in policy.parameters()]


def _units(policies: Iterable[Policy]) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    seen: dict[int, Any] = {}
    for policy in policies:
        for module in policy.model.modules():
            if isinstance(module, FSDPModule):
                seen.setdefault(id(module), module)
    return list(seen.values())


@contextmanager
def full_parameters(policies: Iterable[Policy]) -> Iterator[None]:
    """Every weight of the policies' models gathered on every process for the block, and their
    forwards local: what rollouts need, whose number of forwards differs between processes.
    Entered and left on all processes together (the gather is collective)."""
    units = _units(policies)
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(True, recurse=False)


@contextmanager
def gradient_sync(model: Any, on: bool) -> Iterator[None]:
    """With `on` False, the backward keeps its gradients unsharded and local, to be reduced with
    the last micro-batch's (FSDP's counterpart of DDP's `no_sync`)."""
    root = hf_model(model)
    root.set_requires_gradient_sync(on)
    try:
        yield
    finally:
        root.set_requires_gradient_sync(True)


def full_state(model: Any, keep: Any, main: bool) -> dict[str, Any]:
    """The whole (unsharded) tensors of `model.state_dict()` whose names `keep(name)` accepts, on
    the CPU of the main process ({} elsewhere). Called on every process: each gather is collective."""
    from torch.distributed.tensor import DTensor

    out: dict[str, Any] = {}
    for name, tensor in model.state_dict().items():
        if not keep(name):
            continue
        whole = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
        if main:
            out[name] = whole.detach().cpu()
    return out
