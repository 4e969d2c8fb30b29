"""The training log: one JSON line per optimizer step in `<folder>/train_log.jsonl`, and a progress
bar on a terminal (written to a file or a pipe: one line per step, `ibrl step 3/20  loss 0.41 ...  12.3 s`).

    with StepLog(out, total_steps=cfg.steps, description="ibrl") as log:
        for step in range(1, cfg.steps + 1):
            ...
            log.log(step, loss=0.41, reward={"a": 3.2, "b": 4.1}, kl=0.01, tokens_per_s=812.0)

Each line is `{"step": N, "time": ISO-8601, "elapsed_s": S, **metrics}`, written and flushed as soon
as the step is logged, so a killed run keeps every step it reported. Values may be numbers, strings,
None, nested dicts of them (one entry per role), or anything with `.item()` (a 0-d tensor, a numpy
scalar). Non-finite numbers are written as the strings "nan", "inf", "-inf": the file stays strict
JSON (Python's NaN is not), and a diverged loss is still visible. Read it with
`pandas.read_json(path, lines=True)`.

Reruns. An RL training that resumes from its saved state (resume.py) continues its log:
`StepLog(..., resume_after=N)` keeps the lines of steps 1..N and drops later ones (those steps are
trained again). Any other rerun starts a new training, and a log already in the folder is never
appended to: it is renamed to `train_log.1.jsonl` (then `.2`, ...: the first free number, so older
logs are never overwritten) with a warning, and the new training starts a fresh `train_log.jsonl`.
Within one log, steps must increase; a repeated or decreasing step raises, because it would mean
two trainings in one file.
"""

from __future__ import annotations

import json
import logging
import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

log = logging.getLogger(__name__)

LOG_NAME = "train_log.jsonl"
# Shown on the bar when present, in this order; the file gets every metric.
KEY_METRICS = ("loss", "reward", "kl", "entropy", "clip_frac", "tokens_per_s")
MAX_SHOWN = 6


class StepLog:
    def __init__(self, folder: str | Path, total_steps: int, description: str, quiet: bool = False,
                 console: Console | None = None, resume_after: int = 0):
        self.folder = Path(folder)
        self.path = self.folder / LOG_NAME
        self.total_steps = total_steps
        self.description = description
        self.last_step: int | None = None
        self.archived: Path | None = None  # where an earlier training's log was moved, if any
        self.resume_after = resume_after  # steps of this training already done and logged
        self._file = None
        self._start = 0.0
        self._console = console or Console(stderr=True)
        # Written to a file or a pipe, a bar is one line redrawn in place, which a log keeps only
        # as its last, cut state: there each step gets a line of its own instead.
        self._lines = not quiet and not self._console.is_terminal
        self._progress = Progress(
            TextColumn(f"[bold]{description}[/bold]"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[metrics]}"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
            console=self._console, disable=quiet or self._lines, transient=False,
        )
        self._task = None

    def __enter__(self) -> StepLog:
        self.folder.mkdir(parents=True, exist_ok=True)
        kept: list[str] = []
        if self.path.exists() and self.resume_after:
            kept = _lines_until(self.path, self.resume_after)
            self.last_step = json.loads(kept[-1])["step"] if kept else None
        elif self.path.exists():
            self.archived = _free_name(self.folder)
            self.path.rename(self.archived)
            log.warning("%s held the log of an earlier training; moved it to %s", self.path, self.archived.name)
        # Line-buffered text: every line reaches the kernel when it is written.
        self._file = open(self.path, "w", buffering=1, encoding="utf-8")
        self._file.writelines(line + "\n" for line in kept)
        self._start = time.perf_counter()
        self._progress.start()
        self._task = self._progress.add_task(self.description, total=self.total_steps, metrics="",
                                             completed=min(self.resume_after, self.total_steps))
        return self

    def undo(self) -> bool:
        """Put the log back as `__enter__` found it, for a training refused before its first step:
        an earlier training's log returns to its name. False (and nothing done) once a step is logged."""
        if self.last_step is not None and not self.resume_after:
            return False
        if self.resume_after and self.last_step != self.resume_after:
            return False  # steps of this run are in the log
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.archived is not None:
            self.path.unlink(missing_ok=True)
            self.archived.rename(self.path)
            self.archived = None
        elif not self.resume_after:
            self.path.unlink(missing_ok=True)
        return True

    def log(self, step: int, **metrics: Any) -> dict[str, Any]:
        """Append one step's line (flushed) and advance the bar; returns the record as written."""
        if self._file is None:
            raise RuntimeError("StepLog.log called outside its `with` block")
        if self.last_step is not None and step <= self.last_step:
            raise ValueError(f"step {step} logged after step {self.last_step}; steps must increase within one log")
        record = {
            "step": step,
            "time": datetime.now(UTC).isoformat(timespec="seconds"),
            "elapsed_s": round(time.perf_counter() - self._start, 3),
            **{k: _plain(v) for k, v in metrics.items()},
        }
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()
        self.last_step = step
        self._progress.update(self._task, completed=min(step, self.total_steps), metrics=summary(metrics))
        if self._lines:
            self._console.print(f"{self.description} step {step}/{self.total_steps}  {summary(metrics)}  "
                                f"{record['elapsed_s']:.1f} s", markup=False, highlight=False, soft_wrap=True)
        return record

    def __exit__(self, *exc) -> None:
        if self.last_step is None and self._task is not None:
            self._progress.remove_task(self._task)  # nothing trained: leave no empty bar behind an error
        self._progress.stop()
        if self._file is not None:
            self._file.close()
            self._file = None


def summary(metrics: dict[str, Any]) -> str:
    """The key metrics of a step in one short line: `loss 0.412 reward a=3.2 b=4.1 kl 0.0100`."""
    keys = [k for k in KEY_METRICS if k in metrics] + [k for k in metrics if k not in KEY_METRICS]
    parts = []
    for key in keys[:MAX_SHOWN]:
        value = _plain(metrics[key])
        if isinstance(value, dict):
            shown = " ".join(f"{k}={_fmt(v)}" for k, v in value.items())
        else:
            shown = _fmt(value)
        parts.append(f"{key} {shown}")
    return "  ".join(parts)


def read_log(folder: str | Path) -> list[dict[str, Any]]:
    """The records of `<folder>/train_log.jsonl`, in order."""
    path = Path(folder) / LOG_NAME
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _lines_until(path: Path, step: int) -> list[str]:
    """The log's lines of steps up to `step`; a torn last line (a kill mid-write) is dropped."""
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break
        if record.get("step", step + 1) > step:
            break
        kept.append(line)
    return kept


def _free_name(folder: Path) -> Path:
    n = 1
    while (folder / f"train_log.{n}.jsonl").exists():
        n += 1
    return folder / f"train_log.{n}.jsonl"


def _plain(value: Any) -> Any:
    """A JSON-safe copy of a metric value (tensors and numpy scalars become numbers)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"metric value {value!r} is not a number, string, or list or dict of them")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
