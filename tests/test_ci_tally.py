"""scripts/test-tally.py: CI's one line counting several environments' runs, each test once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TALLY = Path(__file__).resolve().parents[1] / "scripts" / "test-tally.py"


def report(path: Path, *cases: str) -> Path:
    """A junit report of cases 'classname::name:state' (state: passed, skipped or failed)."""
    body = {"passed": "", "skipped": "<skipped/>", "failed": "<failure/>"}
    rows = []
    for case in cases:
        where, state = case.rsplit(":", 1)
        classname, name = where.split("::")
        rows.append(f'<testcase classname="{classname}" name="{name}">{body[state]}</testcase>')
    path.write_text(f"<testsuites><testsuite>{''.join(rows)}</testsuite></testsuites>")
    return path


def tally(*paths: Path) -> str:
    return subprocess.run([sys.executable, str(TALLY), *map(str, paths)], capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]


def test_each_test_counts_once_and_a_module_skipped_whole_counts_by_its_tests_elsewhere(tmp_path):
    main = report(tmp_path / "main.xml", "tests.test_a::test_one:passed", "tests.test_b::test_gpu:skipped",
                  "tests.test_b::test_cpu:passed")
    # Without torch, test_b is skipped at collection: one entry named after the module.
    oldest = report(tmp_path / "oldest.xml", "tests.test_a::test_one:passed", "::tests.test_b:skipped")
    vllm = report(tmp_path / "vllm.xml", "tests.test_b::test_gpu:passed")
    assert tally(main, oldest, vllm) == "total: 3 passed, 0 failed, 0 skipped"
    assert tally(main, oldest) == "total: 2 passed, 0 failed, 1 skipped"  # test_gpu ran nowhere
    alone = report(tmp_path / "alone.xml", "::tests.test_c:skipped")  # a module no environment ran
    assert tally(main, alone) == "total: 2 passed, 0 failed, 2 skipped"
    broken = report(tmp_path / "broken.xml", "tests.test_a::test_one:failed")
    assert tally(main, broken) == "total: 1 passed, 1 failed, 1 skipped"  # failed anywhere: failed
    assert tally(main, tmp_path / "missing.xml") == "total: 2 passed, 1 failed, 1 skipped"  # a run that crashed
