"""What the operator commands print: plain-text tables, or with --json one JSON document.

Ten lines rather than a dependency: the summaries are a handful of rows
of short words and counts. Every list and show command's --json goes
through `add_json` and `print_json`, so scripts read them all alike.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import date, datetime
from typing import Any


def render(headers: list[str], rows: list[list]) -> str:
    cells = [headers, *[[str(value) for value in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def add_json(parser: Any) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document, for scripts")


def _plain(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return str(value)


def print_json(value: object) -> None:
    """`value` (dataclasses, lists, dicts; times as ISO 8601, anything else as its text) on one line."""
    print(json.dumps(value, default=_plain))
