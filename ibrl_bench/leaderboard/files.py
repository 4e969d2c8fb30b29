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
# The most each file may hold, on disk; and what the episodes may inflate to.
CAPS = {SUBMISSION: 1 * MiB, MANIFEST: 1 * MiB, README: 64 * 1024, EPISODES: 64 * MiB}
INFLATED_CAP = 1024 * MiB
LINE_CAP = 4 * MiB  # one episode record
CHUNK = 1 * MiB


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


def read_json(root: Path, name: str) -> object:
    path = member(root, name)
    with open(path, "rb") as f:
        data = f.read(CAPS[name] + 1)  # never past the cap, even if the file grew since its stat
    if len(data) > CAPS[name]:
        raise BundleRefused(f"refused {root}: {name} is over the {CAPS[name]:,}-byte cap")
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise BundleRefused(f"refused {root}: {name} is not valid JSON ({str(e).splitlines()[0]})") from None


def sha256(root: Path, name: str) -> str:
    h = hashlib.sha256()
    with open(member(root, name), "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def gz_lines(root: Path, name: str) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a gzipped text file, inflating at most INFLATED_CAP bytes."""
    path = member(root, name)
    total = 0
    pending = b""
    lineno = 0
    try:
        with gzip.open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                total += len(chunk)
                if total > INFLATED_CAP:
                    raise BundleRefused(f"refused {root}: {name} inflates to more than {INFLATED_CAP:,} bytes")
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                if len(pending) > LINE_CAP:
                    raise BundleRefused(f"refused {root}: {name} line {lineno + 1} is over {LINE_CAP:,} bytes")
                for line in lines:
                    lineno += 1
                    yield lineno, line
    except (OSError, EOFError, zlib.error) as e:
        raise BundleRefused(f"refused {root}: {name} is not a valid gzip file ({e})") from None
    if pending:
        yield lineno + 1, pending


def write_gz_lines(path: Path, lines: Iterator[str]) -> None:
    # mtime=0: the same episodes give the same bytes, so the checksum is reproducible.
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        for line in lines:
            f.write(line.encode() + b"\n")
