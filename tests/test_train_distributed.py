"""The RL trainers on two processes (gloo, CPU): FSDP (train/fsdp.py) and DDP.

Each job trains 2 steps on a tiny model with hand-made rewards and records, on every process,
the whole trained weights after each update and the update's metrics. What must hold:

- every process ends with the same whole weights and logs the same metrics;
- two processes, each playing half of a step's groups, train what one process playing all of
  them trains, and log the same metrics (loss, kl, entropy, clip fraction, tokens...): the loss is
  normalized by the step's counts over all processes and metrics are reduced over all of them;
- FSDP keeps IB-RL's isolation: b's rewards do not reach a's weights, and each role's optimizer
  holds its own shards only;
- the checkpoint of a sharded run is an hf: spec that plays cross-play.

The optimizer is swapped for plain SGD in the workers: Adam's first step is lr * sign(gradient),
which turns float noise on near-zero gradients into differences of 2 * lr; SGD's step is linear in
the gradient, so comparing weights compares gradients. The isolation test keeps AdamW.

A launch starts its processes once and trains several jobs in them, one after the other: a worker
and its first job cost about 8 CPU-seconds (imports, mostly), each further job about half a second.
"""

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("accelerate")

from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig  # noqa: E402

pytestmark = pytest.mark.slow

WORKER = """
import json, os, sys
import torch
from ibrl_bench.train import ibrl, unilateral
from ibrl_bench.train.policy import LoraOptions, ModelOptions

base, jobs = sys.argv[1], json.loads(sys.argv[2])
rank = int(os.environ.get("RANK", "0"))
adamw, collect, update_all, role_batch = torch.optim.AdamW, ibrl.collect, ibrl.update_all, ibrl.role_batch

def collect_with_rewards(*args, **kwargs):
    groups = collect(*args, **kwargs)
    for g in groups:
        for i, r in enumerate(g.rollouts):
            n = sum(len(s.completion_ids) for s in r.samples.get("a", [])) + i
            m = sum(s.completion_ids[0] for s in r.samples.get("b", [])) + i
            rewards = {"a": float(n % 5), "b": float(m % 7) + job["b_offset"] * (i + 1)}
            r.outcome = r.outcome.model_copy(update={"rewards": rewards})
    return groups

def whole(p):
    return p.full_tensor() if hasattr(p, "full_tensor") else p.detach()

def update_and_record(policies, groups, config, accelerator):
    metrics = update_all(policies, groups, config, accelerator)
    seen["scenarios"].append(sorted(g.scenario.id for g in groups))
    seen["metrics"].append(metrics)
    weights.append({role: [whole(p).clone() for p in pol.parameters()] for role, pol in policies.items()})
    names = {id(p): n for n, p in next(iter(policies.values())).model.named_parameters()}
    seen["optimizers"] = {role: sorted(names.get(id(p), "?") for g in pol.optimizer.param_groups for p in g["params"])
                          for role, pol in policies.items()}
    seen["names"] = {role: [names.get(id(p), "?") for p in pol.parameters()] for role, pol in policies.items()}
    seen["sharded"] = type(next(iter(policies.values())).parameters()[0]).__name__ == "DTensor"
    return metrics

def fewer_on_rank_1(groups, role, options):  # one move where rank 0 has two: fewer micro-batches
    samples, advantages = role_batch(groups, role, options)
    return (samples[:1], advantages[:1]) if job["uneven"] and rank == 1 else (samples, advantages)

ibrl.collect, ibrl.update_all, ibrl.role_batch = collect_with_rewards, update_and_record, fewer_on_rank_1
for job in jobs:  # one after the other in these processes; each run seeds itself and loads its own models
    seen = {"scenarios": [], "metrics": [], "optimizers": {}}
    weights = []
    # What `distributed_type: FSDP` in a launch config sets; read by the trainers when they prepare.
    os.environ["ACCELERATE_USE_FSDP"] = "true" if job["fsdp"] else "false"
    # see the module's docstring
    torch.optim.AdamW = (lambda params, lr, **kw: torch.optim.SGD(params, lr=lr)) if job["sgd"] else adamw
    model = ModelOptions(model=base, lora=LoraOptions(r=4) if job["lora"] else None, device="cpu")
    fields = dict(model=model, out=job["out"], steps=job["steps"], scenarios_per_step=2, group_size=2,
                  max_new_tokens=8, max_turns=2, lr=0.05, kl_coef=0.1, micro_batch_size=1 if job["uneven"] else 2,
                  max_length=96)
    if job["trainer"] == "ibrl":
        seen["specs"] = ibrl.run(ibrl.IBRLConfig(**fields))
    else:
        seen["specs"] = unilateral.run(unilateral.UnilateralConfig(**fields, role="a",
                                                                   counterpart="scripted:dealnodeal/boulware"))
    with open(os.path.join(job["out"], f"rank-{rank}.json"), "w") as f:
        json.dump(seen, f)
    torch.save(weights, os.path.join(job["out"], f"rank-{rank}.pt"))
"""


def job(out: Path, fsdp: bool = True, trainer: str = "ibrl", lora: bool = True, b_offset: float = 0.0,
        sgd: bool = True, uneven: bool = False, steps: int = 2) -> dict:
    """One training for the workers: into `out` (a folder that holds a state resumes it), `steps`
    steps; sharded (FSDP) or not (DDP, on more than one process); SGD or the trainers' AdamW;
    `b_offset` added to b's rewards; `uneven`: rank 1 trains on fewer moves."""
    out.mkdir(parents=True, exist_ok=True)
    return {"out": str(out), "fsdp": fsdp, "trainer": trainer, "lora": lora, "b_offset": b_offset, "sgd": sgd,
            "uneven": uneven, "steps": steps}


def launch(base: Path, folder: Path, jobs: list[dict], processes: int) -> list[list[tuple[dict, list]]]:
    """Start `processes` workers as torchrun starts them (RANK, WORLD_SIZE, MASTER_ADDR... in their
    environment; one process: none of them, a plain run) but without torchrun's own supervising
    process, one torch import less per launch; they train the jobs in order. Returns, per job, each
    process's record and weights (of that job's steps). A worker that fails stops the others,
    which would otherwise wait for it in their next collective."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder.mkdir(parents=True, exist_ok=True)
    worker = folder / "worker.py"
    worker.write_text(WORKER)
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
    workers = []
    for rank in range(processes):
        if processes > 1:
            env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(processes),
                       LOCAL_WORLD_SIZE=str(processes), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        with open(folder / f"rank-{rank}.log", "w") as log:
            workers.append(subprocess.Popen([sys.executable, str(worker), str(base), json.dumps(jobs)], env=env,
                                            stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + 600
    try:
        while any(w.poll() is None for w in workers) and not any(w.poll() for w in workers):
            assert time.monotonic() < deadline, "the workers ran for 10 minutes"
            time.sleep(0.1)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
            w.wait()
    for rank, w in enumerate(workers):
        log = (folder / f"rank-{rank}.log").read_text()
        assert w.returncode == 0, f"rank {rank} exited {w.returncode}:\n{log[-4000:]}"
    return results(jobs, processes)


def results(jobs: list[dict], processes: int) -> list[list[tuple[dict, list]]]:
    return [[(json.loads((Path(j["out"]) / f"rank-{r}.json").read_text()),
              torch.load(Path(j["out"]) / f"rank-{r}.pt")) for r in range(processes)] for j in jobs]


# The launches the tests read, each made once per session: (processes, jobs). The one-process
# runs are the references of the two-process ones. The jobs of a launch run in order in the same
# processes, which spares each one's start (see the module's docstring); on the CPU, accelerate
# leaves FSDP to the trainers (train/fsdp.py), so DDP and FSDP jobs can share processes.
SHARED = {
    "one-process": (1, [{"fsdp": False, "lora": True}, {"fsdp": False, "lora": False}]),
    "two-processes": (2, [{"lora": True}, {"lora": False}, {"lora": True, "uneven": True},
                          # with the trainers' own AdamW: a run, the same run with other rewards for
                          # b, and a run stopped after step 1 (the isolation and resume test's)
                          {"sgd": False}, {"sgd": False, "b_offset": 3.5}, {"sgd": False, "steps": 1},
                          {"fsdp": False, "lora": True}]),
}


def shared_folder(tmp_path_factory, name: str) -> Path:
    """Where SHARED[name] runs: job i in job-{i}/; one folder for all pytest-xdist processes."""
    root = tmp_path_factory.getbasetemp()
    return (root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / f"distributed-{name}"


@pytest.fixture(scope="module")
def base_model(tmp_path_factory) -> Path:
    """The one-layer tiny model every launch trains: one folder for all pytest-xdist processes, as a
    resumed run must name the model its first launch named."""
    from filelock import FileLock  # a dependency of torch's, so here wherever this module runs

    from ibrl_bench.models.tiny import build_tiny_model

    folder = shared_folder(tmp_path_factory, "tiny")
    with FileLock(f"{folder}.lock"):
        if not (folder / "done").is_file():
            build_tiny_model(folder / "model", seed=0, num_hidden_layers=1)
            (folder / "done").touch()
    return folder / "model"


def shared(base: Path, tmp_path_factory, name: str) -> list[list[tuple[dict, list]]]:
    """SHARED[name]'s results: the first test that asks launches it, the others (in any pytest-xdist
    process: they share the parent of their temporary folders) wait for it and read what it wrote."""
    from filelock import FileLock

    folder = shared_folder(tmp_path_factory, name)
    processes, kwargs = SHARED[name]
    jobs = [job(folder / f"job-{i}", **k) for i, k in enumerate(kwargs)]
    with FileLock(f"{folder}.lock"):
        if not (folder / "done").is_file():
            launch(base, folder, jobs, processes)
            (folder / "done").touch()
    return results(jobs, processes)


def assert_close_metrics(got, want):
    for step_got, step_want in zip(got, want, strict=True):
        assert set(step_got) == set(step_want)
        for key, value in step_want.items():
            if isinstance(value, dict):
                for role, v in value.items():
                    assert step_got[key][role] == pytest.approx(v, rel=1e-4, abs=1e-6), (key, role)
            else:
                assert step_got[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def assert_close_weights(got, want):
    for step_got, step_want in zip(got, want, strict=True):
        for role in step_want:
            for p, q in zip(step_got[role], step_want[role], strict=True):
                assert torch.allclose(p, q, rtol=1e-4, atol=1e-6), role


# Unilateral runs the same `train` loop and sharding with one role (FSDP unilateral ran green here
# before it left the suite to keep it under 10 minutes).
@pytest.mark.parametrize("mode,lora,index", [("fsdp", True, 0), ("fsdp", False, 1), ("ddp", True, 6)],
                         ids=["fsdp-ibrl-two-adapters", "fsdp-ibrl-two-models", "ddp-ibrl-two-adapters"])
def test_two_processes_train_and_log_what_one_process_does(base_model, tmp_path_factory, mode, lora, index):
    ranks = shared(base_model, tmp_path_factory, "two-processes")[index]
    (first, first_weights), (second, second_weights) = ranks
    assert first["sharded"] == (mode == "fsdp") and second["sharded"] == (mode == "fsdp")
    # Whole groups per process: the two processes played different halves of every step.
    for mine, theirs in zip(first["scenarios"], second["scenarios"], strict=True):
        assert len(mine) == len(theirs) == 1 and mine != theirs
    # One set of weights and one set of metrics, on every process.
    for step_a, step_b in zip(first_weights, second_weights, strict=True):
        for role in step_a:
            assert all(torch.equal(p, q) for p, q in zip(step_a[role], step_b[role], strict=True))
    assert first["metrics"] == second["metrics"]
    ((one, one_weights),) = shared(base_model, tmp_path_factory, "one-process")[0 if lora else 1]
    assert [sorted(a + b) for a, b in zip(first["scenarios"], second["scenarios"], strict=True)] == one["scenarios"]
    assert_close_metrics(first["metrics"], one["metrics"])
    assert_close_weights(first_weights, one_weights)
    assert all(m["tokens"] > 0 for m in first["metrics"])
    assert set(first["specs"]) == set(one["specs"]) and second["specs"] == {}  # the main process saves
    if not lora:  # a whole model gathered from its shards: the trained weights, as an hf: folder
        from ibrl_bench.models.loading import load_model, resolve_source

        for role, spec in first["specs"].items():
            saved = load_model(resolve_source(spec.removeprefix("hf:")), device="cpu").model
            assert all(torch.equal(p, q) for p, q in zip(saved.parameters(), first_weights[-1][role], strict=True))


@pytest.mark.parametrize("mode", ["fsdp"])  # DDP pads by the same code (ibrl.update_role); one launch less
def test_processes_with_different_numbers_of_micro_batches_stay_in_step(base_model, tmp_path_factory, mode):
    """Rank 1 trains on fewer moves than rank 0 (one micro-batch against two): it runs an empty
    one, so both make the same collective calls (FSDP gathers in every forward, DDP broadcasts
    buffers in every forward) and nobody waits forever."""
    (first, first_weights), (second, second_weights) = shared(base_model, tmp_path_factory, "two-processes")[2]
    for step_a, step_b in zip(first_weights, second_weights, strict=True):
        for role in step_a:
            assert all(torch.equal(p, q) for p, q in zip(step_a[role], step_b[role], strict=True))
    assert first["metrics"] == second["metrics"]
    assert all(m["tokens"] > 0 for m in first["metrics"])


def test_fsdp_keeps_the_roles_isolated_resumes_and_saves_a_checkpoint_that_plays(base_model, tmp_path,
                                                                                tmp_path_factory):
    ((first, weights), second), ((other, other_weights), _) = shared(base_model, tmp_path_factory,
                                                                      "two-processes")[3:5]
    # One step: b's rewards changed b's update and left a's bit for bit as it was. (After that,
    # rollouts are played by a different b, so a's data differ: the check is on the first step.)
    assert all(torch.equal(p, q) for p, q in zip(weights[0]["a"], other_weights[0]["a"], strict=True))
    assert any(not torch.equal(p, q) for p, q in zip(weights[0]["b"], other_weights[0]["b"], strict=True))
    # Each optimizer holds its own adapter's shards, and nothing else.
    for role, names in first["optimizers"].items():
        assert names and all(f".policy_{role}." in n and "lora_" in n for n in names)
    # The checkpoint written from the shards is the trained adapter, and cross-play plays it.
    from safetensors.torch import load_file

    spec = first["specs"]["a"]
    saved = load_file(f"{spec.split('adapter=')[1]}/adapter_model.safetensors")
    trained = {name.replace(".policy_a.", "."): w
               for name, w in zip(first["names"]["a"], weights[-1]["a"], strict=True)}
    assert set(saved) == set(trained)
    assert all(torch.equal(saved[k], trained[k]) for k in saved)
    runner = Crossplay(CrossplayConfig(policies=[f"{spec}&max_new_tokens=8"],
                                       counterparts=["scripted:dealnodeal/conceder"],
                                       scenarios=1, concurrency=2, retries=0), tmp_path / "run")
    progress = asyncio.run(runner.run())
    assert progress.done == 2 and progress.errors == 0
    # Stopped after step 1 and resumed by new processes: the weights of the run never stopped, on
    # both processes. AdamW's moments are sharded like the adapters and must come back into the
    # right shards.
    shutil.copytree(shared_folder(tmp_path_factory, "two-processes") / "job-5", tmp_path / "resumed")
    (resumed,) = launch(base_model, tmp_path / "resume", [job(tmp_path / "resumed", sgd=False)], 2)
    assert len(resumed[0][1]) == 1  # the second launch trained step 2 only
    for straight_weights, (_, resumed_weights) in zip([weights, second[1]], resumed, strict=True):
        for role, tensors in straight_weights[-1].items():
            assert all(torch.equal(a, b) for a, b in zip(tensors, resumed_weights[-1][role], strict=True)), role
