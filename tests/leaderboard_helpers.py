"""A small offline leaderboard track and submissions to it, for the leaderboard tests (the
fixtures that use them are in conftest.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from ibrl_bench.leaderboard.submit import make_bundle, suite_config
from ibrl_bench.leaderboard.track import Track, check_pins, current_pins, load_track
from ibrl_bench.runner.crossplay import Crossplay
from ibrl_bench.runner.store import RunStore

POLICY = "scripted:dealnodeal/boulware"
CARD = {"version": 1, "id": "tough", "description": "the hardliner, as a pinned card", "backend": "scripted",
        "model": "dealnodeal/hardliner", "domains": ["dealnodeal"]}


def write_track(root: Path, version: int = 1, n: int = 4) -> Track:
    """A small offline track: a scripted counterpart and a card (of a scripted agent), 4 scenarios,
    ranked on the policy's points as the Deal-or-NoDeal tracks are."""
    draft = Track(version=version, domain="dealnodeal", name="tiny", kind="offline", split="test",
                  scenarios={"version": "-", "n": n, "hash": "-"},
                  panel=[{"spec": "scripted:dealnodeal/random"}, {"spec": "card:tough"}],
                  roles=["a", "b"], max_turns=10, metrics=["policy_score", "agreement"], min_episodes_per_cell=n)
    pins = current_pins(draft)
    track = draft.model_copy(update={
        "scenarios": draft.scenarios.model_copy(update=pins["scenarios"]),
        "panel": [m.model_copy(update={"card_hash": pins["cards"][m.spec]}) for m in draft.panel],
        "prompt": pins["prompt"],
    })
    folder = root / "dealnodeal" / "tiny"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "track.yaml").write_text(yaml.safe_dump(track.model_dump(mode="json")))
    return track


def point_env(root: Path, setenv) -> None:
    """Point the card and leaderboard folders at `root` (`setenv`: a MonkeyPatch's)."""
    setenv("IBRL_BENCH_COUNTERPARTS", str(root / "counterparts"))
    setenv("IBRL_BENCH_LEADERBOARDS", str(root / "leaderboards"))


def submit(tmp: Path, name: str = "Boulware", policy: str = POLICY, train: str | None = None) -> Path:
    """What `ibrl-bench submit` does, in process: the track's suite, then the bundle."""
    track = load_track("dealnodeal/tiny")
    check_pins(track)
    config = suite_config(track, policy, train, concurrency=8)
    n = len(list(tmp.glob("run-*")))
    out = tmp / f"run-{n}"
    asyncio.run(Crossplay(config, out).run())
    bundle = tmp / "leaderboards" / "dealnodeal" / "tiny" / "submissions" / f"{name.lower()}-{n}"
    while bundle.exists():  # beside a bundle copied from the pristine one
        bundle = bundle.with_name(bundle.name + "x")
    make_bundle(track, RunStore(out), bundle, policy=policy, name=name, org="tests", train_counterpart=train)
    return bundle
