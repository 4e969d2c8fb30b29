"""Running `ibrl-bench` from the tests: in this process, or as a process of its own."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).parent


@dataclass
class CliResult:
    returncode: int | str
    stdout: str
    stderr: str


def run_in_process(argv: list[str]) -> CliResult:
    """`ibrl-bench ARGV` through `cli.main`, as the installed script calls it, with its output caught."""
    from ibrl_bench import cli

    out, err = io.StringIO(), io.StringIO()
    code: int | str = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(argv)
        except SystemExit as e:
            code = e.code if e.code is not None else 0
    return CliResult(code, out.getvalue(), err.getvalue())


def run_process(*argv: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 120) -> CliResult:
    """`python -m ibrl_bench ARGV` as a separate process; the tests' folder (for plugins) goes before
    whatever PYTHONPATH already names (a checkout to test)."""
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    full = {**os.environ, "PYTHONPATH": path, "COLUMNS": "200", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "ibrl_bench", *argv], capture_output=True, text=True, env=full,
                          cwd=cwd, timeout=timeout)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def assert_one_line_error(result: CliResult, *fragments: str) -> str:
    """A failed command told the user one line, `error: ...`, holding every fragment, on stderr."""
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]
