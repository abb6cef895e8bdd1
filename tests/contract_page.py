"""docs/CONTRACT.md read as data: its sections, their markdown tables and their JSON examples.

The page is written for people; the tests read only its tables (a header row, a separator row,
then one row a line) and its fenced ```json blocks, so the prose can change freely while what
the tests compare stays where a reader looks for it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parents[1] / "docs" / "CONTRACT.md"

_HEADING = re.compile(r"^(#{2,3}) (.+)$")
_FENCE = re.compile(r"^```(\w*)$")
#: A table cell's separators: a ``|`` not escaped as ``\|``.
_CELL = re.compile(r"(?<!\\)\|")
_CODE = re.compile(r"`([^`]+)`")


@dataclass(frozen=True, slots=True)
class Section:
    """One ``##`` or ``###`` section: its heading, its tables and its JSON examples."""

    heading: str
    tables: tuple[tuple[dict[str, str], ...], ...]
    examples: tuple[Any, ...]
    text: str


@cache
def sections(path: Path = PAGE) -> dict[str, Section]:
    """Every section of the page by its heading (the ``##`` or ``###`` line's text)."""
    found: dict[str, Section] = {}
    heading = ""
    lines: list[str] = []
    for line in [*path.read_text().splitlines(), "## (end)"]:
        match = _HEADING.match(line)
        if match is None:
            lines.append(line)
            continue
        if heading:
            found[heading] = _section(heading, lines)
        heading, lines = match.group(2), []
    return found


def section(heading: str) -> Section:
    """The section with this heading; KeyError names the headings there are."""
    every = sections()
    if heading not in every:
        raise KeyError(f"docs/CONTRACT.md has no section {heading!r}: {sorted(every)}")
    return every[heading]


def table(heading: str, *columns: str) -> tuple[dict[str, str], ...]:
    """The one table of a section whose header begins with ``columns``."""
    tables = [t for t in section(heading).tables if t and tuple(t[0])[: len(columns)] == columns]
    if len(tables) != 1:
        raise LookupError(f"{heading!r} has {len(tables)} tables headed {columns}")
    return tables[0]


def example(heading: str, type_: str) -> dict[str, Any]:
    """The section's JSON example whose ``type`` is ``type_``."""
    found = [e for e in section(heading).examples if isinstance(e, dict) and e.get("type") == type_]
    if len(found) != 1:
        raise LookupError(f"{heading!r} has {len(found)} JSON examples of type {type_!r}")
    return found[0]


def every_code_span() -> set[str]:
    """The ``code`` spans of the whole page, in its prose and its tables (not its examples)."""
    spans: set[str] = set()
    for found in sections().values():
        spans.update(code_spans(found.text))
        for rows in found.tables:
            spans.update(span for row in rows for cell in row.values() for span in code_spans(cell))
    return spans


def code_spans(cell: str) -> list[str]:
    """The ``code`` spans of a cell (or any text), in order."""
    return _CODE.findall(cell)


def _section(heading: str, lines: list[str]) -> Section:
    tables: list[tuple[dict[str, str], ...]] = []
    examples: list[Any] = []
    prose: list[str] = []
    rows: list[list[str]] = []
    fence: list[str] | None = None
    fence_is_json = False
    for line in [*lines, ""]:
        if fence is not None:
            if line.strip() == "```":
                if fence_is_json:
                    examples.append(json.loads("\n".join(fence)))
                fence = None
            else:
                fence.append(line)
            continue
        if (match := _FENCE.match(line.strip())) is not None:
            fence, fence_is_json = [], match.group(1) == "json"
            continue
        if line.lstrip().startswith("|"):
            rows.append([cell.strip() for cell in _CELL.split(line.strip())[1:-1]])
            continue
        if rows:
            tables.append(_rows(rows))
            rows = []
        prose.append(line)
    return Section(heading, tuple(tables), tuple(examples), "\n".join(prose))


def _rows(rows: list[list[str]]) -> tuple[dict[str, str], ...]:
    """A markdown table's body rows, each a mapping from its column's header to its cell."""
    header, separator, *body = rows
    assert all(set(cell) <= set("-: ") for cell in separator), f"not a table: {header}"
    return tuple(
        dict(zip(header, (c.replace("\\|", "|") for c in row), strict=True)) for row in body
    )
