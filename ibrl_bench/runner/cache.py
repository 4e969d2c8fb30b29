"""The response cache of model seats: one reply per (seat identity, exact request, sample index).

A model seat's reply depends on what the model is (model name, snapshot, the sampling
parameters, the prompt version it reads), on the exact messages it is sent, and, when it samples,
on the draw. The key is built from exactly those: `seat_identity` (never the URL, the key or
transport settings such as timeouts and concurrency, which do not change a reply), the messages,
and the move's sample index (`request_seed`, derived from the episode seed, scenario, role, phase
and turn; fixed for greedy decoding). So a rerun replays every move from the cache, sampled ones
included, and two policies that bring a counterpart to the same state on the same episode seed
get the same counterpart draw.

The store is one sqlite file (WAL journal) in the user's cache folder or `--cache DIR`. Episodes of
one process share one connection; several processes (workers) may share the file: sqlite locks
it, and a reply two processes paid for at once is stored once, the first writer's, which both
then use, so every later replay of that request agrees.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibrl_bench.agents.spec import MODEL_KINDS, Seat, parse_spec
from ibrl_bench.domains.base import DEFAULT_PROMPT, Domain, content_hash
from ibrl_bench.errors import UserError
from ibrl_bench.secrets import scrub

CACHE_FILE = "responses.sqlite"
KEY_VERSION = 1  # bump when what goes into a key changes: old entries then simply stop matching
# Spec parameters that change how a request travels or is billed, never what the model answers.
TRANSPORT = {"concurrency", "timeout", "max_attempts", "backoff", "max_backoff", "key_env", "observation",
             "price_in", "price_out", "batch_size", "window_ms", "device", "prefix_cache", "kv_cache_gb"}


def is_model_seat(seat: Seat) -> bool:
    return parse_spec(seat.spec).kind in MODEL_KINDS


def seat_identity(seat: Seat, domain: Domain) -> dict[str, Any]:
    """What a model seat's replies depend on besides the request: the model and its snapshot, the
    sampling parameters as resolved (defaults included, so `temperature=0.7` spelled out or left to
    the default is one identity), and the name, version and hash of the role prompt it reads."""
    card, agent = seat.card, seat.agent
    spec = parse_spec(card.spec() if card is not None else seat.spec)
    prompt = domain.role_prompt(getattr(agent, "prompt", DEFAULT_PROMPT))
    sampling = {k: v for k, v in spec.params.items() if k not in TRANSPORT}
    for attr in ("gen", "params"):  # remote backends: `gen`; local ones: `params`
        resolved = getattr(agent, attr, None)
        if hasattr(resolved, "model_dump"):
            sampling = {k: v for k, v in resolved.model_dump().items() if k not in TRANSPORT} | sampling
    identity = {
        "key_version": KEY_VERSION,
        "backend": spec.kind,
        "model": spec.target.partition("@")[0],
        "snapshot": card.revision if card is not None else None,
        "sampling": dict(sorted(sampling.items())),
        "prompt": {"name": prompt.name, "version": prompt.version, "hash": prompt.hash},
    }
    if spec.kind in ("hf", "vllm"):
        # A checkpoint folder is often written again in place (a new training run, the same
        # path): its files' sizes and times are its snapshot.
        identity["weights"] = [files_fingerprint(spec.target), files_fingerprint(sampling.get("adapter"))]
    return identity


def files_fingerprint(path: str | None) -> str | None:
    """Names, sizes and modification times of the files at a local path (None if not one)."""
    if not path or not Path(path).exists():
        return None
    root = Path(path)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return content_hash([(str(p.relative_to(root)) if p != root else p.name, p.stat().st_size, p.stat().st_mtime_ns)
                         for p in files[:1000]])


def is_greedy(identity: dict[str, Any]) -> bool:
    return float(identity["sampling"].get("temperature", 1.0)) == 0.0


def request_key(identity: dict[str, Any], messages: list[dict[str, str]], sample: int | None) -> str:
    """The cache key of one request; `sample` is None for greedy decoding (one answer per request)."""
    return content_hash([identity, messages, sample], 32)


@dataclass(frozen=True)
class Cached:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float


class ResponseCache:
    """One sqlite file of replies. Calls are short (one indexed row), so they run on the event
    loop's thread; a lock makes the connection safe to share with other threads too."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder).expanduser()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.folder / CACHE_FILE, timeout=60, isolation_level=None,
                                       check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")  # readers never wait for a writer
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, text TEXT NOT NULL, "
                "prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, cost_usd REAL NOT NULL, "
                "model TEXT NOT NULL, created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)")
        except (OSError, sqlite3.Error) as e:
            raise UserError(f"cannot open the response cache in {self.folder} ({e}); "
                            "give a writable folder with --cache DIR, or --no-cache") from None
        self._lock = threading.Lock()
        # Requests being paid for right now in this process, by key: an identical request waits
        # for that answer instead of paying again (and so gets the same sample).
        self.in_flight: dict[str, asyncio.Event] = {}

    def get(self, key: str) -> Cached | None:
        with self._lock:
            row = self._db.execute("SELECT text, prompt_tokens, completion_tokens, cost_usd FROM replies "
                                   "WHERE key = ?", (key,)).fetchone()
        return Cached(*row) if row else None

    def put(self, key: str, reply: Cached, model: str) -> Cached:
        """Store a paid reply unless another writer stored this key first; return the stored one."""
        stored = Cached(scrub(reply.text), reply.prompt_tokens, reply.completion_tokens, reply.cost_usd)
        with self._lock:
            inserted = self._db.execute(
                "INSERT OR IGNORE INTO replies (key, text, prompt_tokens, completion_tokens, cost_usd, model) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (key, stored.text, stored.prompt_tokens, stored.completion_tokens, stored.cost_usd, model)).rowcount
        # Read back only when another writer was first: a row this call inserted is `stored`.
        return stored if inserted else (self.get(key) or reply)

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
