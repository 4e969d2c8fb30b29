"""The documentation's examples, run as a reader would run them."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def commands(block: str) -> list[list[str]]:
    """The shell commands of a bash block: continuation lines joined, comments dropped."""
    joined = block.replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in joined.splitlines()
            if line.strip() and not line.startswith("#")]


@pytest.mark.slow
def test_the_example_agent_of_agents_md_runs_from_the_current_folder(tmp_path):
    text = (DOCS / "agents.md").read_text()
    package = tmp_path / "my_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "agents.py").write_text(blocks(text, "python")[-1])  # the complete agent
    run_block = blocks(text.split("## Running it", 1)[1], "bash")[0]
    # The installed command, not `python -m`: it is the one that does not put the current folder on
    # the import path by itself.
    script = Path(sys.executable).with_name("ibrl-bench")
    ran = []
    for argv in commands(run_block):
        assert argv[0] == "ibrl-bench"
        proc = subprocess.run([str(script), *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        ran.append(argv[1])
    assert ran == ["play", "crossplay"]
    results = json.loads((tmp_path / "runs" / "my-agent" / "results.json").read_text())
    cells = {(c["counterpart"].rsplit("/", 1)[-1], c["policy_role"]): c["metrics"] for c in results["cells"]}
    assert len(cells) == 6 and results["complete"]
    # The example keeps to the protocol in every game, and deals with a conceder.
    assert all(m["policy_invalid"]["estimate"] == 0 for m in cells.values())
    assert min(cells[("conceder", r)]["success_at_1"]["estimate"] for r in ("a", "b")) >= 0.8
