"""Boards: `leaderboards/<domain>/<track>/board.json` and `board.md`, built from the bundles in
the track's submissions/ folder that verify.

One row per submitter name: its latest verified bundle (not its best), with how many bundles were
submitted under that name. Rank = 1 + the number of entries whose lower bound is above this one's
upper bound (`stats.ranking.rank_rule`), so entries whose intervals overlap share a rank. The
build is deterministic: the same bundles give the same files, byte for byte.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from pydantic import BaseModel
from rich import box
from rich.table import Table

from ibrl_bench import __version__
from ibrl_bench.errors import UserError
from ibrl_bench.leaderboard import files
from ibrl_bench.leaderboard.bundle import TrackRef
from ibrl_bench.leaderboard.scoring import CONFIDENCE
from ibrl_bench.leaderboard.submit import SUBMISSIONS, slug
from ibrl_bench.leaderboard.track import Track, track_folder
from ibrl_bench.leaderboard.verify import Verdict, read_submission, verify_bundle
from ibrl_bench.report.terminal import fmt, short
from ibrl_bench.stats.intervals import Interval
from ibrl_bench.stats.ranking import rank_rule

BOARD_JSON, BOARD_MD = "board.json", "board.md"
RANK_RULE = "1 + the number of entries whose lower bound is above this entry's upper bound"
PERCENT = {"success_at_1", "agreement"}


class Entry(BaseModel):
    rank: int | None
    name: str
    org: str | None
    policy: str
    model: dict[str, str]
    estimate: Interval
    per_counterpart: dict[str, Interval]
    train_counterpart: str | None = None
    mismatch: Interval | None = None
    submitted_at: str
    submissions: int  # bundles under this name on the track
    bundle: str  # folder name under submissions/


class Rejected(BaseModel):
    bundle: str
    reason: str


class Board(BaseModel):
    format: int = 1
    track: TrackRef
    metric: str
    confidence: float
    rank_rule: str
    counterparts: list[str]
    entries: list[Entry]
    rejected: list[Rejected]
    built_with: str


def rank_entries(entries: list[Entry]) -> list[Entry]:
    """Entries with their rank by the rule, best estimate first."""
    ranks = rank_rule([e.estimate for e in entries])
    ranked = [e.model_copy(update={"rank": r}) for e, r in zip(entries, ranks)]
    return sorted(ranked, key=lambda e: (-(e.estimate.estimate if e.estimate.estimate is not None else -1e300),
                                         e.submitted_at, e.name))


def build_board(track: Track, root: Path | None = None) -> Board:
    folder = track_folder(track.id, root) / SUBMISSIONS
    verdicts: list[tuple[str, Verdict]] = []
    rejected: list[Rejected] = []
    names: Counter = Counter()
    for bundle in sorted(p for p in folder.iterdir()) if folder.is_dir() else []:
        try:
            names[slug(read_submission(files.bundle_folder(bundle)).name)] += 1
            verdict = verify_bundle(bundle, root)
        except UserError as e:
            # Named by the folder's name, not its absolute path: the board is the same wherever it is built.
            reason = str(e).replace(str(bundle.resolve()), bundle.name).replace(str(bundle), bundle.name)
            rejected.append(Rejected(bundle=bundle.name, reason=reason))
            continue
        if verdict.track != track.id:
            rejected.append(Rejected(bundle=bundle.name, reason=f"a bundle for track {verdict.track}"))
        elif not verdict.ok:
            more = f" (and {len(verdict.problems) - 1} more)" if len(verdict.problems) > 1 else ""
            rejected.append(Rejected(bundle=bundle.name, reason=verdict.problems[0] + more))
        else:
            verdicts.append((bundle.name, verdict))
    latest: dict[str, tuple[str, Verdict]] = {}
    for name, v in sorted(verdicts, key=lambda x: (x[1].submission.submitted_at, x[0])):
        latest[slug(v.submission.name)] = (name, v)
    entries = []
    for key, (name, v) in latest.items():
        s = v.submission
        summary = s.scores.metrics[track.primary]
        entries.append(Entry(rank=None, name=s.name, org=s.org, policy=s.policy, model=s.model,
                             estimate=summary.overall, per_counterpart=summary.per_counterpart,
                             train_counterpart=s.train_counterpart, mismatch=s.scores.mismatch,
                             submitted_at=s.submitted_at, submissions=names[key], bundle=name))
    return Board(track=TrackRef(id=track.id, version=track.version, hash=track.hash), metric=track.primary,
                 confidence=CONFIDENCE, rank_rule=RANK_RULE, counterparts=track.counterparts,
                 entries=rank_entries(entries), rejected=rejected, built_with=f"ibrl-bench {__version__}")


def _cell(iv: Interval | None, metric: str) -> str:
    return fmt(iv, metric in PERCENT)


def render_md(board: Board, track: Track) -> str:
    m = board.metric
    unit = " (%)" if m in PERCENT else ""
    cols = [short(c, track.domain) for c in board.counterparts]
    head = ["rank", "name", "policy", f"{m}{unit}", *cols, "mismatch", "submitted", "submissions"]
    lines = [
        f"# {track.id} (version {track.version})",
        "",
        *([track.description.strip(), ""] if track.description.strip() else []),
        f"Track hash `{board.track.hash}`; {track.split} split, {track.scenarios.n} scenarios "
        f"({track.scenarios.version}, hash `{track.scenarios.hash}`) x {track.seeds} seed(s) x roles "
        f"{', '.join(track.roles)}. Estimates with {board.confidence:.0%} scenario-clustered intervals; "
        f"rank = {board.rank_rule}. Mismatch: {m} against the declared training counterpart minus the panel.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
    ]
    for e in board.entries:
        who = e.name + (f" ({e.org})" if e.org else "")
        row = [str(e.rank) if e.rank is not None else "-", who, f"`{e.policy}`", _cell(e.estimate, m),
               *(_cell(e.per_counterpart.get(c), m) for c in board.counterparts),
               _cell(e.mismatch, m) if e.mismatch else "-", e.submitted_at[:10], str(e.submissions)]
        lines.append("| " + " | ".join(x.replace("|", "\\|").replace("\n", " ") for x in row) + " |")
    if not board.entries:
        lines.append("| " + " | ".join("" for _ in head) + " |")
    if board.rejected:
        lines += ["", "Bundles not on the board:", ""]
        lines += [f"- `{r.bundle}`: {r.reason}" for r in board.rejected]
    return "\n".join(lines) + "\n"


def write_board(board: Board, track: Track, root: Path | None = None) -> tuple[Path, Path]:
    """Write board.md and board.json (each replaced atomically); returns their paths, in that order."""
    folder = track_folder(track.id, root)
    out = []
    for name, text in ((BOARD_MD, render_md(board, track)), (BOARD_JSON, board.model_dump_json(indent=2) + "\n")):
        tmp = folder / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, folder / name)
        out.append(folder / name)
    return out[0], out[1]


def read_board(track: Track, root: Path | None = None) -> Board:
    path = track_folder(track.id, root) / BOARD_JSON
    if not path.is_file():
        raise UserError(f"no board for {track.id} yet ({path}); run `ibrl-bench leaderboard build`")
    try:
        return Board.model_validate_json(path.read_text())
    except ValueError as e:
        raise UserError(f"{path} is not a valid board ({str(e).splitlines()[0]}); rebuild it with "
                        "`ibrl-bench leaderboard build`") from None


def board_table(board: Board, track: Track) -> Table:
    m = board.metric
    table = Table(title=f"{track.id} v{track.version} · {m} · rank = {board.rank_rule}", header_style="bold",
                  box=box.SIMPLE_HEAD, caption=None if board.entries else "no entries yet")
    for col in ("rank", "name", "policy", m, *(short(c, track.domain) for c in board.counterparts),
                "mismatch", "submitted", "n"):
        table.add_column(col, overflow="fold")
    for e in board.entries:
        table.add_row(str(e.rank) if e.rank is not None else "-", e.name + (f" ({e.org})" if e.org else ""),
                      short(e.policy, track.domain), _cell(e.estimate, m),
                      *(_cell(e.per_counterpart.get(c), m) for c in board.counterparts),
                      _cell(e.mismatch, m) if e.mismatch else "-", e.submitted_at[:10], str(e.submissions))
    return table
