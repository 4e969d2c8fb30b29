"""heatmap.png: the matrix of one metric as an image, each cell with its estimate and interval.

matplotlib is imported here only, lazily, with the Agg backend (no display needed), so the rest of
the package never pays for it.
"""

from __future__ import annotations

import math
from pathlib import Path

from ibrl_bench.report.tables import short
from ibrl_bench.stats.intervals import Interval


def _label(value: float, percent: bool) -> str:
    return f"{value * 100:.0f}" if percent else f"{value:.2f}"


def color_span(values: list[float], percent: bool, full_scale: bool = True) -> tuple[float, float]:
    """The values at the two ends of the colour scale. Rates span 0 to 100% by default, so that a
    colour means the same in every report and 72% does not look like a failure because every other
    cell is higher; `full_scale=False` spans the data (in steps of 10 points) to tell high rates apart.
    Scores always span the data."""
    if percent and full_scale:
        return 0.0, 1.0
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if percent:
        lo, hi = math.floor(lo * 10) / 10, math.ceil(hi * 10) / 10
        if hi - lo < 0.1:
            lo, hi = max(0.0, hi - 0.1), max(hi, 0.1)
    elif lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return lo, hi


def render_heatmap(
    path: Path,
    policies: list[str],
    columns: list[tuple[str, str]],
    cells: dict[tuple[str, str, str], Interval],
    *,
    metric_label: str,
    percent: bool,
    title: str,
    note: str,
    full_scale: bool = True,
) -> Path:
    """Draw policies (rows) x (counterpart, role) columns; `cells` maps (policy, counterpart, role)
    to the interval of the metric. The colour span is `color_span`'s, stated by the colour bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    grid = np.full((len(policies), len(columns)), np.nan)
    for i, p in enumerate(policies):
        for j, (c, r) in enumerate(columns):
            iv = cells.get((p, c, r))
            if iv is not None and iv.estimate is not None:
                grid[i, j] = iv.estimate * (100 if percent else 1)
    finite = grid[np.isfinite(grid)] / (100 if percent else 1)
    vmin, vmax = (x * (100 if percent else 1) for x in color_span(finite.tolist(), percent, full_scale))

    width = max(6.0, 1.5 + 1.45 * len(columns))
    height = max(3.0, 1.9 + 0.75 * len(policies))
    fig, ax = plt.subplots(figsize=(width, height), dpi=150, layout="constrained")
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#dddddd")
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    for i, p in enumerate(policies):
        for j, (c, r) in enumerate(columns):
            iv = cells.get((p, c, r))
            if iv is None or iv.estimate is None:
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=8, color="#333333")
                continue
            shade = image.cmap(image.norm(grid[i, j]))
            luminance = 0.2126 * shade[0] + 0.7152 * shade[1] + 0.0722 * shade[2]
            ink = "black" if luminance > 0.5 else "white"
            ax.text(j, i - 0.12, _label(iv.estimate, percent), ha="center", va="center", fontsize=11,
                    fontweight="bold", color=ink)
            if iv.low is not None and iv.high is not None:
                ax.text(j, i + 0.2, f"[{_label(iv.low, percent)}, {_label(iv.high, percent)}]", ha="center",
                        va="center", fontsize=7.5, color=ink)
    ax.set_xticks(range(len(columns)), [f"{short(c)}\nrole {r}" for c, r in columns], fontsize=8.5)
    ax.set_yticks(range(len(policies)), [short(p) for p in policies], fontsize=9)
    ax.set_xlabel("counterpart, and the role the policy played", fontsize=9)
    ax.set_ylabel("policy", fontsize=9)
    ax.tick_params(length=0)
    ax.set_xticks(np.arange(-0.5, len(columns)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(policies)), minor=True)
    ax.grid(which="minor", color="white", linewidth=2)
    for spine in ax.spines.values():
        spine.set_visible(False)
    bar = fig.colorbar(image, ax=ax, shrink=0.9, pad=0.02)
    bar.set_label(metric_label + (" (%)" if percent else ""), fontsize=9)
    ax.set_title(title, fontsize=11, loc="left", fontweight="bold")
    fig.text(0.01, 0.005, note, fontsize=7, color="#555555", ha="left", va="bottom", wrap=True)
    fig.get_layout_engine().set(h_pad=0.25)
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path
