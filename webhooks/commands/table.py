"""Plain-text tables for the operator commands' summaries.

Ten lines rather than a dependency: the summaries are a handful of rows
of short words and counts.
"""

from __future__ import annotations


def render(headers: list[str], rows: list[list]) -> str:
    cells = [headers, *[[str(value) for value in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])
