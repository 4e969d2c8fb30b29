"""Deal-or-NoDeal scenarios: the versioned generator with fixed splits, and the Lewis-format loader.

The generator enumerates every valid game (item counts and both sides' values) once. A game and
the same game with the sides swapped are one game here: the harness plays the policy in both
roles, so keeping both orientations would count each game twice. Each game is assigned to a split
by a hash of its content, so the splits are disjoint by construction and do not move when the
order or the size of a requested set changes. Within a split the order is a fixed shuffle; a set
of N scenarios is the first N of it.
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache
from pathlib import Path

from ibrl_bench.domains.base import Scenario, ScenarioSet, content_hash
from ibrl_bench.domains.dealnodeal.rules import Vec, all_counts, all_values, valid_pair
from ibrl_bench.errors import UserError

DOMAIN = "dealnodeal"
VERSION = "dnd-scenarios-v1"
SPLITS = ("train", "dev", "test")
# Per mille of games in each split, by content hash: 70% train, 10% dev, 20% test.
_SPLIT_BOUNDS = (("train", 700), ("dev", 800), ("test", 1000))


def make_scenario(counts: Vec, values_a: Vec, values_b: Vec) -> Scenario:
    data = {"counts": list(counts), "values": {"a": list(values_a), "b": list(values_b)}}
    return Scenario(id="dnd-" + content_hash(data, 10), domain=DOMAIN, data=data)


def _unit(text: str) -> int:
    """A per-mille bucket in [0, 1000) from a string, stable across Python versions."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % 1000


def split_of(counts: Vec, values_a: Vec, values_b: Vec) -> str:
    """The split a game belongs to; the same for both orientations of the game."""
    lo, hi = sorted([tuple(values_a), tuple(values_b)])
    bucket = _unit(f"{VERSION}|{tuple(counts)}|{lo}|{hi}")
    return next(name for name, bound in _SPLIT_BOUNDS if bucket < bound)


@lru_cache(maxsize=1)
def _universe() -> dict[str, tuple[Scenario, ...]]:
    games: dict[str, list[Scenario]] = {name: [] for name in SPLITS}
    for counts in all_counts():
        values = all_values(counts)
        for i, va in enumerate(values):
            for vb in values[i:]:
                if not valid_pair(counts, va, vb):
                    continue
                # One orientation per game, chosen by hash so that role a is not always the
                # side with the lexicographically smaller values.
                side_a, side_b = va, vb
                if va != vb and _unit(f"{VERSION}|orient|{counts}|{va}|{vb}") % 2:
                    side_a, side_b = vb, va
                games[split_of(counts, side_a, side_b)].append(make_scenario(counts, side_a, side_b))
    out = {}
    for name, items in games.items():
        items.sort(key=lambda s: s.id)
        random.Random(f"{VERSION}|{name}").shuffle(items)
        out[name] = tuple(items)
    return out


def scenario_set(split: str = "test", n: int | None = None) -> ScenarioSet:
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r} for dealnodeal; use one of: {', '.join(SPLITS)}")
    if n is not None and n < 1:
        raise UserError(f"--scenarios must be at least 1, got {n}")
    full = ScenarioSet(domain=DOMAIN, version=VERSION, split=split, scenarios=_universe()[split])
    return full.head(n)


def load_lewis_contexts(path: str | Path) -> ScenarioSet:
    """Read a Lewis et al. context file: six integers `c0 v0 c1 v1 c2 v2` per line, consecutive
    lines pairing side a and side b of one game. Blank lines and lines starting with # are skipped.
    """
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"cannot read context file {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not a text context file (byte {e.start} is not UTF-8); give a Lewis-format "
                        "file of lines 'c0 v0 c1 v1 c2 v2'") from None
    rows: list[tuple[int, Vec, Vec]] = []
    for lineno, line in enumerate(raw.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 6 or not all(p.lstrip("-").isdigit() for p in parts):
            raise UserError(
                f"{path}:{lineno}: expected six integers 'c0 v0 c1 v1 c2 v2', got {line[:60]!r}"
            )
        nums = [int(p) for p in parts]
        rows.append((lineno, (nums[0], nums[2], nums[4]), (nums[1], nums[3], nums[5])))
    if not rows:
        raise UserError(f"{path}: no contexts found; expected lines of six integers")
    if len(rows) % 2:
        raise UserError(f"{path}: odd number of context lines ({len(rows)}); lines come in pairs")
    scenarios = []
    for (la, ca, va), (lb, cb, vb) in zip(rows[::2], rows[1::2], strict=True):
        if ca != cb:
            raise UserError(f"{path}:{la}-{lb}: the two sides of a game list different item counts")
        if not valid_pair(ca, va, vb):
            raise UserError(
                f"{path}:{la}-{lb}: not a valid Deal-or-NoDeal game (counts 1-4, 5-7 items, "
                "each side's values worth 10, every item valued by someone, one by both)"
            )
        scenarios.append(make_scenario(ca, va, vb))
    return ScenarioSet(
        domain=DOMAIN,
        version=f"lewis-file:{content_hash(raw)}",
        split=f"file:{path.name}",
        scenarios=tuple(scenarios),
    )
