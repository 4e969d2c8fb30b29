"""`ibrl-bench submit`: run exactly a track's suite, then write the bundle.

The suite is an ordinary cross-play run (so it resumes like any run): the policy against every
member of the track's panel (and the declared training counterpart, for the mismatch), in the
track's roles, on its scenarios and seeds, with its turn limit. The bundle is written only from a
complete run: an episode that ended in an infrastructure error must be retried first.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

from ibrl_bench.errors import UserError
from ibrl_bench.leaderboard import files
from ibrl_bench.leaderboard.bundle import Submission, write_bundle
from ibrl_bench.leaderboard.scoring import entry_scores
from ibrl_bench.leaderboard.track import Track, leaderboards_dir, track_folder
from ibrl_bench.runner.crossplay import CrossplayConfig, planned_episodes
from ibrl_bench.runner.store import RunStore

SUBMISSIONS = "submissions"


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "submission"


def suite_config(track: Track, policy: str, train_counterpart: str | None, concurrency: int,
                 move_timeout: float | None = 120.0) -> CrossplayConfig:
    if train_counterpart in track.counterparts:
        raise UserError(f"--train-counterpart {train_counterpart} is in the track's held-out panel; a policy "
                        "trained against a panel member has no held-out score there: submit to another track")
    extra = [train_counterpart] if train_counterpart else []
    return CrossplayConfig(
        domain=track.domain, policies=[policy], counterparts=track.counterparts + extra, roles=track.roles,
        split=track.split, scenarios=track.scenarios.n, seeds=track.seeds, max_turns=track.max_turns,
        concurrency=concurrency, move_timeout=move_timeout,
    )


def default_run_folder(track: Track, name: str) -> Path:
    # One folder level per part: joined with '-', track `offline` + name "scripted x" and track
    # `offline-scripted` + name "x" would share a folder.
    return Path("runs") / "submit" / track.domain / track.name / slug(name)


def default_bundle_folder(track: Track, name: str, root: Path | None = None) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return track_folder(track.id, root) / SUBMISSIONS / f"{slug(name)}-{stamp}"


def earlier_submissions(track: Track, name: str, root: Path | None = None) -> int:
    """Bundles already under this track's submissions/ with the same name (case and spacing aside)."""
    from ibrl_bench.leaderboard.verify import read_submission

    n = 0
    for folder in sorted((track_folder(track.id, root) / SUBMISSIONS).glob("*/")):
        try:
            other = read_submission(files.bundle_folder(folder))
        except UserError:
            continue  # a refused bundle is nobody's submission
        n += slug(other.name) == slug(name)
    return n


def check_bundle_folder(bundle: Path) -> None:
    if bundle.exists() and (not bundle.is_dir() or any(bundle.iterdir())):
        raise UserError(f"--bundle {bundle} exists and is not empty; give a new folder")


def make_bundle(track: Track, store: RunStore, bundle: Path, *, policy: str, name: str, org: str | None,
                train_counterpart: str | None, root: Path | None = None) -> Submission:
    manifest = store.read_manifest()
    records = list(store.latest().values())
    errors = sum(r.outcome.status == "error" for r in records)
    planned = planned_episodes(manifest.identity)
    if errors or len(records) != planned:
        raise UserError(f"the run in {store.folder} has {len(records) - errors} of {planned} episodes finished "
                        f"({errors} infrastructure errors); rerun the same submit command to complete it")
    check_bundle_folder(bundle)
    earlier = earlier_submissions(track, name, root or leaderboards_dir())
    scores = entry_scores(records, track, train_counterpart)
    return write_bundle(bundle, track=track, policy=policy, name=name, org=org, train_counterpart=train_counterpart,
                        records=records, manifest=manifest, scores=scores, earlier=earlier)
