"""How the RL trainers run on one device or many: the accelerate / DDP / FSDP plumbing, kept apart
from the algorithm (ibrl.py) so that the algorithm reads as one process would run it.

    accelerator = make_accelerator(config)          one process, DDP or FSDP, from the launch
    prepare(accelerator, policies, precision)       models placed, wrapped (DDP) or sharded (FSDP)
    with rollout_weights(policies): ...             whole weights on every process while it plays
    with gradient_sync(accelerator, model, last):   accumulate micro-batches, reduce on the last
        accelerator.backward(loss)
    clip_gradients(accelerator, policy, max_norm)   the norm of the whole gradient, sharded or not
    over_processes(accelerator, values)             a step's sums (or maxima) over the processes
    save(accelerator, policies, out, prompt)        each role's checkpoint, from the main process

Two ways to hold the models. DDP (`accelerate launch --multi_gpu`, or
training/accelerate/multi-gpu-ddp.yaml): every process a whole copy. FSDP2
(training/accelerate/multi-gpu-fsdp.yaml; fsdp.py): every model sharded over the processes,
gathered whole for the rollouts. Either way the update is the one a single process would make on
all the step's groups: ibrl.update_role divides each process's loss by the step's counts over all
processes and runs as many micro-batches as the process with the most (`empty_batch` pads the
others), since every forward and backward of a shared model is a collective.
"""

from __future__ import annotations

import random
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from ibrl_bench.domains.base import DEFAULT_PROMPT, Role
from ibrl_bench.errors import UserError
from ibrl_bench.train import fsdp
from ibrl_bench.train.policy import ModelOptions, Policy, with_prompt
from ibrl_bench.train.samples import Sample, collate


def make_accelerator(config: Any) -> Any:
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    # Under DDP, the role not being updated has parameters outside the graph of the backward.
    ddp = DistributedDataParallelKwargs(find_unused_parameters=True)
    cpu = config.model.device == "cpu"
    return Accelerator(mixed_precision=config.mixed_precision, cpu=cpu, kwargs_handlers=[ddp])


def on_device(options: ModelOptions, accelerator: Any) -> ModelOptions:
    """Load straight onto this process's device (cuda:RANK), not every process onto cuda:0."""
    return options.model_copy(update={"device": str(accelerator.device)})


def counterpart_on_device(spec: str, accelerator: Any) -> str:
    """A frozen hf: counterpart goes on this process's GPU unless its spec names a device
    (`device=auto` would put every process's copy on cuda:0)."""
    from ibrl_bench.agents.spec import parse_spec

    parsed = parse_spec(spec)
    if parsed.kind != "hf" or "device" in parsed.params or accelerator.device.type != "cuda":
        return spec
    return f"{spec}{'&' if '?' in spec else '?'}device={accelerator.device}"


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)


def prepare(accelerator: Any, policies: dict[Role, Policy], mixed_precision: str = "no") -> None:
    """Make the policies ready for this launch: one process, DDP, or FSDP.

    - One process (CPU or GPU), or data parallelism (DDP): every process holds the whole model,
      generates with it and averages gradients; accelerate wraps each distinct model once.
    - FSDP: every model is sharded over the processes with torch's FSDP2 (fsdp.py says how and why
      not through accelerate's plugin); rollouts gather the whole weights first, the update runs
      the same number of micro-batches on every process, `save` gathers the whole state on the
      main process. The reference of full fine-tuning is sharded too: it is a whole model's size,
      which is what FSDP is there to spread (with LoRA the reference is the base, adapters off).
    - DeepSpeed is refused: an engine binds one optimizer to a model, while IB-RL on a shared base
      keeps one optimizer per role.
    """
    from accelerate.utils import DistributedType

    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        raise UserError("the RL trainers run on one device, with DDP or with FSDP, not DeepSpeed; "
                        "use training/accelerate/multi-gpu-fsdp.yaml or multi-gpu-ddp.yaml")
    for policy in policies.values():
        if policy.reference_model is not None:
            policy.reference_model.to(accelerator.device)
    if fsdp.wanted(accelerator):
        fsdp.shard(policies, mixed_precision)
        return
    prepared: dict[int, Any] = {}
    for policy in policies.values():
        key = id(policy.model)
        if key not in prepared:
            prepared[key] = accelerator.prepare_model(policy.model)
        policy.model = prepared[key]
        policy.optimizer = accelerator.prepare_optimizer(policy.optimizer)


def rollout_weights(policies: dict[Role, Policy]) -> Any:
    """Whole weights on every process while it plays (FSDP keeps only shards otherwise)."""
    if any(fsdp.is_sharded(p.model) for p in policies.values()):
        return fsdp.full_parameters(policies.values())
    return nullcontext()


def gradient_sync(accelerator: Any, model: Any, last: bool) -> Any:
    """Around a micro-batch's backward: gradients stay local until the last micro-batch of the
    update, whose backward reduces them all at once (DDP's no_sync, FSDP's gradient sync off)."""
    if fsdp.is_sharded(model):
        return fsdp.gradient_sync(model, last)
    return nullcontext() if last else accelerator.no_sync(model)


def clip_gradients(accelerator: Any, policy: Policy, max_norm: float) -> None:
    """Clip to the norm of the whole gradient (under FSDP: DTensor shards, reduced across processes)."""
    import torch

    if fsdp.is_sharded(policy.model):
        torch.nn.utils.clip_grad_norm_(policy.parameters(), max_norm)
    else:
        accelerator.clip_grad_norm_(policy.parameters(), max_norm)


def empty_batch(pad_id: int) -> Any:
    """A micro-batch with no action token: a forward and a backward of gradient zero, for a
    process that has fewer micro-batches than another (every one takes part in each collective)."""
    batch = collate([Sample([pad_id], [pad_id], [0.0])], pad_id)
    batch.action_mask.zero_()
    return batch


def over_processes(accelerator: Any, values: list[float], first_max: bool = False) -> list[float]:
    """`values` summed over all processes (with `first_max`, the first one's maximum instead);
    called by every process."""
    import torch
    import torch.distributed as dist

    if accelerator.num_processes == 1:
        return [float(v) for v in values]
    local = torch.tensor([float(v) for v in values], dtype=torch.float64, device=accelerator.device)
    head, rest = (local[:1], local[1:]) if first_max else (local[:0], local)
    if first_max:
        dist.all_reduce(head, op=dist.ReduceOp.MAX)
    dist.all_reduce(rest, op=dist.ReduceOp.SUM)
    return [float(v) for v in torch.cat([head, rest])]


def gather(accelerator: Any, local: list[Any]) -> list[Any]:
    """Every process's list, concatenated in process order (the local list with one process)."""
    if accelerator.num_processes == 1:
        return local
    from accelerate.utils import gather_object

    return gather_object(local)


def save(accelerator: Any, policies: dict[Role, Policy], out: str, prompt: str = DEFAULT_PROMPT) -> dict[Role, str]:
    """Each policy's checkpoint, written by the main process ({} elsewhere); a sharded model is
    gathered first, by all processes together."""
    specs: dict[Role, str] = {}
    accelerator.wait_for_everyone()
    for role, policy in policies.items():
        folder = Path(out) / f"checkpoint-{role}"
        state = None
        if fsdp.is_sharded(policy.model):
            # An adapter needs its own tensors only, not the base's billions.
            mine = f".{policy.adapter}." if policy.adapter is not None else ""
            state = fsdp.full_state(policy.model, lambda name, mine=mine: mine in name, accelerator.is_main_process)
        if accelerator.is_main_process:
            specs[role] = with_prompt(policy.save(folder, state), prompt)
    accelerator.wait_for_everyone()
    return specs
