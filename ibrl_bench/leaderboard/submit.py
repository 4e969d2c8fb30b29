"""`ibrl-bench submit`: run exactly a track's suite, then write the bundle.

The suite is an ordinary cross-play run (so it resumes like any run): the policy against every
member of the track's panel (and the declared training counterpart, for the mismatch), in the
track's roles, on its scenarios and seeds, with its turn limit. The bundle is written only from a
complete run: an episode that ended in an infrastructure error must be retried first.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from ibrl_bench.errors import UserError
from ibrl_bench.leaderboard import files
from ibrl_bench.leaderboard.bundle import Submission, write_bundle
from ibrl_bench.leaderboard.scoring import entry_scores
from ibrl_bench.leaderboard.track import Track, leaderboards_dir, panel_member, track_folder
from ibrl_bench.runner.crossplay import CrossplayConfig, planned_episodes
from ibrl_bench.runner.store import RunStore
from ibrl_bench.secrets import scrub

SUBMISSIONS = "submissions"


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "submission"


def suite_config(track: Track, policy: str, train_counterpart: str | None, concurrency: int,
                 move_timeout: float | None = 120.0) -> CrossplayConfig:
    member = panel_member(track, policy)
    if member:
        raise UserError(f"the policy {policy} is the track's panel member {member}; a counterpart is not "
                        "evaluated against itself: submit another policy")
    member = panel_member(track, train_counterpart) if train_counterpart else None
    if member:
        raise UserError(f"--train-counterpart {train_counterpart} is the track's panel member {member}; a policy "
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
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
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


def rescore(bundle: Path, root: Path | None = None) -> Submission:
    """Recompute a bundle's numbers from its own episodes under this harness's scoring, and rewrite
    submission.json (scores and scoring version) and README.md. Nothing else changes: the episodes,
    the manifest and their checksums stay as submitted, and `leaderboard verify` still checks all."""
    from ibrl_bench.leaderboard.bundle import readme
    from ibrl_bench.leaderboard.scoring import SCORING_VERSION
    from ibrl_bench.leaderboard.track import load_track
    from ibrl_bench.leaderboard.verify import read_episodes, read_submission

    folder = files.bundle_folder(bundle)
    sub = read_submission(folder)
    track = load_track(sub.track.id, root)
    if (sub.track.version, sub.track.hash) != (track.version, track.hash):
        raise UserError(f"{bundle} is for track {track.id} version {sub.track.version}, the track is now version "
                        f"{track.version}: its episodes were played on other terms; resubmit instead")
    counterparts = track.counterparts + ([sub.train_counterpart] if sub.train_counterpart else [])
    planned = len(counterparts) * len(track.roles) * track.scenarios.n * track.seeds
    records = read_episodes(folder, sub.files["episodes"].path, max_lines=planned)
    new = sub.model_copy(update={"scoring": SCORING_VERSION,
                                 "scores": entry_scores(records, track, sub.train_counterpart)})
    (folder / files.SUBMISSION).write_text(scrub(new.model_dump_json(indent=2)))
    (folder / files.README).write_text(readme(new, track))
    return new
