"""What `loadtest` (and the benchmarks) print: percentiles and Markdown tables of a run."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .sender import Result


def percentile(sorted_values: list[float], pct: float) -> float:
    if len(sorted_values) < 2:
        return sorted_values[0] if sorted_values else float("nan")
    return statistics.quantiles(sorted_values, n=100, method="inclusive")[int(pct) - 1]


def markdown_table(headers: list[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [headers, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def latency_table(result: Result) -> str:
    labels = sorted({label for label, _ in result.attempts})
    rows = []
    for label in [*labels, None]:
        ms = result.latencies_ms(label)
        rows.append(
            [label or "all", len(ms)]
            + [f"{percentile(ms, p):.1f}" for p in (50, 95, 99)]
            + [f"{ms[-1]:.1f}" if ms else "-"]
        )
    return markdown_table(["answer", "attempts", "p50 ms", "p95 ms", "p99 ms", "max ms"], rows)


def throughput_table(result: Result, concurrency: int) -> str:
    rows: list[list[object]] = [
        ["unique events", result.events],
        ["deliveries", result.deliveries],
        ["HTTP attempts (with retries)", len(result.attempts)],
        ["deliveries without a 2xx", result.dropped],
        ["concurrency", concurrency],
        ["elapsed s", f"{result.elapsed_s:.2f}"],
        ["deliveries/s", f"{result.deliveries_per_s:.1f}"],
        ["unique events/s", f"{result.events_per_s:.1f}"],
    ]
    return markdown_table(["measure", "value"], rows)
