"""Reading a bundle folder that anyone may have written, without trusting it.

A bundle is a folder of a few plain files with fixed names. Before a byte is read: the folder
must be a real folder, hold nothing but those names, no symlink anywhere, every path must resolve
inside it, and every file's size (from stat, before opening) must be under its cap. Gzip is
streamed with a cap on the bytes it inflates to, so a small file cannot expand into a huge one.
Every refusal is a `BundleRefused` with one line naming the file and what is wrong.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from ibrl_bench.errors import UserError

MiB = 2**20
SUBMISSION = "submission.json"
MANIFEST = "manifest.json"
EPISODES = "episodes.jsonl.gz"
README = "README.md"
# The most each file may hold, on disk.
CAPS = {SUBMISSION: 1 * MiB, MANIFEST: 1 * MiB, README: 64 * 1024, EPISODES: 64 * MiB}
# Inflated, the episodes may hold the track's planned episodes and no line more, each line at most
# LINE_CAP and all of them INFLATED_PER_EPISODE per planned episode on average. Recorded episodes
# take 2-7 KB (scripted and small models, 10-20 messages); a model writing 256 tokens a message
# for 20 messages stays under 40 KB. So a bundle is read in bounded memory and time whatever it holds.
LINE_CAP = 1 * MiB
INFLATED_PER_EPISODE = 64 * 1024
INFLATED_CAP = 1024 * MiB  # with no track to size it by
MAX_DEPTH = 32  # of nested JSON arrays and objects; an episode record needs 6
CHUNK = 1 * MiB
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')


class BundleRefused(UserError):
    """A bundle that is unsafe or malformed: nothing in it is trusted or used."""


def bundle_folder(path: str | Path) -> Path:
    """The bundle's folder, resolved, after checking its whole tree: plain files with the known
    names only, no symlink, nothing nested."""
    given = Path(path)
    if given.is_symlink():
        raise BundleRefused(f"refused {given}: the bundle folder is a symlink; give the folder itself")
    if not given.is_dir():
        raise BundleRefused(f"refused {given}: not a folder; a bundle is a folder holding {SUBMISSION}")
    root = given.resolve()
    for entry in sorted(root.iterdir()):
        mode = entry.lstat().st_mode
        if stat.S_ISLNK(mode):
            raise BundleRefused(f"refused {given}: {entry.name} is a symlink; a bundle holds plain files only")
        if not stat.S_ISREG(mode):
            raise BundleRefused(f"refused {given}: {entry.name} is not a plain file; a bundle holds no folders")
        if entry.lstat().st_nlink > 1:  # a hard link can point at any file of the machine, like a symlink
            raise BundleRefused(f"refused {given}: {entry.name} is a hard link; a bundle holds plain files only")
        if entry.name not in CAPS:
            raise BundleRefused(f"refused {given}: unexpected file {entry.name!r}; a bundle holds only "
                                f"{', '.join(CAPS)}")
        if entry.lstat().st_size > CAPS[entry.name]:
            raise BundleRefused(f"refused {given}: {entry.name} is {entry.lstat().st_size:,} bytes, over the "
                                f"{CAPS[entry.name]:,}-byte cap")
    return root


def member(root: Path, name: str) -> Path:
    """The path of a file the bundle names, refused unless it is one of the bundle's own plain
    files, under its size cap."""
    root = root.resolve()  # a bundle named by a relative path (the default of `submit`) compares resolved
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or len(rel.parts) != 1 or "\\" in name:
        raise BundleRefused(f"refused {root}: the path {name!r} leaves the bundle folder; name files inside it")
    path = root / rel.name
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise BundleRefused(f"refused {root}: it lacks {name}") from None
    if resolved.parent != root:
        raise BundleRefused(f"refused {root}: {name} resolves outside the bundle folder")
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode):
        raise BundleRefused(f"refused {root}: {name} is not a plain file")
    cap = CAPS.get(rel.name)
    if cap is None:
        raise BundleRefused(f"refused {root}: unexpected file {name!r}; a bundle holds only {', '.join(CAPS)}")
    if info.st_size > cap:
        raise BundleRefused(f"refused {root}: {name} is {info.st_size:,} bytes, over the {cap:,}-byte cap")
    return path


def json_depth(data: bytes) -> int:
    """How deeply arrays and objects nest in a JSON text (brackets inside strings not counted),
    found without parsing, so that a deep text is refused before a parser recurses into it."""
    import numpy as np

    bare = np.frombuffer(_STRINGS.sub(b'""', data), dtype=np.uint8)
    step = np.isin(bare, (ord("["), ord("{"))).astype(np.int32) - np.isin(bare, (ord("]"), ord("}")))
    return int(np.cumsum(step).max(initial=0))


def parse_json(data: bytes, where: str) -> object:
    """`data` parsed, refused (with `where` naming it) when deeper than MAX_DEPTH or not JSON."""
    depth = json_depth(data)
    if depth > MAX_DEPTH:
        raise BundleRefused(f"{where} nests JSON {depth:,} levels deep, over the limit of {MAX_DEPTH}")
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise BundleRefused(f"{where} is not valid JSON ({str(e).splitlines()[0]})") from None


def read_json(root: Path, name: str) -> object:
    path = member(root, name)
    with open(path, "rb") as f:
        data = f.read(CAPS[name] + 1)  # never past the cap, even if the file grew since its stat
    if len(data) > CAPS[name]:
        raise BundleRefused(f"refused {root}: {name} is over the {CAPS[name]:,}-byte cap")
    return parse_json(data, f"refused {root}: {name}")


def sha256(root: Path, name: str) -> str:
    h = hashlib.sha256()
    with open(member(root, name), "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def gz_lines(root: Path, name: str, max_lines: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a gzipped text file, streamed: it stops, refusing the bundle, as
    soon as the inflated bytes pass their cap (INFLATED_PER_EPISODE x `max_lines`, or
    INFLATED_CAP), a line passes LINE_CAP, or the lines (blank ones too) pass `max_lines`."""
    path = member(root, name)
    cap = min(INFLATED_CAP, INFLATED_PER_EPISODE * max_lines) if max_lines else INFLATED_CAP
    total = 0
    pending = b""
    lineno = 0

    def counted() -> int:
        if max_lines is not None and lineno + 1 > max_lines:
            raise BundleRefused(f"refused {root}: {name} holds more than {max_lines:,} lines, the track's "
                                "planned episodes; one episode a line, each once")
        return lineno + 1

    try:
        with gzip.open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                for line in lines:
                    lineno = counted()
                    if len(line) > LINE_CAP:
                        raise BundleRefused(f"refused {root}: {name} line {lineno} is over {LINE_CAP:,} bytes")
                    yield lineno, line
                if len(pending) > LINE_CAP:
                    raise BundleRefused(f"refused {root}: {name} line {lineno + 1} is over {LINE_CAP:,} bytes")
                total += len(chunk)
                if total > cap:
                    raise BundleRefused(f"refused {root}: {name} inflates to more than {cap:,} bytes")
    except (OSError, EOFError, zlib.error) as e:
        raise BundleRefused(f"refused {root}: {name} is not a valid gzip file ({e})") from None
    if pending:
        lineno = counted()
        yield lineno, pending


def write_gz_lines(path: Path, lines: Iterator[str]) -> None:
    # mtime=0: the same episodes give the same bytes, so the checksum is reproducible.
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        for line in lines:
            f.write(line.encode() + b"\n")
