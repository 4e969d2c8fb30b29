"""The one folder where ibrl-bench keeps what it can rebuild: the response cache
(runner/cache.py, `responses.sqlite`) and GGUF conversions (models/loading.py, `gguf/`).

$IBRL_BENCH_CACHE if set, else $XDG_CACHE_HOME/ibrl-bench, else ~/.cache/ibrl-bench. Deleting it
loses nothing but time (and the money of cached replies).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    if os.environ.get("IBRL_BENCH_CACHE"):
        return Path(os.environ["IBRL_BENCH_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ibrl-bench"
