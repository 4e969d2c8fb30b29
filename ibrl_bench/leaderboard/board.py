"""Boards: `leaderboards/<domain>/<track>/board.json` and `board.md`, built from the bundles in
the track's submissions/ folder that verify, and `ledger.json`, the board's own clock.

Every metric of the track is shown with its interval, overall and per counterpart; the first is
ranked. One row per submitter name: its latest verified bundle (not its best), with how many
bundles were submitted under that name. "Latest" and the order of ties come from the ledger,
which records when a build first saw each bundle (by the hash of its submission.json), never from
the date a bundle states about itself. Entries play the same games (scenarios, seeds, roles and
counterparts of the track), so they are ranked by paired comparisons on those games
(`stats.ranking.paired_rank_ranges`): rank = 1 + the entries significantly above, and the range of
ranks the comparisons allow. A bundle that fails, however it fails, is listed under the board with its reason; a track
where a counterpart's column is the same for every entry is refused (it carries no information).
The build is deterministic: the same bundles and ledger give the same files, byte for byte.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, PrivateAttr

from ibrl_bench import __version__
from ibrl_bench.errors import UserError
from ibrl_bench.leaderboard import files
from ibrl_bench.leaderboard.bundle import TrackRef
from ibrl_bench.leaderboard.scoring import CONFIDENCE, MetricSummary
from ibrl_bench.leaderboard.submit import SUBMISSIONS, slug
from ibrl_bench.leaderboard.track import Track, check_pins, track_folder
from ibrl_bench.leaderboard.verify import REASKED, Verdict, read_submission, verify_bundle
from ibrl_bench.report.numbers import format_interval
from ibrl_bench.report.terminal import short
from ibrl_bench.runner.store import now_iso
from ibrl_bench.stats.intervals import Interval, few_counterparts_note
from ibrl_bench.stats.ranking import paired_rank_ranges, scenario_tensor

BOARD_JSON, BOARD_MD, LEDGER = "board.json", "board.md", "ledger.json"
RANK_RULE = ("1 + the number of entries above it by a paired comparison on the same games (paired t over the "
             "scenarios' uniform means, the panel fixed, Holm over all pairs); in brackets, the ranks those "
             "comparisons allow (down to the number of entries minus those significantly below it)")
PERCENT = {"success_at_1", "agreement", "pareto_optimal"}
LABELS = {"success_at_1": "Success@1", "agreement": "agreement", "pareto_optimal": "Pareto",
          "policy_score": "policy score", "counterpart_score": "counterpart score", "joint_score": "joint score"}


# Where a domain's roles give the scores their names.
DOMAIN_LABELS = {"telesales": {"policy_score": "seller's reward", "counterpart_score": "buyer's reward"}}


def label(metric: str, domain: str = "", unit: bool = True) -> str:
    name = DOMAIN_LABELS.get(domain, {}).get(metric) or LABELS.get(metric, metric)
    return name + (" (%)" if unit and metric in PERCENT else "")


class Entry(BaseModel):
    rank: int | None
    rank_range: tuple[int, int] | None = None  # the rank interval
    name: str
    org: str | None
    policy: str
    model: dict[str, str]
    estimate: Interval  # the ranked metric, overall
    per_counterpart: dict[str, Interval]  # the ranked metric, per counterpart
    metrics: dict[str, MetricSummary] = {}  # every metric of the track
    train_counterpart: str | None = None
    mismatch: Interval | None = None
    first_seen: str  # from the ledger: when a build first saw this bundle
    submitted_at: str  # as the bundle states it (shown, never used to order)
    submissions: int  # bundles under this name on the track
    bundle: str  # folder name under submissions/
    not_reasked: dict[str, str] = {}  # seats the verifier could not ask again, and why


class Rejected(BaseModel):
    bundle: str
    reason: str


class LedgerEntry(BaseModel):
    bundle: str  # the folder it was first seen in
    first_seen: str


class Ledger(BaseModel):
    format: int = 1
    # sha256 of a bundle's submission.json (which holds the checksums of its other files) -> when seen
    bundles: dict[str, LedgerEntry] = {}


class Board(BaseModel):
    format: int = 2
    track: TrackRef
    metric: str
    metrics: list[str] = []
    confidence: float
    rank_rule: str
    counterparts: list[str]
    entries: list[Entry]
    rejected: list[Rejected]
    # Why no bundle can be on this board now (its model cards have not passed the fidelity gate)
    closed: str | None = None
    built_with: str
    _ledger: Ledger | None = PrivateAttr(default=None)


def board_ranks(frame, metric: str, confidence: float = CONFIDENCE) -> dict[str, tuple[int, tuple[int, int]]]:
    """Each entry's rank and the range of ranks its paired comparisons allow, from its episodes
    against the panel: `frame` holds every entry's episodes, its `policy` column naming the entry."""
    x, labels, *_ = scenario_tensor(frame, metric)
    return {label: (lo, (lo, hi)) for label, (lo, hi) in zip(labels, paired_rank_ranges(x, confidence), strict=True)}


def rank_entries(entries: list[Entry], ranks: dict[str, tuple[int, tuple[int, int]]]) -> list[Entry]:
    """Entries with their rank (`board_ranks`, by bundle), best rank first, then the best estimate
    (ties: first seen first)."""
    ranked = [e.model_copy(update={"rank": ranks[e.bundle][0], "rank_range": ranks[e.bundle][1]})
              if e.bundle in ranks else e for e in entries]
    return sorted(ranked, key=lambda e: (e.rank if e.rank is not None else len(entries) + 1,
                                         -(e.estimate.estimate if e.estimate.estimate is not None else -1e300),
                                         e.first_seen, e.name))


def read_ledger(track: Track, root: Path | None = None) -> Ledger:
    path = track_folder(track.id, root) / LEDGER
    if not path.is_file():
        return Ledger()
    try:
        return Ledger.model_validate_json(path.read_text())
    except ValueError as e:
        raise UserError(f"{path} is not a valid ledger ({str(e).splitlines()[0]}); restore it from the "
                        "repository's history (it is the board's record of when each bundle arrived)") from None


def _seen(ledger: Ledger, bundle: Path, now: str) -> str | None:
    """When the board first saw this bundle's content, recording it now if never before; None for
    a bundle too broken to hash."""
    try:
        digest = files.sha256(files.bundle_folder(bundle), files.SUBMISSION)
    except UserError:
        return None
    entry = ledger.bundles.setdefault(digest, LedgerEntry(bundle=bundle.name, first_seen=now))
    return entry.first_seen


def constant_column(track: Track, entries: list[Entry]) -> str | None:
    """The first counterpart whose column of the ranked metric is the same for every entry (two
    or more), which tells the entries nothing apart."""
    if len(entries) < 2:
        return None
    for c in track.counterparts:
        values = {(iv.estimate, iv.low, iv.high) for e in entries if (iv := e.per_counterpart.get(c)) is not None}
        if len(values) == 1:
            est = next(iter(values))[0]
            return (f"track {track.id}: counterpart {c} gives every entry the same {track.primary} ({est}); a column "
                    "that carries no information cannot rank anything: check the counterpart (`ibrl-bench "
                    "counterparts check NAME --gate`) and unpin it in a new version of the track")
    return None


def build_board(track: Track, root: Path | None = None) -> Board:
    folder = track_folder(track.id, root) / SUBMISSIONS
    ledger = read_ledger(track, root)
    try:
        check_pins(track)
        closed = None
    except UserError as e:  # every bundle is refused with this reason; the board says why it is empty
        closed = str(e)
    now = now_iso()
    verdicts: list[tuple[str, Verdict, str]] = []
    rejected: list[Rejected] = []
    names: Counter = Counter()
    for bundle in sorted(p for p in folder.iterdir()) if folder.is_dir() else []:
        seen = _seen(ledger, bundle, now)
        try:
            names[slug(read_submission(files.bundle_folder(bundle)).name)] += 1
            verdict = verify_bundle(bundle, root)
        except Exception as e:  # noqa: BLE001  one bad bundle, however it fails, never breaks the build
            # Named by the folder's name, not its absolute path: the board is the same wherever it is built.
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            if not isinstance(e, UserError):
                reason = f"verification failed ({type(e).__name__}: {reason[:200]})"
            reason = reason.replace(str(bundle.resolve()), bundle.name).replace(str(bundle), bundle.name)
            rejected.append(Rejected(bundle=bundle.name, reason=reason))
            continue
        if verdict.track != track.id:
            rejected.append(Rejected(bundle=bundle.name, reason=f"a bundle for track {verdict.track}"))
        elif not verdict.ok:
            more = f" (and {len(verdict.problems) - 1} more)" if len(verdict.problems) > 1 else ""
            rejected.append(Rejected(bundle=bundle.name, reason=verdict.problems[0] + more))
        else:
            verdicts.append((bundle.name, verdict, seen or now))
    latest: dict[str, tuple[str, Verdict, str]] = {}
    for name, v, seen in sorted(verdicts, key=lambda x: (x[2], x[0])):
        latest[slug(v.submission.name)] = (name, v, seen)
    entries = []
    frames = []
    for key, (name, v, seen) in latest.items():
        s = v.submission
        frames.append(_panel_frame(track, root, name, s))
        summary = s.scores.metrics[track.primary]
        entries.append(Entry(rank=None, name=s.name, org=s.org, policy=s.policy, model=s.model,
                             estimate=summary.overall, per_counterpart=summary.per_counterpart,
                             metrics={m: s.scores.metrics[m] for m in track.metrics if m in s.scores.metrics},
                             train_counterpart=s.train_counterpart, mismatch=s.scores.mismatch, first_seen=seen,
                             submitted_at=s.submitted_at, submissions=names[key], bundle=name,
                             not_reasked={k: n for k, n in v.seats.items() if n != REASKED}))
    refused = constant_column(track, entries)
    if refused:
        raise UserError(refused)
    ranks = board_ranks(pd.concat(frames, ignore_index=True), track.primary) if len(entries) > 1 else {
        e.bundle: (1, (1, 1)) for e in entries}
    board = Board(track=TrackRef(id=track.id, version=track.version, hash=track.hash), metric=track.primary,
                  metrics=track.metrics, confidence=CONFIDENCE, rank_rule=RANK_RULE, counterparts=track.counterparts,
                  entries=rank_entries(entries, ranks), rejected=rejected, closed=closed,
                  built_with=f"ibrl-bench {__version__}")
    board._ledger = ledger
    return board


def _panel_frame(track: Track, root: Path | None, bundle: str, sub):
    """A verified bundle's episodes against the panel (not its training counterpart), one row per
    episode, the `policy` column naming the bundle so that two entries of one policy stay apart."""
    from ibrl_bench.leaderboard.verify import read_episodes
    from ibrl_bench.stats.matrix import episodes_frame

    folder = files.bundle_folder(track_folder(track.id, root) / SUBMISSIONS / bundle)
    records = read_episodes(folder, sub.files["episodes"].path)
    frame = episodes_frame(r for r in records if r.counterpart in track.counterparts)
    frame["policy"] = bundle
    return frame


def _rank(e: Entry) -> str:
    if e.rank is None:
        return "-"
    if e.rank_range is None or e.rank_range == (e.rank, e.rank):
        return str(e.rank)
    return f"{e.rank} [{e.rank_range[0]}-{e.rank_range[1]}]"


def _cell(iv: Interval | None, metric: str) -> str:
    return format_interval(iv, metric in PERCENT, digits=1)


def _seats(e: Entry, domain: str) -> str:
    return "; ".join(f"{short(k, domain)}: {v.removeprefix('not re-asked: ')}" for k, v in e.not_reasked.items()) or "-"


def render_md(board: Board, track: Track) -> str:
    m = board.metric
    others = [x for x in board.metrics if x != m]
    cols = [short(c, track.domain) for c in board.counterparts]
    d = track.domain
    head = ["rank", "name", "policy", label(m, d), *cols, *(label(x, d) for x in others), "mismatch", "first seen",
            "submissions", "seats not re-asked"]
    lines = [
        f"# {track.id} (version {track.version})",
        "",
        *([track.description.strip(), ""] if track.description.strip() else []),
        f"Track hash `{board.track.hash}`; {track.split} split, {track.scenarios.n} scenarios "
        f"({track.scenarios.version}, hash `{track.scenarios.hash}`) x {track.seeds} seed(s) x roles "
        f"{', '.join(track.roles)}. Ranked on **{label(m, d, unit=False)}** (see leaderboards/README.md). "
        "Estimates with "
        f"{board.confidence:.0%} intervals: per counterpart, scenarios resampled; overall, the uniform mean over "
        "counterpart x role with scenarios and counterparts resampled (crossed: the panel read as a sample of "
        f"counterparts the policy never met). Rank = {board.rank_rule}. Mismatch: {label(m, d, unit=False)} against "
        "the declared training counterpart minus the panel. First seen: when the board first saw the bundle "
        "(ledger.json), which orders it.",
        "",
        *([f"Note: {note}.", ""] if (note := few_counterparts_note(len(board.counterparts))) else []),
        *([f"**Closed**: {board.closed}", ""] if board.closed else []),
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
    ]

    def row(cells: list[str]) -> str:
        return "| " + " | ".join(x.replace("|", "\\|").replace("\n", " ") for x in cells) + " |"

    for e in board.entries:
        who = e.name + (f" ({e.org})" if e.org else "")
        lines.append(row([_rank(e), who, f"`{e.policy}`", _cell(e.estimate, m),
                          *(_cell(e.per_counterpart.get(c), m) for c in board.counterparts),
                          *(_cell(e.metrics[x].overall if x in e.metrics else None, x) for x in others),
                          _cell(e.mismatch, m) if e.mismatch else "-", e.first_seen[:10], str(e.submissions),
                          _seats(e, track.domain)]))
    if not board.entries:
        lines.append("| " + " | ".join("" for _ in head) + " |")
    for x in others if board.entries else []:
        sub_head = ["name", f"{label(x, d)} overall", *cols]
        lines += ["", f"### {label(x, d)} per counterpart", "", row(sub_head),
                  "|" + "|".join("---" for _ in sub_head) + "|"]
        for e in board.entries:
            summary = e.metrics.get(x)
            lines.append(row([e.name, _cell(summary.overall if summary else None, x),
                              *(_cell(summary.per_counterpart.get(c) if summary else None, x)
                                for c in board.counterparts)]))
    if board.rejected:
        lines += ["", "Bundles not on the board:", ""]
        lines += [f"- `{r.bundle}`: {r.reason}" for r in board.rejected]
    return "\n".join(lines) + "\n"


def write_board(board: Board, track: Track, root: Path | None = None) -> tuple[Path, Path]:
    """Write board.md, board.json and the ledger (each replaced atomically); returns the board's
    two paths, md first."""
    folder = track_folder(track.id, root)
    texts = [(BOARD_MD, render_md(board, track)), (BOARD_JSON, board.model_dump_json(indent=2) + "\n")]
    if board._ledger is not None:
        texts.append((LEDGER, board._ledger.model_dump_json(indent=2) + "\n"))
    out = []
    for name, text in texts:
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


def board_table(board: Board, track: Track):
    from rich import box
    from rich.table import Table

    m = board.metric
    others = [x for x in board.metrics if x != m]
    d = track.domain
    table = Table(title=f"{track.id} v{track.version} · ranked on {label(m, d)} · rank = {board.rank_rule}",
                  header_style="bold", box=box.SIMPLE_HEAD,
                  caption=None if board.entries else (f"closed: {board.closed}" if board.closed else "no entries yet"))
    for col in ("rank", "name", "policy", label(m, d), *(short(c, d) for c in board.counterparts),
                *(label(x, d) for x in others), "mismatch", "first seen", "n", "not re-asked"):
        table.add_column(col, overflow="fold")
    for e in board.entries:
        table.add_row(_rank(e), e.name + (f" ({e.org})" if e.org else ""),
                      short(e.policy, track.domain), _cell(e.estimate, m),
                      *(_cell(e.per_counterpart.get(c), m) for c in board.counterparts),
                      *(_cell(e.metrics[x].overall if x in e.metrics else None, x) for x in others),
                      _cell(e.mismatch, m) if e.mismatch else "-", e.first_seen[:10], str(e.submissions),
                      _seats(e, track.domain))
    return table
