"""Time and peak memory of `leaderboard verify` on hostile bundles, against a valid bundle.

Each hostile bundle is a copy of a valid reference bundle of `dealnodeal/offline` (scripted
boulware, 300 episodes) with one attack, at the sizes that once stalled a build: 366k copies of one
valid record, a gzip bomb of 2 GiB of newlines, a 1 GiB line, JSON nested 200,000 deep, a 70 KB
README, and more. Every verification runs in a fresh process (so peak RSS is its own), the valid
one first and between every few hostile ones, interleaved, so the shared machine weighs on both
alike. Reported per bundle: the one-line reason, seconds, the ratio to the valid bundle's median
time, and peak RSS in MB (the issue's bounds: time <= 2x valid, peak <= 300 MB). Usage:

    python benchmarks/verify_hostile.py [--repeats 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACK = "dealnodeal/offline"
MB = 2**20

CHILD = r"""
import json, resource, sys, time
start = time.perf_counter()
from ibrl_bench.errors import UserError
from ibrl_bench.leaderboard.verify import verify_bundle
imported = time.perf_counter()
try:
    v = verify_bundle(sys.argv[1])
    reason = "verified" if v.ok else "rejected: " + v.problems[0]
except UserError as e:
    reason = str(e)
end = time.perf_counter()
print(json.dumps({"seconds": end - start, "verify_seconds": end - imported,
                  "reason": reason.replace(sys.argv[1], "BUNDLE"),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def gz_repeat(piece: bytes, times: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(z.compress(piece) for _ in range(times)) + z.flush()


def set_episodes(bundle: Path, raw: bytes) -> None:
    (bundle / "episodes.jsonl.gz").write_bytes(raw)
    import hashlib

    sub = json.loads((bundle / "submission.json").read_text())
    sub["files"]["episodes"]["sha256"] = hashlib.sha256(raw).hexdigest()
    (bundle / "submission.json").write_text(json.dumps(sub))


def first_line(bundle: Path) -> bytes:
    with gzip.open(bundle / "episodes.jsonl.gz", "rb") as f:
        return f.readline()


ATTACKS = {
    "copies of one valid record (366k)": lambda b: set_episodes(b, gz_repeat(first_line(b), 366_000)),
    "newline bomb (2 GiB inflated)": lambda b: set_episodes(b, gz_repeat(b"\n" * MB, 2048)),
    "one 1 GiB line": lambda b: set_episodes(b, gz_repeat(b"a" * MB, 1024)),
    "whitespace lines (300 x 900 KB)": lambda b: set_episodes(b, gz_repeat(b" " * 900_000 + b"\n", 300)),
    "nested submission.json (200k deep)": lambda b: (b / "submission.json").write_text("[" * 200_000 + "]" * 200_000),
    "nested episode line (500k deep)": lambda b: set_episodes(b, gzip.compress(b"[" * 500_000 + b"]" * 500_000)),
    "README.md of 70 KB": lambda b: (b / "README.md").write_text("x" * 70 * 1024),
    "not gzip": lambda b: set_episodes(b, os.urandom(1 << 16)),
}


def run(bundle: Path, root: Path) -> dict:
    env = {**os.environ, "IBRL_BENCH_LEADERBOARDS": str(root),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", CHILD, str(bundle)], capture_output=True, text=True, env=env,
                         check=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    source = REPO / "leaderboards" / TRACK
    valid_src = next(p for p in sorted((source / "submissions").iterdir()) if "boulware" in p.name)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "leaderboards"
        (root / TRACK).mkdir(parents=True)
        shutil.copy(source / "track.yaml", root / TRACK / "track.yaml")
        subs = root / TRACK / "submissions"
        valid = subs / "valid"
        shutil.copytree(valid_src, valid)
        hostile = {}
        for i, (name, attack) in enumerate(ATTACKS.items()):
            folder = subs / f"hostile-{i}"
            shutil.copytree(valid_src, folder)
            attack(folder)
            hostile[name] = folder
        times: dict[str, list[float]] = {"valid": []}
        verify_times: dict[str, list[float]] = {"valid": []}
        results: dict[str, dict] = {}
        for _ in range(args.repeats):
            for j, (name, folder) in enumerate(hostile.items()):
                if j % 4 == 0:  # the valid bundle interleaved: before every four hostile ones
                    r = run(valid, root)
                    times["valid"].append(r["seconds"])
                    verify_times["valid"].append(r["verify_seconds"])
                    results["valid"] = {**r, "peak_mb": max(r["peak_mb"], results.get("valid", {}).get("peak_mb", 0))}
                r = run(folder, root)
                times.setdefault(name, []).append(r["seconds"])
                verify_times.setdefault(name, []).append(r["verify_seconds"])
                results[name] = {**r, "peak_mb": max(r["peak_mb"], results.get(name, {}).get("peak_mb", 0))}
        base, vbase = statistics.median(times["valid"]), statistics.median(verify_times["valid"])
        rows = []
        for name, r in results.items():
            t, v = statistics.median(times[name]), statistics.median(verify_times[name])
            rows.append({"bundle": name, "seconds": round(t, 3), "ratio_to_valid": round(t / base, 3),
                         "verify_seconds": round(v, 3), "verify_ratio_to_valid": round(v / vbase, 3),
                         "peak_mb": round(r["peak_mb"], 1), "reason": r["reason"]})
    # seconds: the whole command (imports included); verify: after the imports, verify_bundle alone.
    width = max(len(r["bundle"]) for r in rows)
    print(f"{'bundle':<{width}}  seconds  x valid   verify  x valid  peak MB  reason")
    for r in rows:
        print(f"{r['bundle']:<{width}}  {r['seconds']:7.2f}  {r['ratio_to_valid']:7.2f}  {r['verify_seconds']:7.2f}  "
              f"{r['verify_ratio_to_valid']:7.2f}  {r['peak_mb']:7.0f}  {r['reason'][:100]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"repeats": args.repeats, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
