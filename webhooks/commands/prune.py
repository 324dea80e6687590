"""`python -m webhooks prune`: forget old payloads, keep the fulfilments.

Deleting a ledger row re-opens its event id to a claim. That is safe once
Stripe has stopped retrying (3 days), and even then a late duplicate of a
paid event meets the unique index on fulfilments.payment_id and is answered
`already_fulfilled`: fulfilments are never pruned, they are the backstop.

Payloads and the outbox's log go by the month: a month's partition of
webhook_payloads or pgqueuer_log is detached and dropped once all of it is
older than the window, which gives its space back to the OS at once
(webhooks/core/partitions.py). A payload or a log row can so outlive its
ledger row by up to a month. The rest (ledger rows, failures) is deleted in
batches along its time index.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg import sql

from webhooks.core import partitions
from webhooks.core.redaction import REDACTED, redact  # noqa: F401  (REDACTED: part of this module's API)
from webhooks.infra import db
from webhooks.infra.config import Settings
from webhooks.infra.db import connect

from . import durations, progress, sending

# Stripe retries a failed delivery for up to three days.
PROVIDER_RETRY_HORIZON = timedelta(days=3)

# Each DELETE is one batch in its own (autocommit) transaction, so a long
# prune never holds locks on more than `batch` rows at a time. A batch is a
# range of the table's time index: from where the last one stopped
# (`after`, exclusive) to the time of the batch-th row after it (`upto`,
# found by reading the index alone), or to the cut-off when fewer are left.
# Rows a batch passed over (a claim still processing) are not read again,
# and no batch reads past the cut-off, so a run reads what it deletes and
# no more. The DELETE reads the range itself, in one pass: finding the rows
# first and deleting them by their place (ctid) read each of them twice,
# and a lock on each first wrote each once more, for rows that nothing else
# writes once completed. Rows that share `upto`'s time go in the same
# batch, so each batch moves `after` on.
_KEYSET_DELETE = """
WITH bound AS (
    SELECT (SELECT {at} FROM {table} WHERE {at} > %(after)s AND {at} < %(cutoff)s
            ORDER BY {at} OFFSET %(batch)s - 1 LIMIT 1) AS upto),
gone AS (
    DELETE FROM {table}
    WHERE {at} > %(after)s AND {at} < %(cutoff)s
      AND {at} <= coalesce((SELECT upto FROM bound), %(cutoff)s) {keep}
    RETURNING 1)
SELECT (SELECT upto FROM bound), (SELECT count(*) FROM gone)
"""
# table -> its time column (indexed), and which of its rows stay whatever their age.
_BY_TIME = {
    "webhook_events": ("received_at", "AND status = 'completed'"),
    "webhook_failures": ("failed_at", ""),
}
# Small tables, deleted by id in batches: they hold few rows for any window.
_SMALL = {
    # The outbox's per-second roll-up: one row per second and kind of job at most;
    # it has no index on its time, and the service reads it by none.
    "pgqueuer_statistics": """
        DELETE FROM pgqueuer_statistics WHERE id IN (
            SELECT id FROM pgqueuer_statistics WHERE created < %(cutoff)s
            ORDER BY id LIMIT %(batch)s FOR UPDATE SKIP LOCKED)""",
    # Operators' bulk jobs that ended (finished or cancelled) before the
    # cutoff: their items a batch at a time, then the jobs left without any.
    # A running job stays, whatever its age.
    "bulk_job_items": """
        DELETE FROM bulk_job_items WHERE (job_id, position) IN (
            SELECT i.job_id, i.position FROM bulk_job_items i JOIN bulk_jobs j ON j.id = i.job_id
            WHERE j.finished_at < %(cutoff)s
            ORDER BY i.job_id, i.position LIMIT %(batch)s FOR UPDATE OF i SKIP LOCKED)""",
    "bulk_jobs": """
        DELETE FROM bulk_jobs WHERE id IN (
            SELECT j.id FROM bulk_jobs j
            WHERE j.finished_at < %(cutoff)s
              AND NOT EXISTS (SELECT 1 FROM bulk_job_items i WHERE i.job_id = j.id)
            ORDER BY j.id LIMIT %(batch)s FOR UPDATE SKIP LOCKED)""",
}

_TO_REDACT = {
    "webhook_events": """
        SELECT ledger_id, received_at, payload FROM webhook_payloads
        WHERE received_at >= %(after)s AND received_at < %(cutoff)s AND redacted_at IS NULL
        ORDER BY received_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED""",
    "webhook_failures": """
        SELECT id, failed_at, payload FROM webhook_failures
        WHERE failed_at >= %(after)s AND failed_at < %(cutoff)s AND redacted_at IS NULL
          AND payload IS NOT NULL
        ORDER BY failed_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED""",
}

_REDACT = {
    "webhook_events": """UPDATE webhook_payloads SET payload = %s, redacted_at = now()
                         WHERE ledger_id = %s AND received_at = %s""",
    "webhook_failures": """UPDATE webhook_failures SET payload = %s, redacted_at = now()
                           WHERE id = %s AND failed_at = %s""",
}

_BEGINNING = datetime.min.replace(tzinfo=UTC)

# Both chosen by measurement: docs/benchmark.md, a year of events.
DEFAULT_BATCH = 5000
DEFAULT_PAUSE = 4.0


def _nothing(done: int) -> None:
    pass


@dataclass(frozen=True)
class Pace:
    """After each batch, sleep `pause` times as long as it took (pt-archiver's --sleep-coef).

    A run so keeps to about 1 / (1 + pause) of the server's time however
    loaded the machine is, and deliveries get the rest: a batch that finds
    the server busy takes longer and waits longer after.
    """

    pause: float = 0.0
    sleep: Callable[[float], object] = time.sleep

    @contextmanager
    def batch(self) -> Iterator[None]:
        started = time.perf_counter()
        yield
        if self.pause:
            self.sleep(self.pause * (time.perf_counter() - started))


_UNPACED = Pace()


def drop_months(conn: psycopg.Connection, cutoff: datetime) -> list[str]:
    """Drop the months (payloads' and the outbox log's) wholly older than `cutoff`; their names."""
    gone = partitions.expired(conn, cutoff)
    for month in gone:
        partitions.drop(conn, month)
    return [month.name for month in gone]


def delete_older_than(
    conn: psycopg.Connection,
    cutoff: datetime,
    batch: int,
    done: Callable[[int], object] = _nothing,
    pace: Pace = _UNPACED,
) -> dict[str, int]:
    """Rows deleted per table, in batches paced by `pace`; `done` is told each batch's count."""
    deleted = {}
    for table, (at, keep) in _BY_TIME.items():
        query = sql.SQL(_KEYSET_DELETE).format(
            table=sql.Identifier(table), at=sql.Identifier(at), keep=sql.SQL(keep)
        )
        deleted[table] = 0
        after = _BEGINNING
        while True:
            with pace.batch():
                upto, count = db.one(conn.execute(query, {"after": after, "cutoff": cutoff, "batch": batch}))
            deleted[table] += count
            done(count)
            if upto is None:
                break
            after = upto
    for table, delete in _SMALL.items():
        deleted[table] = 0
        while True:
            with pace.batch():
                count = conn.execute(delete, {"cutoff": cutoff, "batch": batch}).rowcount
            deleted[table] += count
            done(count)
            if count < batch:
                break
    return deleted


def redact_older_than(
    conn: psycopg.Connection,
    cutoff: datetime,
    batch: int,
    fields: frozenset[str],
    done: Callable[[int], object] = _nothing,
    pace: Pace = _UNPACED,
) -> dict[str, int]:
    redacted = {}
    for table, select in _TO_REDACT.items():
        redacted[table] = 0
        after = _BEGINNING
        while True:
            with pace.batch(), conn.transaction():
                rows = conn.execute(select, {"after": after, "cutoff": cutoff, "batch": batch}).fetchall()
                conn.cursor().executemany(
                    _REDACT[table], [(redact(payload, fields), key, at) for key, at, payload in rows]
                )
            redacted[table] += len(rows)
            done(len(rows))
            if len(rows) < batch:
                break
            after = rows[-1][1]
    return redacted


def dropped_line(dropped: list[str]) -> str:
    return f"dropped {len(dropped)} month(s): {' '.join(dropped) or 'none past the window'}"


def too_recent(name: str, window: timedelta, force: bool) -> bool:
    if window >= PROVIDER_RETRY_HORIZON or force:
        return False
    print(
        f"refusing {name} {window}: shorter than the provider's retry horizon "
        f"({PROVIDER_RETRY_HORIZON.days} days), a retry could find its event forgotten; "
        "--force to do it anyway",
        file=sys.stderr,
    )
    return True


def _prune(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    redacting = bool(settings.redact_fields)
    if too_recent("--older-than", args.older_than, args.force) or (
        redacting and too_recent("--redact-older-than", args.redact_older_than, args.force)
    ):
        return 2
    now = datetime.now(UTC)
    pace = Pace(args.pause)
    with connect(settings) as conn:
        partitions.make(conn, now)
        print(dropped_line(drop_months(conn, now - args.older_than)))
        with progress.bar(desc="deleting", unit=" rows") as shown:
            deleted = delete_older_than(conn, now - args.older_than, args.batch_size, shown.update, pace)
        print("deleted " + " ".join(f"{t}={n}" for t, n in deleted.items()))
        if redacting:
            with progress.bar(desc="redacting", unit=" rows") as shown:
                redacted = redact_older_than(
                    conn,
                    now - args.redact_older_than,
                    args.batch_size,
                    frozenset(settings.redact_fields),
                    shown.update,
                    pace,
                )
            print("redacted " + " ".join(f"{t}={n}" for t, n in redacted.items()))
    return 0


def pause(text: str) -> float:
    """A non-negative number: an argparse type, so a typo is a usage error."""
    try:
        value = float(text)
        if math.isfinite(value) and value >= 0:
            return value
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"not a number of times each batch's time, 0 or more: {text!r}")


def register(commands) -> None:
    prune = commands.add_parser(
        "prune",
        help="drop old payload and outbox log months, delete old ledger rows and failures in batches "
        "(never fulfilments); "
        "redact WEBHOOK_REDACT_FIELDS from younger payloads",
    )
    prune.add_argument("--older-than", type=durations.span, required=True, help="e.g. 30d")
    prune.add_argument(
        "--redact-older-than",
        type=durations.span,
        default=timedelta(days=7),
        help="redact stored payloads older than this (default 7d; only with WEBHOOK_REDACT_FIELDS)",
    )
    prune.add_argument("--batch-size", type=sending.positive_int, default=DEFAULT_BATCH)
    prune.add_argument(
        "--pause",
        type=pause,
        default=DEFAULT_PAUSE,
        help="after each batch, sleep this many times as long as the batch took, "
        "so deliveries keep most of the server (default %(default)g; 0: no pause)",
    )
    prune.add_argument(
        "--force", action="store_true", help="allow windows shorter than the 3-day retry horizon"
    )
    prune.set_defaults(func=_prune)
