"""The terminal tables of the analysis commands as CSV or LaTeX (`--format csv|latex`).

The tables are built once, as rich tables (report/tables.py, report/terminal.py); this module reads
them back cell by cell, so an exported table holds exactly the numbers, precision and notes the
terminal shows. Each table keeps its title and the note that names its interval methods: in CSV
as `#` lines around it (pandas.read_csv(..., comment="#") skips them), in LaTeX in the caption.
"""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd
from rich.console import Group
from rich.table import Table
from rich.text import Text

FORMATS = ("table", "csv", "latex")


class Exported(NamedTuple):
    title: str
    frame: pd.DataFrame
    notes: list[str]


def _plain(cell) -> str:
    text = cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain
    return " ".join(text.split())  # a value stacked on two lines is one value


def tables_of(renderable) -> list[Exported]:
    """Each table of a rendered result with its title and the notes printed under it."""
    parts = list(renderable.renderables) if isinstance(renderable, Group) else [renderable]
    headings = {id(p.heading) for p in parts if isinstance(p, Table) and getattr(p, "heading", None) is not None}
    out: list[Exported] = []
    for part in parts:
        if isinstance(part, Table):
            heading = getattr(part, "heading", None)
            title = _plain(heading if heading is not None else part.title or "")
            columns = [_plain(c.header) or f"column {i + 1}" for i, c in enumerate(part.columns)]
            rows = list(zip(*[[_plain(cell) for cell in c._cells] for c in part.columns], strict=True))
            out.append(Exported(title, pd.DataFrame(rows, columns=columns), []))
        elif isinstance(part, Text) and part.plain.strip() and id(part) not in headings and out:
            out[-1].notes.append(_plain(part))
    return out


def to_csv(tables: list[Exported]) -> str:
    blocks = []
    for t in tables:
        lines = [f"# {t.title}"] if t.title else []
        lines.append(t.frame.to_csv(index=False).rstrip("\n"))
        lines += [f"# {note}" for note in t.notes]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


# LaTeX's special characters; to_latex escapes the cells and headers, the caption is ours to escape.
_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
          "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX.get(ch, ch) for ch in text)


def to_latex(tables: list[Exported]) -> str:
    blocks = []
    for t in tables:
        sentences = [x.strip().rstrip(".") + "." for x in [t.title, *t.notes] if x.strip()]
        caption = latex_escape(" ".join(sentences)) or None
        align = "l" + "r" * (len(t.frame.columns) - 1)
        blocks.append(t.frame.to_latex(index=False, escape=True, column_format=align,
                                       caption=(caption, latex_escape(t.title)) if t.title else caption))
    return "\n".join(blocks)


def render(renderable, fmt: str) -> str:
    """A rendered result in `fmt` ("csv" or "latex")."""
    tables = tables_of(renderable)
    return to_csv(tables) if fmt == "csv" else to_latex(tables)


def cell_table(results, title: str, fmt: str) -> str:
    """The cell table of `show` in `fmt`, with its methods note."""
    from ibrl_bench.report.terminal import cells_note, cells_table

    return render(Group(cells_table(results, title=title), Text(cells_note(results))), fmt)
