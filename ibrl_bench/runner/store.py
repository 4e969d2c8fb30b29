"""The run folder: manifest.json, the append-only episodes.jsonl, and resume.

Durability: each finished episode is one JSON line handed to the kernel in a single unbuffered
write, so a process killed at any moment (SIGKILL included) keeps every episode it reported
finished. A kill in the middle of that write can leave a torn last line without its newline; it
is detected and cut off when the run is reopened, and that episode runs again. fsync runs at most
once a second and on close, which bounds what a power loss (not a process kill) can take.

An episode whose status is `error` is recorded too, but does not count as done: a resumed run
tries it again, and the newest record of a key wins.

Next to the log, summaries.jsonl holds each episode's numbers (its row of the episode table, what
the statistics read), written right after its line, so a large run is analysed without parsing
every transcript. It is derived data and never trusted blindly: each entry carries the byte range
of its log line and the CRC-32 of the log up to that line's end, so a reader uses the entries that
the log confirms and parses the log's remaining lines itself (a kill between the two writes, a
log written before the sidecar existed, an edited log). The writer repairs it when it opens the run.
"""

from __future__ import annotations

import json
import logging
import os
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError, create_model

from ibrl_bench.agents.base import Usage
from ibrl_bench.domains.base import Outcome, Role, Turn, content_hash
from ibrl_bench.errors import UserError
from ibrl_bench.secrets import scrub

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
EPISODES = "episodes.jsonl"
SUMMARIES = "summaries.jsonl"
FORMAT = 1
# Columns named `m_<name>` of the episode table carry a domain's own per-episode metrics (Outcome.metrics).
DOMAIN_PREFIX = "m_"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class EpisodeRecord(BaseModel):
    key: str
    domain: str
    policy: str
    counterpart: str
    policy_role: Role
    agents: dict[Role, str]  # role -> spec
    cards: dict[Role, str] = {}  # role -> content hash of the card behind its spec, for seats played by a card
    scenario_id: str
    scenario_hash: str
    seed: int
    starter: Role | None = None
    transcript: list[Turn]
    outcome: Outcome
    attempts: int = 1
    errors: list[str] = []  # infrastructure failures of earlier (or all, if status is error) attempts
    retries: dict[str, int] = {}  # faults the remote layer retried within the attempts, by kind
    usage: dict[Role, Usage] = {}
    finished_at: str
    duration_s: float


# A record without its transcript: every field the statistics read. Parsing a line into it skips
# building the turns, which is most of the cost of reading a record (about 5x faster), so analyses
# of large runs read summaries and load the transcripts they show by the line's byte offset.
EpisodeSummary = create_model(
    "EpisodeSummary",
    **{name: (field.annotation, field) for name, field in EpisodeRecord.model_fields.items() if name != "transcript"},
)


def episode_row(s: EpisodeSummary) -> dict[str, Any]:
    """An episode's row of the episode table (the policy's point of view), and beside it what the
    cell results add up: the error's kind (`detail`), token usage by seat, and retried faults."""
    other = next(role for role in s.agents if role != s.policy_role)
    o = s.outcome
    usage = {}
    for role, u in s.usage.items():
        counted = u.model_dump(exclude_defaults=True)
        if counted:
            usage["policy" if role == s.policy_role else "counterpart"] = counted
    return {
        "key": s.key, "policy": s.policy, "counterpart": s.counterpart, "policy_role": s.policy_role,
        "scenario_id": s.scenario_id, "seed": s.seed, "status": o.status, "agreement": o.agreement,
        "success": o.success, "policy_score": o.rewards.get(s.policy_role, 0.0),
        "counterpart_score": o.rewards.get(other, 0.0), "policy_violated": s.policy_role in o.violators,
        "turns": o.turns, "attempts": s.attempts,
        **{f"{DOMAIN_PREFIX}{k}": v for k, v in o.metrics.items()},
        "detail": o.detail, "usage": usage, "retries": s.retries,
    }


class Manifest(BaseModel):
    format: int = FORMAT
    harness_version: str
    created_at: str
    domain: str
    scenario_set: dict[str, Any]  # version, split, hash, n
    identity: dict[str, Any]  # what must match for a run folder to be resumed
    config: dict[str, Any]  # the whole configuration, for the record
    agents: dict[str, dict[str, Any]] = {}  # spec -> the card (id, hash, resolved spec) behind it
    prompt: dict[str, str] = {}  # the domain's prompt version and hash
    extended: list[dict[str, Any]] = []  # each growth of the matrix: when, and the seats it added

    @property
    def identity_hash(self) -> str:
        return content_hash(self.identity)


# What a run folder may gain without any finished episode changing meaning: more policies,
# counterparts and roles of the policy. An episode's key names its own seats, scenario and seed, not
# its place in these lists, so the episodes already played are exactly those of the larger matrix.
GROWABLE = ("policies", "counterparts", "roles")


def _grows(key: str, before: Any, after: Any) -> bool:
    """Whether identity field `key` going from `before` to `after` keeps the finished episodes valid."""
    if key in GROWABLE:
        return isinstance(after, list) and after[: len(before or [])] == (before or [])
    if key == "cards":  # a card already pinned must keep its hash; new seats may bring new cards
        return all((after or {}).get(spec) == h for spec, h in (before or {}).items())
    if key == "prompt":  # the first model seat brings the prompt; a changed prompt is another run
        return before is None or before == after
    return before == after


def growth(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list] | None:
    """The seats identity `new` adds to `old`, or None when `new` is not `old` grown (a changed
    scenario set, seeds, turn limit, card or prompt)."""
    keys = sorted(set(old) | set(new))
    if not all(_grows(k, old.get(k), new.get(k)) for k in keys):
        return None
    return {k: new[k][len(old.get(k) or []):] for k in GROWABLE if len(new.get(k) or []) > len(old.get(k) or [])}


def _first_difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    for key in sorted(set(old) | set(new)):
        if not _grows(key, old.get(key), new.get(key)):
            return f"{key}: {old.get(key)!r} there, {new.get(key)!r} now"
    return "unknown difference"


class RunStore:
    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.episodes_path = self.folder / EPISODES
        self.manifest_path = self.folder / MANIFEST
        self.summaries_path = self.folder / SUMMARIES
        self._fd: int | None = None
        self._summaries_fd: int | None = None
        self._end = 0  # the log's length, and the CRC-32 of its bytes, as the summaries record them
        self._crc = 0
        self._last_sync = 0.0
        self._fresh = False  # `open` started this run folder (wrote its manifest)
        self._created: Path | None = None  # the outermost folder `open` created for it
        self._appended = 0  # episodes recorded since `open`
        self._before_growth: bytes | None = None  # the manifest before `open` grew the matrix
        self.added: dict[str, list] = {}  # the seats `open` added to the folder's matrix

    # -- opening ---------------------------------------------------------------------------
    def open(self, manifest: Manifest) -> set[str]:
        """Create the run folder or check it holds the same run; return the keys already done."""
        if self.folder.exists() and not self.folder.is_dir():
            raise UserError(f"--out {self.folder} is a file; give a folder for the run")
        if self.episodes_path.exists() and not self.episodes_path.is_file():
            raise UserError(f"{self.episodes_path} is not a file; move it away, or give another --out")
        if self.manifest_path.exists():
            old = self.read_manifest()
            added = growth(old.identity, manifest.identity)
            if added is None:
                raise UserError(
                    f"--out {self.folder} holds a run of a different configuration "
                    f"({_first_difference(old.identity, manifest.identity)}); it can only gain policies, "
                    "counterparts or roles: use another --out, or delete that folder to start over"
                )
            if added:
                self._grow(old, manifest, added)
                self.added = added
        else:
            if self.folder.exists() and any(self.folder.iterdir()):
                raise UserError(
                    f"--out {self.folder} is not empty and holds no {MANIFEST}; "
                    "give a new or empty folder"
                )
            # The outermost folder this run creates: removed again if the run ends before
            # recording any episode (see `discard_if_unused`).
            created = next((p for p in reversed([self.folder, *self.folder.parents]) if not p.exists()), None)
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                self._fresh, self._created = True, created
                _atomic_write(self.manifest_path, manifest.model_dump_json(indent=2))
            except OSError as e:
                self.discard_if_unused()
                raise UserError(f"cannot create the run folder --out {self.folder}: {e.strerror}; "
                                "give a folder you can write to") from None
        try:
            self._repair_tail()
            done = {e["key"] for e in self._open_summaries() if e["status"] != "error"}
            self._fd = os.open(self.episodes_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            self.discard_if_unused()
            raise UserError(f"cannot write the run log {self.episodes_path}: {e.strerror}; "
                            "give a folder you can write to") from None
        return done

    def _grow(self, old: Manifest, new: Manifest, added: dict[str, list]) -> None:
        """Write the manifest of the larger matrix, keeping the folder's history; put back by
        `discard_if_unused` if the run stops before it records an episode."""
        self._before_growth = self.manifest_path.read_bytes()
        grown = new.model_copy(update={
            "created_at": old.created_at,
            "extended": [*old.extended, {"at": now_iso(), "harness_version": new.harness_version, "added": added}],
        })
        _atomic_write(self.manifest_path, grown.model_dump_json(indent=2))

    def discard_if_unused(self) -> None:
        """Remove the folders `open` created when no episode was recorded in them: a run stopped
        before its first episode (a rejected key, a broken agent) leaves nothing behind."""
        fresh, created = self._fresh, self._created
        self._fresh, self._created = False, None
        before, self._before_growth = self._before_growth, None
        if before is not None and not self._appended:  # a growth that played nothing is undone
            self.manifest_path.write_bytes(before)
        if not fresh or self._appended:
            return
        self.close()
        for name in (EPISODES, SUMMARIES, MANIFEST):
            (self.folder / name).unlink(missing_ok=True)
        if created is None:
            return  # the folder was there, empty, before the run: it stays
        for folder in [self.folder, *self.folder.parents]:
            try:
                folder.rmdir()
            except OSError:
                return  # not empty (someone else's files), or already gone
            if folder == created:
                return

    def read_manifest(self) -> Manifest:
        try:
            return Manifest.model_validate_json(self.manifest_path.read_text())
        except (OSError, ValidationError, ValueError) as e:
            first = str(e).splitlines()[0]
            raise UserError(f"{self.manifest_path} is not a valid run manifest ({first})") from None

    def _repair_tail(self) -> None:
        """Cut a torn last line left by a kill during a write."""
        if not self.episodes_path.exists():
            return
        with open(self.episodes_path, "rb+") as f:
            data = f.read()
            if not data:
                return
            end = len(data)
            cut = data.rfind(b"\n") + 1 if not data.endswith(b"\n") else end
            if cut == end:
                # The last line is complete; it may still be undecodable if the write was torn
                # after the newline of an earlier line (cannot happen with single writes, but a
                # copied or hand-edited file can end that way).
                start = data.rfind(b"\n", 0, end - 1) + 1
                try:
                    json.loads(data[start:end])
                except ValueError:
                    cut = start
            if cut < end:
                log.warning("dropped a torn last line of %s (%d bytes)", self.episodes_path, end - cut)
                f.truncate(cut)

    # -- reading ---------------------------------------------------------------------------
    def _lines(self, start: int = 0, first: int = 1):
        """(line number, byte offset, line) for every line of the log from byte `start` (line `first`) on."""
        if not self.episodes_path.exists():
            return
        if not self.episodes_path.is_file():
            raise UserError(f"{self.episodes_path} is not a file; the run folder is damaged: restore episodes.jsonl")
        with open(self.episodes_path, "rb") as f:
            f.seek(start)
            offset = start
            for lineno, line in enumerate(f, first):
                yield lineno, offset, line
                offset += len(line)

    def _scan(self, model):
        """(record, byte offset) for every line in file order, parsed into `model`."""
        for lineno, offset, line in self._lines():
            if line.strip():
                record = self._parse(model, line, f"{self.episodes_path}:{lineno}")
                if record is not None:
                    yield record, offset

    @staticmethod
    def _parse(model, line: bytes, where: str):
        try:
            return model.model_validate_json(line)
        except (ValidationError, ValueError):
            if not line.endswith(b"\n"):
                return None  # torn tail of a run still being written or killed
            raise UserError(
                f"{where} is not a valid episode record; the run log "
                "was edited or corrupted: restore it, or move the folder away to start over"
            ) from None

    def records(self) -> list[EpisodeRecord]:
        """Every record in file order."""
        return [r for r, _ in self._scan(EpisodeRecord)]

    def latest(self) -> dict[str, EpisodeRecord]:
        """The newest record per key (a later success supersedes an earlier error)."""
        return {r.key: r for r in self.records()}

    def _confirmed(self) -> tuple[list[dict[str, Any]], int, int, int]:
        """The sidecar's entries that the log confirms, in file order, the sidecar bytes they take,
        and the log's bytes and lines they cover. An entry is confirmed when it lies within the log,
        starting where the one before it ended, and the CRC-32 of the log up to the last entry's end is the one
        recorded there: anything else (a torn or corrupt line, a log cut short, edited or replaced)
        leaves the sidecar unused from that point, and the log's lines are read instead."""
        if not self.episodes_path.is_file():
            return [], 0, 0, 0  # no log yet, or a damaged folder (`_lines` says what is wrong)
        try:
            data = self.summaries_path.read_bytes()
            size = self.episodes_path.stat().st_size
        except OSError:
            return [], 0, 0, 0
        lines = data.split(b"\n")[:-1]  # the piece after the last newline is empty or torn
        try:
            entries = json.loads(b"[" + b",".join(lines) + b"]")
        except ValueError:
            entries = []
            for line in lines:  # the entries before the first unreadable line
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    break
        end, kept = 0, 0
        for e in entries:
            if not (isinstance(e, dict) and ENTRY_KEYS <= e.keys() and isinstance(e["log"], list) and len(e["log"]) == 3
                    and e["log"][0] == end < e["log"][1] <= size):
                break
            end, kept = e["log"][1], kept + 1
        entries = entries[:kept]
        crc, newlines = _crc_of(self.episodes_path, end) if entries else (None, 0)
        if not entries or crc != entries[-1]["log"][2]:
            return [], 0, 0, 0
        return entries, sum(len(line) + 1 for line in lines[:kept]), end, newlines

    def _summaries(self) -> tuple[list[dict[str, Any]], int, list[dict[str, Any]], int, int]:
        """(confirmed sidecar entries, the sidecar bytes they take, entries made now from the log's
        lines after them, the log's length and its CRC-32), entries in file order."""
        entries, used, end, newlines = self._confirmed()
        crc = entries[-1]["log"][2] if entries else 0
        fresh = []
        for lineno, offset, line in self._lines(end, newlines + 1):
            if line.strip():
                summary = self._parse(EpisodeSummary, line, f"{self.episodes_path}:{lineno}")
                if summary is None:
                    break  # a torn last line: not an episode yet
                crc = zlib.crc32(line, crc)
                fresh.append(_entry(summary, offset, offset + len(line), crc))
            else:
                crc = zlib.crc32(line, crc)
            end = offset + len(line)
        return entries, used, fresh, end, crc

    def episodes(self) -> list[dict[str, Any]]:
        """The newest row (`episode_row`) of every episode, in the order episodes were first written,
        each with `at`, the byte offset of its record's line (for `read_at`). Read from the
        summaries sidecar where the log confirms it, from the log's lines elsewhere."""
        entries, _, fresh, _, _ = self._summaries()
        return _newest(entries + fresh)

    def _open_summaries(self) -> list[dict[str, Any]]:
        """Bring the sidecar in step with the log (cut what the log does not confirm, add what it
        lacks), open it for appending, and return `episodes()`."""
        if self.summaries_path.exists() and not self.summaries_path.is_file():
            raise UserError(f"{self.summaries_path} is not a file; move it away (it is rebuilt from the run log)")
        entries, used, fresh, self._end, self._crc = self._summaries()
        with open(self.summaries_path, "ab") as f:
            f.truncate(used)
            f.write(b"".join(_entry_line(_row_text({k: v for k, v in e.items() if k != "log"}), *e["log"])
                             for e in fresh))
        self._summaries_fd = os.open(self.summaries_path, os.O_WRONLY | os.O_APPEND)
        return _newest(entries + fresh)

    def read_at(self, offsets: list[int]) -> list[EpisodeRecord]:
        """The whole records on the lines that start at these byte offsets (from `episodes`), in order."""
        out = []
        with open(self.episodes_path, "rb") as f:
            for offset in offsets:
                f.seek(offset)
                record = self._parse(EpisodeRecord, f.readline(), f"{self.episodes_path} at byte {offset}")
                if record is None:
                    raise UserError(f"{self.episodes_path} changed while it was read; run the command again")
                out.append(record)
        return out

    # -- writing ---------------------------------------------------------------------------
    def append(self, record: EpisodeRecord) -> None:
        line = record.model_dump_json()
        self.append_line(line, row_json(line))

    def append_line(self, text: str, row: str) -> None:
        """Append one record given as its JSON text, with its row as `row_json` wrote it (as a worker
        process sends them: the process that made the record writes its row, so this one, which
        may write for many workers, parses nothing)."""
        if self._fd is None:
            raise RuntimeError("RunStore.append before open")
        line = (scrub(text) + "\n").encode()
        written = os.write(self._fd, line)
        if written != len(line):  # a short write on a full disk: fail loudly, resume repairs it
            raise OSError(f"short write to {self.episodes_path} ({written} of {len(line)} bytes)")
        # The summary comes from the line as written; a kill before it lands costs nothing, the
        # next reader parses that line and the next `open` adds its entry.
        at, self._end, self._crc = self._end, self._end + len(line), zlib.crc32(line, self._crc)
        if self._summaries_fd is not None:
            os.write(self._summaries_fd, _entry_line(scrub(row), at, self._end, self._crc))
        self._appended += 1
        now = time.monotonic()
        if now - self._last_sync >= 1.0:
            os.fsync(self._fd)
            self._last_sync = now

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        if self._summaries_fd is not None:
            os.close(self._summaries_fd)
            self._summaries_fd = None

    def write_results(self, results: Any) -> None:
        """The run's cell results (stats.matrix.Results) as results.json, and flat as cells.csv."""
        self.write_text("results.json", results.model_dump_json(indent=2))
        self.write_text("cells.csv", results.cells_csv())

    def write_text(self, name: str, text: str) -> Path:
        path = self.folder / name
        _atomic_write(path, text)
        return path


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(scrub(text))
    os.replace(tmp, path)


# What every sidecar entry holds (besides the domain's metrics).
ENTRY_KEYS = frozenset(["key", "policy", "counterpart", "policy_role", "scenario_id", "seed", "status", "agreement",
                        "success", "policy_score", "counterpart_score", "policy_violated", "turns", "attempts",
                        "detail", "usage", "retries", "log"])


def row_json(line: str) -> str:
    """The row of the episode table of a record's JSON line, as JSON: its sidecar entry, less where
    the line lies (`_entry_line` adds that). Read back from the line, so the row holds the values
    the log holds (a NaN score is the log's null), as a reader of the log alone finds them."""
    return _row_text(episode_row(EpisodeSummary.model_validate_json(line)))


def _row_text(row: dict[str, Any]) -> str:
    return json.dumps(row, separators=(",", ":"))


def _entry(summary: EpisodeSummary, at: int, end: int, crc: int) -> dict[str, Any]:
    """A sidecar entry: the episode's row and where its line lies in the log (start, end, CRC-32 of
    the log up to the end)."""
    return {**episode_row(summary), "log": [at, end, crc]}


def _entry_line(row: str, at: int, end: int, crc: int) -> bytes:
    """The sidecar line of an episode: its row's JSON text (`row_json`) with where its line lies in
    the log as the last field. The one writer of the format, for appends and for rebuilds alike."""
    return f'{row[:-1]},"log":[{at},{end},{crc}]}}\n'.encode()


def _newest(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest entry per key, keys in first-written order, each with `at` (its line's offset)."""
    newest: dict[str, dict[str, Any]] = {}
    for e in entries:
        newest[e["key"]] = e
    for e in newest.values():
        e["at"] = e.pop("log")[0]
    return list(newest.values())


def _crc_of(path: Path, length: int) -> tuple[int | None, int]:
    """CRC-32 of the first `length` bytes of a file (None when it is shorter), and how many lines end in them."""
    crc, left, newlines = 0, length, 0
    with open(path, "rb") as f:
        while left:
            chunk = f.read(min(left, 1 << 23))
            if not chunk:
                return None, newlines
            crc, left, newlines = zlib.crc32(chunk, crc), left - len(chunk), newlines + chunk.count(b"\n")
    return crc, newlines
