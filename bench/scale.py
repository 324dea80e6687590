"""`python -m bench.scale`: the ledger at millions of events, against an empty one, and retention runs.

For each --events N, a private schema is filled by SQL with N events spread
over the twelve months before now (a ledger row, its payload of
--payload-bytes, a row of the outbox's log each), then:

- bytes per event of each table a delivery leaves rows in;
- events/s: each window's load, --load, on the filled schema and on an empty
  one, alternately, for --seconds, --rounds times: events/s and CPU per event
  as ratios to the empty schema, medians over rounds, and p99. The load is
  `deliveries`, the default: the service under gunicorn (as `python -m
  bench`'s wrk rows serve it) taking signed Stripe payment events over HTTP
  from wrk's --connections, each event a ledger row completed in the window,
  its CPU the web workers' and their server backends', its p99 wrk's. Or it
  is `claims`: --threads connections making the claim statement alone (that
  of a delivery without a handler, webhooks/core/ledger.py), its CPU this
  process's and its backends';
- retention, --repeat times per --schedule and --pause (the rows give
  medians): the oldest month left removed as `prune --pause` does (its payload and
  outbox log partitions detached and dropped, its ledger rows deleted in
  paced batches), while the load goes
  on: its time, the events/s and p99 during it as ratios to the
  window just before, the run's server CPU per ledger row deleted (its
  drops' included), the size of the partitions dropped (measured just
  before), the file system's free-space change over the run (less what
  the load wrote meanwhile), and the heap bytes the
  deleted ledger rows leave for new rows (their count times the table's
  bytes per row; the OS never gets these back). The load writes
  into the same tables, so the tables' size before and after says nothing;
- each run as --schedule says: `monthly`, a month's ledger rows in one
  run (prune run once a month, or catching up a month); `daily`, the run
  on the day the oldest month's partitions go, that month's other days
  having gone in the daily runs before it (deleted and vacuumed before
  the window, as webhooks-prune.timer's runs leave the ledger), so its
  ledger rows are a day's;
- then the VACUUM that follows such a run, paced as this server's
  autovacuum paces its own, while the load goes on: its time, and the
  events/s and p99 during it as ratios to the same window before
  the run. It also leaves the next run a ledger as a month of service
  would, its dead rows gone;
- and, as often, two windows in a row with nothing else running: the idle
  row, the ratios this machine gives when nothing is there to measure.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg_pool import ConnectionPool

from webhooks.commands import prune
from webhooks.commands.sending import positive_int
from webhooks.core import ledger, partitions
from webhooks.core.events import Event
from webhooks.traffic import samples
from webhooks.traffic.report import markdown_table

from . import cpu, servers, wrk
from .run import DOUBLE_FULFILMENTS, LOCAL_SERVER, SECRET

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
# Deliveries/s a window of known length signs for at least: more than two cores serve.
_LEAST_RATE = 3000.0
# The whole months a fill spans before this one.
_FILLED_MONTHS = 12
# How often prune runs: a month's ledger rows in one run, or a day's (webhooks-prune.timer).
_SCHEDULES = ("monthly", "daily")
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


def _do(work):
    """`work()`'s result, or None after sleeping `work` seconds where it is a number: a window's work."""
    return time.sleep(work) if isinstance(work, int | float) else work()


def _oldest_month_end(conn: psycopg.Connection) -> datetime:
    """The end of the oldest month whose partitions are left: the cut-off of the next retention run."""
    return partitions.months(conn)[0].end


@dataclass
class Window:
    """Events (claims, or deliveries completed) during one window of time."""

    events: int
    seconds: float
    cpu_s: float
    p99_ms: float

    @property
    def per_s(self) -> float:
        return self.events / self.seconds

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / max(self.events, 1) * 1e6


class Claims:
    """--threads connections claiming new events until stopped, each a claim statement alone (no HTTP,
    no handler); a Window of what they did."""

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
        result = _do(work)
        closed = time.perf_counter()
        used = cpu.own_seconds() + cpu.seconds(backends) - cpu_before
        stop.set()
        for thread in threads:
            thread.join()
        latencies = sorted(took for done in per_thread for at, took in done if opened <= at <= closed)
        p99 = latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan")
        return Window(len(latencies), closed - opened, used, p99), result


# The ledger rows of one window's deliveries, found by the time index.
_COMPLETED_BETWEEN = """
SELECT count(*) FROM webhook_events WHERE received_at >= %s AND received_at < %s AND status = 'completed'
"""


class Deliveries:
    """The service under gunicorn (as `python -m bench`'s wrk rows serve it) taking signed Stripe
    payment events over HTTP from wrk's --connections, until stopped; a Window of the events its
    ledger completed, the CPU of its workers and their server backends, and wrk's p99."""

    def __init__(self, url: str, connections: int, work_s: float, workdir: Path):
        self.name = f"bench-scale-{uuid.uuid4().hex[:8]}"
        self.url, self.connections, self.work_s = url, connections, work_s
        self.requests = workdir / f"{self.name}.requests"
        self.non_2xx = 0
        self._served = contextlib.ExitStack()
        env = {
            "DATABASE_URL": make_conninfo(url, application_name=self.name),
            "STRIPE_WEBHOOK_SECRET": SECRET,
            **servers.side_ports(),  # the empty schema's service and the filled one's side by side
        }
        self.base, self.pid, _ = self._served.enter_context(
            servers.gunicorn("wsgi:app", env, workdir / f"{self.name}.log")
        )
        # Made once, signed before each window; those a window did not send are the next one's.
        self._events: list[dict] = []
        # The fastest window's rate: a short one (a small VACUUM's) starts slow, and would sign too few.
        self.fastest = 0.0
        self.during(_WARM_UP_S)

    def close(self) -> None:
        """Stops the service, once its ledger is checked: a payment fulfilled twice fails the bench."""
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                doubled = conn.execute(DOUBLE_FULFILMENTS).fetchone()[0]
            if doubled:
                raise SystemExit(f"bench.scale: {doubled} payments fulfilled twice")
            if self.non_2xx:
                print(f"[scale] {self.non_2xx:,} deliveries answered other than 2xx", file=sys.stderr)
        finally:
            self._served.close()

    def _sign(self, work) -> int:
        """Events for twice the window `work` makes, signed now; how many. A work (a retention run, a
        VACUUM) is signed for --work-seconds at the fastest rate yet, a window of known length for
        at least _LEAST_RATE."""
        if isinstance(work, int | float):
            count = int(max(self.fastest, _LEAST_RATE) * work * 2)
        else:
            count = int(self.fastest * self.work_s * 2)
        if len(self._events) < count:
            self._events.extend(samples.payment_stream(count - len(self._events)))
        wrk.write_requests(self.requests, self.base, SECRET, self._events[:count], duplicates=1)
        return count

    def during(self, work) -> tuple[Window, object]:
        """Deliveries while `work()` runs (or for `work` seconds, a number); the window and work's result.

        A work's events are signed for --work-seconds: a longer one fails, rather than replay."""
        signed = self._sign(work)
        workers = [self.pid, *cpu.children(self.pid)]
        backends = cpu.backends(self.url, self.name)
        with psycopg.connect(self.url, autocommit=True) as conn:
            cpu_before = cpu.seconds(workers) + cpu.seconds(backends)
            sending = wrk.Running(self.base, self.requests, self.connections)
            try:
                opened = conn.execute("SELECT clock_timestamp()").fetchone()[0]
                result = _do(work)
                closed = conn.execute("SELECT clock_timestamp()").fetchone()[0]
            finally:
                run = sending.stop()
            used = cpu.seconds(workers) + cpu.seconds(backends) - cpu_before
            completed = conn.execute(_COMPLETED_BETWEEN, [opened, closed]).fetchone()[0]
        if run.sent > signed:
            raise SystemExit(
                f"bench.scale: a window of {run.seconds:.0f} s outran the {signed:,} events signed for it"
                f" (--work-seconds {self.work_s:g} for a retention run or a VACUUM): raise --work-seconds"
            )
        # Sent, or in flight when wrk stopped: never sent again.
        del self._events[: run.sent + self.connections]
        self.non_2xx += run.non_2xx
        seconds = (closed - opened).total_seconds()
        self.fastest = max(self.fastest, completed / seconds)
        return Window(completed, seconds, used, run.p99_ms), result


Load = Claims | Deliveries


def load(args: argparse.Namespace, url: str, workdir: Path) -> Load:
    """What the windows measure on `url`, as --load names it."""
    if args.load == "claims":
        return Claims(url, args.threads, "x" * args.payload_bytes)
    return Deliveries(url, args.connections, args.work_seconds, workdir)


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


def _free_bytes(directory: str | None) -> int | None:
    """Free bytes of the file system that holds `directory`, the server's data; None when it is not
    readable from here."""
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
    # The file system's free space after the run less before it (NaN where not readable from here):
    # the partitions' blocks back, less what the load wrote meanwhile.
    returned_bytes: float


def _row_bytes(conn: psycopg.Connection, table: str) -> float:
    size, rows = conn.execute(_HEAP, [table]).fetchone()
    return size / max(rows, 1)


def retention(url: str, pause: float, batch: int) -> Removed:
    """The oldest month removed as prune does, paced as `prune --pause`."""
    name = f"bench-scale-retention-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True, application_name=name) as conn:
        cutoff = _oldest_month_end(conn)
        dropping = partitions.expired(conn, cutoff)
        dropped = sum(conn.execute(_PARTITION_BYTES, [month.name]).fetchone()[0] for month in dropping)
        per_row = _row_bytes(conn, _REUSED)
        backend, directory = cpu.backends(url, name), _data_directory(url)
        free_before, cpu_before, started = _free_bytes(directory), cpu.seconds(backend), time.perf_counter()
        prune.drop_months(conn, cutoff)
        deleted = prune.delete_older_than(conn, cutoff, batch, pace=prune.Pace(pause))
        took = time.perf_counter() - started
        server_cpu = cpu.seconds(backend) - cpu_before if backend else math.nan
        free_after = _free_bytes(directory)
    returned = math.nan if free_before is None or free_after is None else free_after - free_before
    return Removed(took, deleted, dropped, round(deleted[_REUSED] * per_row), server_cpu, returned)


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


def _days_before(url: str, batch: int) -> None:
    """The oldest month's ledger rows deleted but its last day's, then vacuumed, outside any window:
    the ledger as a daily prune leaves it the day before that month's partitions go."""
    with psycopg.connect(url, autocommit=True) as conn:
        prune.delete_older_than(conn, _oldest_month_end(conn) - timedelta(days=1), batch)
    vacuum(url)


def _remove(args: argparse.Namespace, load: Load, url: str, pause: float, schedule: str) -> dict[str, float]:
    """The oldest month removed while `load` goes on, on `schedule`, then the VACUUM after it: what
    they cost."""
    if schedule == "daily":
        _days_before(url, args.batch_size)
    before, _ = load.during(args.seconds)
    during, removed = load.during(lambda: retention(url, pause, args.batch_size))
    vacuuming, vacuum_s = load.during(lambda: vacuum(url))
    return {
        **_against(before, during),
        "seconds": removed.seconds,
        "deleted": removed.deleted[_REUSED],
        "cpu_us_per_row": removed.server_cpu_s / max(removed.deleted[_REUSED], 1) * 1e6,
        "dropped": removed.dropped_bytes,
        "returned": removed.returned_bytes,
        "reusable": removed.reusable_bytes,
        "vacuum_s": vacuum_s,
        **{f"vacuum_{key}": value for key, value in _against(before, vacuuming).items()},
    }


def _idle(args: argparse.Namespace, load: Load) -> dict[str, float]:
    """Two windows in a row with nothing else running: the ratios that are the machine's own noise."""
    before, _ = load.during(args.seconds)
    during, _ = load.during(args.seconds)
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
    args: argparse.Namespace, empty: str, filled: str, events: int, workdir: Path
) -> tuple[list[str], list[list[str]]]:
    """The events table's row for `events`, and the retention table's rows, one per --schedule and
    --pause."""
    took = fill(filled, events, args.payload_bytes)
    print(f"[scale] {events:,} events filled in {took:.0f} s", file=sys.stderr)
    bytes_by_table = sizes(filled)
    # Each closed however the other's close or the windows end: a service left running outlives the bench.
    with contextlib.ExitStack() as loads:
        on_empty = loads.enter_context(contextlib.closing(load(args, empty, workdir)))
        on_filled = loads.enter_context(contextlib.closing(load(args, filled, workdir)))
        rounds = []
        for _ in range(args.rounds):
            rounds.append((on_empty.during(args.seconds)[0], on_filled.during(args.seconds)[0]))
        removals = [_retention_row(events, "idle", [_idle(args, on_filled) for _ in range(args.repeat)])]
        # Each run its own month: the oldest for the first, the next for the second, and so on.
        for schedule in args.schedule:
            for pause in args.pause:
                runs = [_remove(args, on_filled, filled, pause, schedule) for _ in range(args.repeat)]
                removals.append(_retention_row(events, f"{pause:g}, {schedule}", runs))
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


EVENTS_HEADER = [
    "events",
    "B/event webhook_events",
    "webhook_payloads",
    "pgqueuer_log",
    "total",
    "events/s vs empty",
    "CPU/event vs empty",
    "p99 ms empty / filled",
]
RETENTION_HEADER = [
    "events",
    "pause, schedule",
    "runs",
    "retention run s",
    "ledger rows deleted",
    "server CPU µs per row deleted",
    "events/s during vs before",
    "p99 ms before → during",
    "MiB of months dropped (payloads + log)",
    "MiB back to the OS (free space)",
    "≈ MiB freed for reuse (ledger)",
    "VACUUM after s",
    "events/s during VACUUM vs before",
    "p99 ms during VACUUM (vs before)",
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--payload-bytes", type=int, default=1670)
    parser.add_argument(
        "--load",
        choices=["deliveries", "claims"],
        default="deliveries",
        help="what each window measures: signed Stripe deliveries over HTTP to the service (gunicorn,"
        " sent by wrk), or the claim statement alone on --threads connections (default %(default)s)",
    )
    parser.add_argument("--connections", type=positive_int, default=16, help="wrk's, for --load deliveries")
    parser.add_argument(
        "--work-seconds",
        type=positive_int,
        default=60,
        help="the longest retention run or VACUUM that --load deliveries signs events for; one that"
        " outruns them stops the bench (default %(default)s)",
    )
    parser.add_argument("--threads", type=positive_int, default=4, help="claiming, for --load claims")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each window")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--pause",
        type=prune.pause,
        nargs="+",
        default=[prune.DEFAULT_PAUSE],
        help="prune's --pause for each retention run, each removing the next-oldest month "
        f"(default %(default)s; at most {_FILLED_MONTHS} runs in all, with --schedule and --repeat)",
    )
    parser.add_argument(
        "--schedule",
        choices=_SCHEDULES,
        nargs="+",
        default=list(_SCHEDULES),
        help="monthly: each run deletes a month of ledger rows; daily: each run is the one on the day"
        " a month's partitions go, a day of ledger rows left to it (default: both)",
    )
    parser.add_argument(
        "--repeat",
        type=positive_int,
        default=1,
        help="retention runs per --schedule and --pause, each removing the next month; the rows give their"
        " medians, and an idle row as many pairs of windows with nothing else running (default %(default)s)",
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
    if len(args.schedule) * len(args.pause) * args.repeat > _FILLED_MONTHS:
        print(
            f"error: at most {_FILLED_MONTHS} retention runs (--schedule values times --pause values"
            " times --repeat), one month each",
            file=sys.stderr,
        )
        return 2
    if args.load == "deliveries" and shutil.which("wrk") is None:
        print("error: --load deliveries sends with wrk, not installed here (Debian: wrk)", file=sys.stderr)
        return 2
    claims, removals = [], []
    with servers.private_schema(args.database_url) as empty, tempfile.TemporaryDirectory() as workdir:
        for events in args.events:
            with servers.private_schema(args.database_url) as filled:
                row, removed = measure(args, empty, filled, events, Path(workdir))
            claims.append(row)
            removals.extend(removed)
            print(" | ".join(row), *(" | ".join(r) for r in removed), sep="\n", file=sys.stderr)
    print(markdown_table(EVENTS_HEADER, claims))
    print()
    print(markdown_table(RETENTION_HEADER, removals))
    events = (
        f"{args.connections} wrk connections delivering signed Stripe payment events over HTTP to the"
        " service under gunicorn, each event a ledger row completed in the window"
        if args.load == "deliveries"
        else f"{args.threads} connections claiming, each event a claim statement alone"
    )
    print(
        f"\n{events}; {args.seconds:g} s windows, medians of {args.rounds} rounds;"
        f" filled with payloads of {args.payload_bytes} B; retention: the oldest month left, in batches of"
        f" {args.batch_size}, paced by each --pause in turn on each --schedule, the window before it the"
        f" baseline, medians of {args.repeat} run(s) each; idle: a window with nothing else running"
        " against the one before it;"
        f" {data_mount(args.database_url)}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
