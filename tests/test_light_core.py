"""The core stays light: importing ibrl_bench and running cross-play with scripted agents loads no
model stack (torch, transformers, ...), even where the [hf] extra is installed."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "transformers", "peft", "gguf", "tokenizers", "safetensors", "huggingface_hub", "vllm",
         "ibrl_bench.models", "ibrl_bench.agents.hf_local", "ibrl_bench.agents.vllm_local")

SCRIPT = """
import json, sys
import ibrl_bench
from ibrl_bench.cli import main
try:
    main(["crossplay", "--scenarios", "2", "--quiet", "--out", sys.argv[1]])
except SystemExit as e:
    assert not e.code, e.code
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def test_scripted_crossplay_imports_no_model_stack(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(heavy=HEAVY), str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / "results.json").is_file()
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


# `play` prints one episode: the statistics and table libraries (about 1 s of imports, scipy alone
# most of it) are for the commands that analyse runs, and must stay out of its start.
ANALYSIS = ("scipy", "pandas", "matplotlib")

PLAY = """
import json, sys
from ibrl_bench.cli import main
try:
    main(["play", "--scenario", "3"])
except SystemExit as e:
    assert not e.code, e.code
print(json.dumps(sorted(m for m in {analysis!r} if m in sys.modules)))
"""


def test_play_imports_no_statistics_library():
    proc = subprocess.run([sys.executable, "-c", PLAY.format(analysis=ANALYSIS)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "outcome" in proc.stdout  # it did play the episode
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
