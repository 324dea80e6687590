"""`python -m bench.scale`: the ledger at millions of events, against an empty one, and retention runs.

For each --events N, a private schema is filled by SQL with N events spread
over the twelve months before now (a ledger row, its payload of
--payload-bytes, a row of the outbox's log each), then:

- bytes per event of each table a delivery leaves rows in;
- claims: --threads connections claiming new events (the claim statement a
  delivery without a handler makes, webhooks/core/ledger.py) for --seconds,
  in the filled schema and in an empty one, alternately, --rounds times:
  events/s and CPU per claim (this process and its server backends) as
  ratios to the empty schema, medians over rounds, and p99;
- retention, --repeat times per --pause (the rows give medians): the
  oldest month left removed as `prune --pause` does (its payload and
  outbox log partitions detached and dropped, its ledger rows deleted in
  paced batches), while the claims go
  on: its time, the claims' events/s and p99 during it as ratios to the
  window just before, the run's server CPU per ledger row deleted (its
  drops' included), the size of the partitions dropped (measured just
  before), the file system's free-space change, and the heap bytes the
  deleted ledger rows leave for new rows (their count times the table's
  bytes per row; the OS never gets these back). Concurrent claims write
  into the same tables, so the tables' size before and after says nothing;
- then the VACUUM that follows such a run, paced as this server's
  autovacuum paces its own, while the claims go on: its time, and the
  claims' events/s and p99 during it as ratios to the same window before
  the run. It also leaves the next run a ledger as a month of service
  would, its dead rows gone;
- and, as often, two windows in a row with nothing else running: the idle
  row, the ratios this machine gives when nothing is there to measure.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from psycopg_pool import ConnectionPool

from webhooks.commands import prune
from webhooks.commands.sending import positive_int
from webhooks.core import ledger, partitions
from webhooks.core.events import Event
from webhooks.traffic.report import markdown_table

from . import cpu, servers
from .run import LOCAL_SERVER

_FILL = """
WITH claimed AS (
    INSERT INTO webhook_events
        (provider, event_id, event_type, account, status, outcome, response_status,
         response_body, received_at, completed_at)
    SELECT 'stripe', 'evt_fill_' || g, 'payment_intent.succeeded', '', 'completed', 'fulfilled', 200,
           webhooks_answer_body('evt_fill_' || g, 'fulfilled'), at, at
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
         LATERAL (SELECT %(start)s::timestamptz + (%(span)s::interval / %(events)s) * g AS at) t
    RETURNING id, event_id, received_at
),
logged AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority, created, aggregated)
    SELECT id, 'successful', 'fulfil', 0, received_at, true FROM claimed
)
INSERT INTO webhook_payloads (ledger_id, received_at, payload)
SELECT id, received_at, rpad('{"id":"' || event_id || '","object":"event","data":{"object":{}},"pad":"',
                             %(bytes)s - 2, md5(event_id)) || '"}'
FROM claimed
"""
# Filled in slices, so that no one statement holds gigabytes of WAL.
_SLICE = 500_000
_WARM_UP_S = 1.0
# The whole months a fill spans before this one.
_FILLED_MONTHS = 12
_PARTITION_BYTES = "SELECT pg_total_relation_size(to_regclass(%s))"
_HEAP = "SELECT pg_relation_size(oid), reltuples FROM pg_class WHERE oid = to_regclass(%s)"
# The table retention deletes from row by row, whose space stays its own for new rows.
_REUSED = "webhook_events"
# The tables a delivery leaves rows in; a partitioned one's bytes are its months'.
_TABLES = ("webhook_events", *partitions.TABLES)
_TABLE_BYTES = """
SELECT coalesce(sum(pg_total_relation_size(relid)), pg_total_relation_size(%(table)s::regclass))
FROM pg_partition_tree(%(table)s::regclass)
"""


@dataclass
class Window:
    """Claims made during one window of time."""

    claims: int
    seconds: float
    cpu_s: float
    p99_ms: float

    @property
    def per_s(self) -> float:
        return self.claims / self.seconds

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / max(self.claims, 1) * 1e6


class Claims:
    """--threads connections claiming new events until stopped; a Window of what they did."""

    def __init__(self, url: str, threads: int, payload: str):
        self.name = f"bench-scale-{uuid.uuid4().hex[:8]}"
        self.url, self.threads, self.payload = url, threads, payload
        self.pool = ConnectionPool(
            url,
            min_size=threads,
            max_size=threads,
            kwargs={"autocommit": True, "application_name": self.name},
            open=True,
        )
        self.pool.wait()

    def close(self) -> None:
        self.pool.close()

    def _event(self) -> Event:
        event_id = f"evt_{uuid.uuid4().hex}"
        return Event(event_id, "customer.updated", datetime.now(UTC), False, None, self.payload, {})

    def _claim(self, stop: threading.Event, done: list[tuple[float, float]]) -> None:
        while not stop.is_set():
            event = self._event()
            stored = ledger.Stored(200, f'{{"event_id":"{event.id}","outcome":"ignored"}}')
            started = time.perf_counter()
            with self.pool.connection() as conn:
                ledger.claim(conn, "stripe", event, completed=("ignored", stored))
            ended = time.perf_counter()
            done.append((ended, ended - started))

    def during(self, work) -> tuple[Window, object]:
        """Claims while `work()` runs (or for `work` seconds, a number); the window and work's result.

        The threads are claiming before the window opens, so it holds claims at their steady pace only.
        """
        stop, per_thread = threading.Event(), [[] for _ in range(self.threads)]
        threads = [threading.Thread(target=self._claim, args=(stop, done)) for done in per_thread]
        for thread in threads:
            thread.start()
        time.sleep(_WARM_UP_S)
        backends = cpu.backends(self.url, self.name)
        cpu_before = cpu.own_seconds() + cpu.seconds(backends)
        opened = time.perf_counter()
        result = time.sleep(work) if isinstance(work, int | float) else work()
        closed = time.perf_counter()
        used = cpu.own_seconds() + cpu.seconds(backends) - cpu_before
        stop.set()
        for thread in threads:
            thread.join()
        latencies = sorted(took for done in per_thread for at, took in done if opened <= at <= closed)
        p99 = latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan")
        return Window(len(latencies), closed - opened, used, p99), result


def fill(url: str, events: int, payload_bytes: int) -> float:
    """N events over the twelve whole months before this one and this one so far; seconds taken."""
    started = time.perf_counter()
    now = datetime.now(UTC)
    start = partitions.first_of(now).replace(year=now.year - 1)
    with psycopg.connect(url, autocommit=True) as conn:
        partitions.make(conn, start)
        for first in range(1, events + 1, _SLICE):
            conn.execute(
                _FILL,
                {
                    "first": first,
                    "last": min(first + _SLICE - 1, events),
                    "start": start,
                    "span": now - start,
                    "events": events,
                    "bytes": payload_bytes,
                },
            )
        conn.execute("VACUUM ANALYZE webhook_events, webhook_payloads, pgqueuer_log")
        try:
            conn.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            print("[scale] no CHECKPOINT: the first windows may pay for the fill", file=sys.stderr)
    return time.perf_counter() - started


def sizes(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {table: conn.execute(_TABLE_BYTES, {"table": table}).fetchone()[0] for table in _TABLES}


def _data_directory(url: str) -> str | None:
    """The server's data directory, where this machine can read it; else None."""
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            directory = conn.execute("SHOW data_directory").fetchone()[0]
        except psycopg.Error:
            return None
    return directory if os.path.isdir(directory) else None


def _free_bytes(url: str) -> int | None:
    """Free bytes of the file system that holds the server's data; None when not readable from here."""
    directory = _data_directory(url)
    if directory is None:
        return None
    found = os.statvfs(directory)
    return found.f_bavail * found.f_frsize


def data_mount(url: str, mounts: str = "/proc/self/mounts") -> str:
    """The file system under the server's data, and whether it discards freed blocks as they are
    freed (mount option `discard`): then a month's DROP TABLE holds up commits while its blocks
    are discarded (docs/operating.md, Retention)."""
    directory = _data_directory(url)
    if directory is None:
        return "the server's data not readable from here"
    table = [line.split() for line in Path(mounts).read_text().splitlines()]
    under = [
        (point, kind, options)
        for _, point, kind, options, *_ in table
        if Path(directory).is_relative_to(point)
    ]
    point, kind, options = max(under, key=lambda mount: len(mount[0]))
    discards = "discard" in options.split(",")
    return f"the server's data on {kind} at {point}, {'with' if discards else 'without'} `discard`"


@dataclass
class Removed:
    """One retention run, and what it gave back."""

    seconds: float
    deleted: dict[str, int]
    # The partitions' size (payloads and log), just before they were dropped: space the OS gets back.
    dropped_bytes: int
    # The deleted ledger rows' share of its heap: space for new rows, not the OS's.
    reusable_bytes: int
    # CPU of the run's server process; NaN when the server is on another host.
    server_cpu_s: float


def _row_bytes(conn: psycopg.Connection, table: str) -> float:
    size, rows = conn.execute(_HEAP, [table]).fetchone()
    return size / max(rows, 1)


def retention(url: str, pause: float, batch: int) -> Removed:
    """The oldest month removed as prune does, paced as `prune --pause`."""
    name = f"bench-scale-retention-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True, application_name=name) as conn:
        cutoff = partitions.months(conn)[0].end
        dropping = partitions.expired(conn, cutoff)
        dropped = sum(conn.execute(_PARTITION_BYTES, [month.name]).fetchone()[0] for month in dropping)
        per_row = _row_bytes(conn, _REUSED)
        backend = cpu.backends(url, name)
        cpu_before, started = cpu.seconds(backend), time.perf_counter()
        prune.drop_months(conn, cutoff)
        deleted = prune.delete_older_than(conn, cutoff, batch, pace=prune.Pace(pause))
        took = time.perf_counter() - started
        server_cpu = cpu.seconds(backend) - cpu_before if backend else math.nan
    return Removed(took, deleted, dropped, round(deleted[_REUSED] * per_row), server_cpu)


# This server's autovacuum pace, for a VACUUM run by hand.
_AS_AUTOVACUUM = """
SELECT set_config('vacuum_cost_delay', current_setting('autovacuum_vacuum_cost_delay'), false),
       set_config('vacuum_cost_limit', CASE current_setting('autovacuum_vacuum_cost_limit')
                  WHEN '-1' THEN current_setting('vacuum_cost_limit')
                  ELSE current_setting('autovacuum_vacuum_cost_limit') END, false)
"""


def vacuum(url: str) -> float:
    """The ledger vacuumed as autovacuum would: seconds taken."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_AS_AUTOVACUUM)
        started = time.perf_counter()
        conn.execute(f"VACUUM {_REUSED}")
        return time.perf_counter() - started


def _times(ratio: float) -> str:
    return f"{ratio:.2f}×"


def _mib(count: float) -> str:
    return f"{count / 2**20:,.2f}"


def _remove(args: argparse.Namespace, claims: Claims, url: str, pause: float) -> dict[str, float]:
    """The oldest month removed while `claims` go on, then the VACUUM after it: what they cost."""
    before, _ = claims.during(args.seconds)
    free_before = _free_bytes(url)
    during, removed = claims.during(lambda: retention(url, pause, args.batch_size))
    time.sleep(1)  # the unlinked files' blocks freed
    free_after = _free_bytes(url)
    vacuuming, vacuum_s = claims.during(lambda: vacuum(url))
    returned = math.nan if free_before is None or free_after is None else free_after - free_before
    return {
        **_against(before, during),
        "seconds": removed.seconds,
        "deleted": removed.deleted[_REUSED],
        "cpu_us_per_row": removed.server_cpu_s / max(removed.deleted[_REUSED], 1) * 1e6,
        "dropped": removed.dropped_bytes,
        "returned": returned,
        "reusable": removed.reusable_bytes,
        "vacuum_s": vacuum_s,
        **{f"vacuum_{key}": value for key, value in _against(before, vacuuming).items()},
    }


def _idle(args: argparse.Namespace, claims: Claims) -> dict[str, float]:
    """Two windows in a row with nothing else running: the ratios that are the machine's own noise."""
    before, _ = claims.during(args.seconds)
    during, _ = claims.during(args.seconds)
    return {**_against(before, during), "seconds": during.seconds}


def _against(before: Window, during: Window) -> dict[str, float]:
    return {
        "per_s": during.per_s / before.per_s,
        "p99_before": before.p99_ms,
        "p99": during.p99_ms,
        "p99_ratio": during.p99_ms / before.p99_ms,
    }


def _retention_row(events: int, label: str, runs: list[dict[str, float]]) -> list[str]:
    """One row of medians over `runs`; a dash where the runs measured no such thing."""
    median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}

    def cell(key: str, shown) -> str:
        return shown(median[key]) if key in median else "—"

    return [
        f"{events:,}",
        label,
        str(len(runs)),
        cell("seconds", lambda v: f"{v:.1f}"),
        cell("deleted", lambda v: f"{v:,.0f}"),
        cell("cpu_us_per_row", lambda v: "n/a" if math.isnan(v) else f"{v:.2f}"),
        cell("per_s", _times),
        f"{median['p99_before']:.1f} → {median['p99']:.1f} ({_times(median['p99_ratio'])})",
        cell("dropped", _mib),
        cell("returned", lambda v: "n/a" if math.isnan(v) else _mib(v)),
        cell("reusable", _mib),
        cell("vacuum_s", lambda v: f"{v:.1f}"),
        cell("vacuum_per_s", _times),
        cell("vacuum_p99_ratio", lambda v: f"{median['vacuum_p99']:.1f} ({_times(v)})"),
    ]


def measure(
    args: argparse.Namespace, empty: str, filled: str, events: int
) -> tuple[list[str], list[list[str]]]:
    """The claims table's row for `events`, and the retention table's rows, one per --pause."""
    took = fill(filled, events, args.payload_bytes)
    print(f"[scale] {events:,} events filled in {took:.0f} s", file=sys.stderr)
    bytes_by_table = sizes(filled)
    payload = "x" * args.payload_bytes
    on_empty, on_filled = Claims(empty, args.threads, payload), Claims(filled, args.threads, payload)
    try:
        rounds = []
        for _ in range(args.rounds):
            rounds.append((on_empty.during(args.seconds)[0], on_filled.during(args.seconds)[0]))
        removals = [_retention_row(events, "idle", [_idle(args, on_filled) for _ in range(args.repeat)])]
        # Each run its own month: the oldest for the first, the next for the second, and so on.
        for pause in args.pause:
            runs = [_remove(args, on_filled, filled, pause) for _ in range(args.repeat)]
            removals.append(_retention_row(events, f"{pause:g}", runs))
    finally:
        on_empty.close()
        on_filled.close()
    per_s = statistics.median(f.per_s / e.per_s for e, f in rounds)
    cpu_ratio = statistics.median(f.cpu_us / e.cpu_us for e, f in rounds)
    p99_empty = statistics.median(e.p99_ms for e, _ in rounds)
    p99_filled = statistics.median(f.p99_ms for _, f in rounds)
    claims = [
        f"{events:,}",
        *(f"{bytes_by_table[t] / events:,.0f}" for t in _TABLES),
        f"{sum(bytes_by_table.values()) / events:,.0f}",
        _times(per_s),
        _times(cpu_ratio),
        f"{p99_empty:.1f} / {p99_filled:.1f}",
    ]
    return claims, removals


CLAIMS_HEADER = [
    "events",
    "B/event webhook_events",
    "webhook_payloads",
    "pgqueuer_log",
    "total",
    "claims/s vs empty",
    "CPU/claim vs empty",
    "p99 ms empty / filled",
]
RETENTION_HEADER = [
    "events",
    "pause",
    "runs",
    "retention run s",
    "ledger rows deleted",
    "server CPU µs per row deleted",
    "claims/s during vs before",
    "p99 ms before → during",
    "MiB of months dropped (payloads + log)",
    "MiB back to the OS (free space)",
    "≈ MiB freed for reuse (ledger)",
    "VACUUM after s",
    "claims/s during VACUUM vs before",
    "p99 ms during VACUUM (vs before)",
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--payload-bytes", type=int, default=1670)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each claims window")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--pause",
        type=prune.pause,
        nargs="+",
        default=[prune.DEFAULT_PAUSE],
        help="prune's --pause for each retention run, each removing the next-oldest month "
        f"(default %(default)s; at most {_FILLED_MONTHS} runs in all, with --repeat)",
    )
    parser.add_argument(
        "--repeat",
        type=positive_int,
        default=1,
        help="retention runs per --pause, each removing the next month; the rows give their medians, "
        "and an idle row as many pairs of windows with nothing else running (default %(default)s)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=prune.DEFAULT_BATCH,
        help="prune's --batch-size (default %(default)s)",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or LOCAL_SERVER,
        help="server to create private schemas on (default: $DATABASE_URL or %(default)s)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if len(args.pause) * args.repeat > _FILLED_MONTHS:
        print(
            f"error: at most {_FILLED_MONTHS} retention runs (--pause values times --repeat), one month each",
            file=sys.stderr,
        )
        return 2
    claims, removals = [], []
    with servers.private_schema(args.database_url) as empty:
        for events in args.events:
            with servers.private_schema(args.database_url) as filled:
                row, removed = measure(args, empty, filled, events)
            claims.append(row)
            removals.extend(removed)
            print(" | ".join(row), *(" | ".join(r) for r in removed), sep="\n", file=sys.stderr)
    print(markdown_table(CLAIMS_HEADER, claims))
    print()
    print(markdown_table(RETENTION_HEADER, removals))
    print(
        f"\n{args.threads} connections claiming, {args.seconds:g} s windows, medians of {args.rounds} rounds;"
        f" payloads of {args.payload_bytes} B; retention: the oldest month left, in batches of"
        f" {args.batch_size}, paced by each --pause in turn, the claims' window before it the baseline,"
        f" medians of {args.repeat} run(s) each; idle: a window with nothing else running against the one"
        " before it;"
        f" {data_mount(args.database_url)}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
