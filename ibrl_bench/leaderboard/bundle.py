"""Submission bundles: the folder `ibrl-bench submit` writes and `leaderboard verify` checks.

    submission.json     who, what policy (and the identity of its weights), which track (and its
                        hash), counts, the metrics with intervals, the files with their checksums
    manifest.json       the run manifest of the cross-play run behind it
    episodes.jsonl.gz   every episode, one JSON record a line, transcripts included
    README.md           what was submitted, and the submitter's checklist

The schema is versioned (`format`) and strict: an unknown field is an error, not ignored.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ibrl_bench import __version__
from ibrl_bench.agents.spec import parse_spec
from ibrl_bench.leaderboard import files
from ibrl_bench.leaderboard.scoring import SCORING_VERSION, EntryScores
from ibrl_bench.leaderboard.track import Track
from ibrl_bench.runner.store import EpisodeRecord, Manifest, now_iso
from ibrl_bench.secrets import scrub

FORMAT = 2  # 2: `scoring`, the version of how the numbers were computed


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    sha256: str
    bytes: int = Field(ge=0)


class TrackRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    version: int
    hash: str


class Counts(BaseModel):
    model_config = ConfigDict(extra="forbid")

    episodes: int
    cells: int
    scenarios: int
    seeds: int


class Submission(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: int
    name: str = Field(min_length=1, max_length=80)
    org: str | None = Field(None, max_length=80)
    submitted_at: str
    harness_version: str
    policy: str
    model: dict[str, str]  # the identity of what the policy runs: a hub revision, a checksum of weights ...
    train_counterpart: str | None = None
    track: TrackRef
    earlier_submissions: int = Field(ge=0)  # bundles under the same name on this track before this one
    counts: Counts
    scoring: int  # scoring.SCORING_VERSION the numbers were computed under
    scores: EntryScores
    files: dict[str, FileEntry]


# ------------------------------------------------------------------------------- identity

def _hash_path(path: Path) -> str:
    """sha256 of a file, or of a folder's files (relative names and contents, in sorted order)."""
    h = hashlib.sha256()
    paths = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for p in paths:
        h.update(str(p.relative_to(path) if p != path else p.name).encode() + b"\0")
        with open(p, "rb") as f:
            while chunk := f.read(files.CHUNK):
                h.update(chunk)
    return h.hexdigest()


def model_identity(spec: str, domain: str) -> dict[str, str]:
    """What pins the policy behind a spec, beyond the spec's text: the checksum of local weights
    (and adapter), the version of the package shipping them, a card's hash, the harness version
    for scripted agents, the checksum of a plugin's module."""
    parsed = parse_spec(spec)
    out = {"kind": parsed.kind}
    if parsed.kind in ("hf", "vllm"):
        target = parsed.target
        if target.startswith("package:"):
            package = target.removeprefix("package:")
            out["package"] = f"{package}=={_dist_version(package)}"
        elif Path(target).exists():
            out["weights_sha256"] = _hash_path(Path(target))
        else:
            out["hub_id"] = target
            out["revision"] = str(parsed.params.get("revision", "unpinned"))
        adapter = parsed.params.get("adapter")
        if adapter and Path(str(adapter)).exists():
            out["adapter_sha256"] = _hash_path(Path(str(adapter)))
    elif parsed.kind == "card":
        from ibrl_bench.agents.cards import load_card

        out["card_hash"] = load_card(parsed.target).hash
    elif parsed.kind == "scripted":
        out["harness_version"] = __version__
    elif parsed.kind == "python":
        from ibrl_bench.agents.spec import import_from_cwd

        module = parsed.target.partition(":")[0]
        import_from_cwd()  # where the plugin is imported from when it plays
        try:
            found = importlib.util.find_spec(module)
        except ImportError:  # its package is not there: nothing to hash (building the seat will say so)
            found = None
        if found and found.origin and os.path.isfile(found.origin):
            out["module_sha256"] = _hash_path(Path(found.origin))
    else:  # an API model: its name is all the provider gives
        out["model"] = parsed.target
    return out


def _dist_version(package: str) -> str:
    for name in (package, package.replace("_", "-")):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


# ------------------------------------------------------------------------------- writing

CHECKLIST = """\
## Submitter's checklist

By opening a pull request with this bundle, the submitter states that:

- [ ] one attempt per scenario and seed: this bundle is the first complete run of this policy on
      the track, not the best of several (earlier submissions under this name: {earlier});
- [ ] no training on the test split: the policy never saw the track's scenarios ({split} split of
      {scenarios}) in training, tuning or prompt design;
- [ ] counterpart prompts unmodified: the counterparts ran from the pinned cards and the harness's
      prompts as they are (track hash {track_hash}).

Anyone can check the numbers: `ibrl-bench leaderboard verify <this folder>`.
"""


def readme(sub: Submission, track: Track) -> str:
    overall = sub.scores.metrics[track.primary].overall
    lines = [
        f"# {sub.name}" + (f" ({sub.org})" if sub.org else ""),
        "",
        f"- track: {track.id} version {track.version} (hash {track.hash})",
        f"- policy: `{sub.policy}`",
        f"- model identity: {', '.join(f'{k}={v}' for k, v in sub.model.items())}",
        f"- {track.primary}: {overall.format(3)} ({overall.method}, {overall.confidence:.0%})",
        f"- episodes: {sub.counts.episodes} ({sub.counts.cells} cells), submitted {sub.submitted_at}"
        f" with ibrl-bench {sub.harness_version}",
    ]
    if sub.train_counterpart:
        lines.append(f"- training counterpart (declared): `{sub.train_counterpart}`")
    return "\n".join(lines) + "\n\n" + CHECKLIST.format(
        earlier=sub.earlier_submissions, split=track.split, scenarios=track.scenarios.version,
        track_hash=track.hash)


def write_bundle(folder: Path, *, track: Track, policy: str, name: str, org: str | None,
                 train_counterpart: str | None, records: list[EpisodeRecord], manifest: Manifest,
                 scores: EntryScores, earlier: int) -> Submission:
    """Write the bundle into `folder` (new or empty). The episodes are written in key order, so
    the same episodes give the same file and checksum whatever order the run finished them in."""
    folder.mkdir(parents=True, exist_ok=True)
    ordered = sorted(records, key=lambda r: r.key)
    files.write_gz_lines(folder / files.EPISODES, (scrub(r.model_dump_json()) for r in ordered))
    (folder / files.MANIFEST).write_text(scrub(manifest.model_dump_json(indent=2)))
    entries = {
        key: FileEntry(path=fname, sha256=files.sha256(folder, fname), bytes=(folder / fname).stat().st_size)
        for key, fname in (("episodes", files.EPISODES), ("manifest", files.MANIFEST))
    }
    sub = Submission(
        format=FORMAT, name=name, org=org, submitted_at=now_iso(), harness_version=__version__,
        policy=policy, model=model_identity(policy, track.domain), train_counterpart=train_counterpart,
        track=TrackRef(id=track.id, version=track.version, hash=track.hash), earlier_submissions=earlier,
        counts=Counts(episodes=len(records), cells=len({(r.counterpart, r.policy_role) for r in records}),
                      scenarios=len({r.scenario_id for r in records}), seeds=len({r.seed for r in records})),
        scoring=SCORING_VERSION, scores=scores, files=entries,
    )
    (folder / files.SUBMISSION).write_text(scrub(sub.model_dump_json(indent=2)))
    (folder / files.README).write_text(readme(sub, track))
    return sub
