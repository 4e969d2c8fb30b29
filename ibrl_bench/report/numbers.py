"""How every report writes a number with its interval, and the note that says how the intervals
were made: the terminal tables (terminal.py, tables.py), report.html (html.py) and the boards.

    94 [84-98]      a rate in percent (94%, interval 84% to 98%)
    7.4 [6.6-8.0]   a score
    +12 [+4, +20]   a signed difference; a comma between bounds that carry a sign, so that a dash
                    is never read as a minus
    0.62            an estimate without an interval (too little data for one)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: `play` writes no interval and must not load scipy
    from ibrl_bench.stats.intervals import Interval


def format_number(x: float | None, percent: bool = False, signed: bool = False, digits: int | None = None) -> str:
    """A rate in percent without decimals; a score with `digits` decimals (None: 2 below 10, else 1)."""
    if x is None:
        return "n/a"
    if percent:
        x, digits = x * 100, 0
    elif digits is None:
        digits = 1 if abs(x) >= 10 else 2
    text = f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"
    return text.lstrip("+-") if float(text) == 0 else text  # -0.00 would read as a loss


def decimals(values: Iterable[float | None], whole: bool = False) -> int:
    """Decimals that tell numbers apart on the scale of `values`: two when the largest is at most 1
    (a TeleSales reward: 0.50 and 0.53, not 0.5 and 0.5), one up to 10 (Deal-or-NoDeal points:
    7.4), none from 100. With `whole`, values that are all whole numbers get none (points 7, not 7.0)."""
    xs = [abs(v) for v in values if v is not None and math.isfinite(v)]
    if whole and all(float(x).is_integer() for x in xs):
        return 0
    top = max(xs, default=0.0)
    return 2 if top == 0 else min(4, max(0, 2 - math.ceil(math.log10(top))))


def format_interval(iv: Interval | None, percent: bool = False, signed: bool = False, digits: int | None = None,
                    unit: bool = False, stacked: bool = False) -> str:
    """The estimate and its interval in brackets; `unit` writes % after a rate's estimate, `stacked`
    puts the interval on a second line (narrow columns)."""
    if iv is None or iv.estimate is None:
        return "n/a"
    text = format_number(iv.estimate, percent, signed, digits) + ("%" if percent and unit and not signed else "")
    if iv.low is None or iv.high is None:
        return text
    low, high = format_number(iv.low, percent, signed, digits), format_number(iv.high, percent, signed, digits)
    join = ", " if signed or low.startswith("-") or high.startswith("-") else "-"
    return f"{text}{chr(10) if stacked else ' '}[{low}{join}{high}]"


def methods_note(intervals: Iterable[Interval | None], extra: str = "") -> str:
    """The confidence level and methods of these intervals, and the sample size most of them rest on."""
    ivs = [x for x in intervals if x is not None]
    methods = sorted({x.method for x in ivs})
    levels = sorted({f"{x.confidence:.0%}" for x in ivs})
    text = f"{'/'.join(levels) or '95%'} intervals; methods: {'; '.join(methods) or 'none'}"
    sizes = Counter((x.n, x.n_clusters) for x in ivs if x.low is not None)
    if sizes:
        (n, k), _ = sizes.most_common(1)[0]
        text += f"; n = {n} episodes over {k} scenario{'s' if k != 1 else ''}"
        if len(sizes) > 1:
            text += " (fewer where a metric is defined on fewer episodes)"
    return text + (f". {extra}" if extra else "")
