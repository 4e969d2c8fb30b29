"""One tally of several pytest runs (their --junitxml files), each test counted once.

    python scripts/test-tally.py MAIN.xml VLLM.xml   ->   total: 807 passed, 0 failed, 2 skipped

The same test may run in more than one environment (tests/test_vllm_local.py runs in the main one,
where its real-engine tests are skipped, and in vLLM's, where the one that needs vLLM absent is).
A test counts as failed if it failed or errored anywhere, else as passed if it passed anywhere,
else as skipped: "skipped" is then only what none of the environments could run (a module that one
environment skips whole, and another runs, counts by its tests). A file that is
missing or unreadable (its run crashed) counts as one failure. Standard library only."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

RANK = {"skipped": 0, "passed": 1, "failed": 2}


def outcomes(path: str) -> dict[str, str]:
    """test id -> passed / failed / skipped, as one pytest run reported it."""
    out: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        key = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            state = "failed"
        elif case.find("skipped") is not None:
            state = "skipped"
        else:
            state = "passed"
        if key not in out or RANK[state] > RANK[out[key]]:
            out[key] = state
    return out


def main(paths: list[str]) -> None:
    merged: dict[str, str] = {}
    unreadable = 0
    for path in paths:
        try:
            run = outcomes(path)
        except (OSError, ET.ParseError):
            print(f"note: no test report in {path} (that run did not finish)")
            unreadable += 1
            continue
        for key, state in run.items():
            if key not in merged or RANK[state] > RANK[merged[key]]:
                merged[key] = state
    # A module skipped whole at collection (no torch in that environment) is one entry named after
    # the module; where its tests ran in another environment, that entry stands for nothing.
    ran = {key.partition("::")[0] for key in merged}
    for key in [k for k, s in merged.items() if k.startswith("::") and s == "skipped" and k[2:] in ran]:
        del merged[key]
    counts = {state: sum(1 for s in merged.values() if s == state) for state in RANK}
    print(f"total: {counts['passed']} passed, {counts['failed'] + unreadable} failed, {counts['skipped']} skipped")


if __name__ == "__main__":
    main(sys.argv[1:])
