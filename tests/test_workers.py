"""crossplay on Ray worker processes: the same run folder as one process, and nothing lost or
repeated when a worker or the driver is killed with SIGKILL.

One local Ray instance (2 CPUs) serves the module; the `--workers 2` test starts its own, as a user's
command does. About 40 s in all on 2 shared cores, most of it Ray starting.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ibrl_bench.runner.crossplay import Crossplay, CrossplayConfig, RunAborted
from ibrl_bench.runner.workers import IN_HAND, Chunks, WorkerPlan

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'ibrl-bench[ray]'); CI installs it")

TESTS = Path(__file__).parent
N_SCENARIOS = 10
PLANNED = 1 * 2 * 2 * N_SCENARIOS
TIMING = ("finished_at", "duration_s")  # the only fields two runs of the same episode may differ in


@pytest.fixture(scope="module")
def pids(tmp_path_factory) -> Path:
    """Where the policy agent notes the process ids that built it (tests/plugins.py make_noted)."""
    return tmp_path_factory.mktemp("pids")


def config(pids: Path, **kw) -> CrossplayConfig:
    return CrossplayConfig(
        policies=[f"python:plugins:make_noted?folder={pids}&delay=0.01"],
        counterparts=["scripted:dealnodeal/conceder", "scripted:dealnodeal/random"],
        scenarios=N_SCENARIOS, concurrency=8, **kw,
    )


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="module")
def cluster():
    """A local Ray instance whose worker processes find tests/plugins.py; its address."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = env()["PYTHONPATH"]  # the worker processes inherit it
    try:
        context = ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20,
                           logging_level="WARNING", log_to_driver=False)
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, pids) -> Path:
    out = tmp_path_factory.mktemp("one") / "run"
    asyncio.run(Crossplay(config(pids), out).run())
    return out


def episodes(out: Path) -> dict[str, dict]:
    """Each key's record without its timing; fails if a key was recorded twice."""
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    by_key = {r["key"]: {k: v for k, v in r.items() if k not in TIMING} for r in records}
    assert len(by_key) == len(records), "an episode was recorded twice"
    return by_key


def same_run(out: Path, reference: Path) -> None:
    assert episodes(out) == episodes(reference)
    assert len(episodes(out)) == PLANNED
    for name in ("cells.csv", "results.json"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


def finish(out: Path, pids: Path, plan: WorkerPlan | None) -> None:
    """Run (or resume) the matrix here, then write its results as the CLI does."""
    runner = Crossplay(config(pids), out, plan)
    asyncio.run(runner.run())
    runner.store.write_results(runner.results())


@pytest.fixture(scope="module")
def reference(one_process, pids) -> Path:
    finish(one_process, pids, None)  # writes cells.csv and results.json
    return one_process


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_chunks_send_every_job_once_in_order_large_while_much_is_left_and_small_at_the_end():
    jobs = list(range(8000))
    chunks = Chunks(jobs, workers=2, smallest=32, largest=256)
    sizes, sent = [], []
    while chunks:
        sizes.append(len(chunk := chunks.take()))
        sent.extend(chunk)
    assert sent == jobs
    assert sizes[0] == 256 and sizes[-1] <= 32 and all(32 <= n <= 256 for n in sizes[:-1])
    assert sizes == sorted(sizes, reverse=True)
    assert len(sizes) < 8000 / 32 / 3, "no fewer Ray calls than with fixed chunks of the smallest size"
    # The last chunks in hand (IN_HAND per worker) are the smallest: the workers finish together.
    assert sizes[-2 * IN_HAND:-1] == [32] * (2 * IN_HAND - 1)


@pytest.mark.slow
def test_workers_2_command_equals_one_process(tmp_path, pids, reference):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "ibrl_bench", "crossplay", "--quiet", "--workers", "2",
               "--policy", f"python:plugins:make_noted?folder={pids}&delay=0.01",
               "--counterpart", "scripted:dealnodeal/conceder", "--counterpart", "scripted:dealnodeal/random",
               "--scenarios", str(N_SCENARIOS), "--concurrency", "8", "--out", str(out)]
    done = subprocess.run(command, env=env(), capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    same_run(out, reference)


@pytest.mark.slow
def test_worker_killed_midrun_costs_only_its_chunk(tmp_path, pids, reference, cluster):
    out = tmp_path / "run"
    for f in pids.iterdir():
        f.unlink()
    killed = []

    def kill_a_worker() -> None:
        deadline = time.monotonic() + 60
        while lines(out / "episodes.jsonl") < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        workers = sorted(int(f.name) for f in pids.iterdir() if int(f.name) != os.getpid())
        if workers:
            os.kill(workers[0], signal.SIGKILL)
            killed.append(lines(out / "episodes.jsonl"))

    killer = threading.Thread(target=kill_a_worker)
    killer.start()
    finish(out, pids, WorkerPlan(workers=2, chunk=4))
    killer.join()
    assert killed, "no worker process was found to kill"
    assert 6 <= killed[0] < PLANNED, "the worker was not killed while the run played"
    same_run(out, reference)


@pytest.mark.slow
def test_driver_killed_then_resumed(tmp_path, pids, reference, cluster):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "ibrl_bench", "crossplay", "--quiet", "--ray", cluster, "--workers", "2",
               "--policy", f"python:plugins:make_noted?folder={pids}&delay=0.01",
               "--counterpart", "scripted:dealnodeal/conceder", "--counterpart", "scripted:dealnodeal/random",
               "--scenarios", str(N_SCENARIOS), "--concurrency", "8", "--out", str(out)]
    proc = subprocess.Popen(command, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log = out / "episodes.jsonl"
    deadline = time.monotonic() + 120
    while lines(log) < 8:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(0.5)  # the workers of the dead driver, if any lived on, could not write: only it did
    before = log.read_bytes()
    complete = before[: before.rfind(b"\n") + 1]
    assert 8 <= complete.count(b"\n") < PLANNED

    finish(out, pids, WorkerPlan(workers=2, chunk=4))
    assert log.read_bytes().startswith(complete), "finished episodes were rewritten"
    same_run(out, reference)


@pytest.mark.slow
def test_fatal_error_in_a_worker_stops_the_run(tmp_path, cluster):
    out = tmp_path / "run"
    cfg = CrossplayConfig(policies=["python:plugins:BadKey"], counterparts=["scripted:dealnodeal/conceder"],
                          scenarios=4, concurrency=2)
    with pytest.raises(Exception, match=r"rejected the key in \$FAKE_KEY") as caught:
        asyncio.run(Crossplay(cfg, out, WorkerPlan(workers=1)).run())
    assert not isinstance(caught.value, RunAborted)
    assert not out.exists(), "a run stopped before its first episode leaves nothing behind"


def test_unreachable_cluster_is_one_line_and_leaves_nothing(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "ibrl_bench", "crossplay", "--quiet", "--scenarios", "2",
                           "--ray", "127.0.0.1:1", "--out", str(out)], env=env(), capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode != 0
    assert "error: no Ray cluster answers at 127.0.0.1:1" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


@pytest.mark.slow
def test_a_chunk_that_kills_its_worker_again_and_again_stops_the_run(tmp_path, cluster):
    out = tmp_path / "run"
    cfg = CrossplayConfig(policies=["python:plugins:die_after?n=3"], counterparts=["scripted:dealnodeal/conceder"],
                          scenarios=2, concurrency=1)
    with pytest.raises(RunAborted, match="killed its worker 3 times"):
        asyncio.run(Crossplay(cfg, out, WorkerPlan(workers=1)).run())
    assert not out.exists()


@pytest.mark.slow
def test_a_local_model_is_loaded_by_the_workers_only_and_plays_as_in_one_process(tmp_path, cluster):
    pytest.importorskip("torch", reason="the [hf] extra is not installed")
    from ibrl_bench.models.tiny import build_tiny_model

    spec = f"hf:{build_tiny_model(tmp_path / 'tiny', seed=0)}?max_new_tokens=6&batch_size=4"
    cfg = CrossplayConfig(policies=[spec], counterparts=["scripted:dealnodeal/conceder"], scenarios=2, concurrency=4,
                          retries=0)
    here = Crossplay(cfg, tmp_path / "one")
    asyncio.run(here.run())
    there = Crossplay(cfg, tmp_path / "workers", WorkerPlan(workers=1))
    assert not hasattr(there.seats[spec].agent, "model"), "the driver loaded the model"
    asyncio.run(there.run())
    assert episodes(tmp_path / "workers") == episodes(tmp_path / "one")
    assert here.manifest().identity == there.manifest().identity
