"""The tables kept by the month: made ahead of the deliveries, detached and dropped whole once past retention.

Two tables are partitioned by month (TABLES): webhook_payloads, where a
payload lands in its received month's partition (webhooks_claim,
ledger.sql), and the outbox's log, pgqueuer_log, where each row lands in
its created month's (pgqueuer's statements and outbox.sql's). Neither has
a default partition: a row whose month is missing fails its statement and
its transaction, never a write lost in silence: a delivery answers 500 and
the provider retries; the worker's pick fails, the job stays queued and the
worker exits with the error, to make the months as its restart begins. So
the worker (hourly), `webhooks maintenance` and every `prune` make the
coming months of both well before they begin.

Every change here takes its locks under a short lock_timeout and is tried
again later rather than waited for, so a claim never queues behind it for
longer than that: a month is made as a table of its own and attached
(webhooks_month_partition, migrations/0046), which locks the parent in a
mode its writers never wait for, and a month leaves by DETACH PARTITION
CONCURRENTLY (the same mode; it needs no default partition), then DROP TABLE
of a table nothing reads any more.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import errors, sql

from webhooks.infra import db

from .parts import Periodic

# The partitioned tables, each by range of its time column (migrations 0044 and 0046).
TABLES = ("webhook_payloads", "pgqueuer_log")
# How long a partition change may wait for a lock before it gives up and tries again.
LOCK_TIMEOUT = "100ms"
_TRIES = 20
_PAUSE_S = 0.2
MONTHS_AHEAD = 2

_MONTHS = """
SELECT c.relname, i.inhdetachpending
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass(%s)
ORDER BY c.relname
"""
_DETACHING = "SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = to_regclass(%s)"


@dataclass(frozen=True)
class Month:
    table: str
    name: str
    first: datetime
    detaching: bool

    @property
    def end(self) -> datetime:
        return _next(self.first)


def _next(first: datetime) -> datetime:
    return first.replace(year=first.year + first.month // 12, month=first.month % 12 + 1)


def first_of(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def months(conn: psycopg.Connection) -> list[Month]:
    """The partitions of every table in TABLES, oldest first, each with its month (UTC)."""
    found = [
        Month(table, name, datetime.strptime(name.rsplit("_p", 1)[1], "%Y%m").replace(tzinfo=UTC), pending)
        for table in TABLES
        for name, pending in conn.execute(_MONTHS, [table]).fetchall()
    ]
    return sorted(found, key=lambda month: (month.first, month.table))


def _months_between(start: datetime, end: datetime) -> Iterator[datetime]:
    month = first_of(start)
    while month <= end:
        yield month
        month = _next(month)


def make(conn: psycopg.Connection, since: datetime, ahead: int = MONTHS_AHEAD) -> list[str]:
    """Make every table's missing months from `since`'s to `ahead` months after this one; the names made."""
    last = first_of(datetime.now(UTC))
    for _ in range(ahead):
        last = _next(last)
    made = (_make_month(conn, table, month) for month in _months_between(since, last) for table in TABLES)
    return [name for name in made if name is not None]


def _make_month(conn: psycopg.Connection, table: str, month: datetime) -> str | None:
    """The table's partition for the month made: its name, or None when it was there."""
    query = "SELECT webhooks_month_partition(%s, %s)"
    row = _with_short_locks(conn, functools.partial(conn.execute, query, [table, month]))
    return None if row is None else row[0]


def expired(conn: psycopg.Connection, cutoff: datetime) -> list[Month]:
    """The months wholly received before `cutoff`."""
    return [month for month in months(conn) if month.end <= cutoff]


def drop(conn: psycopg.Connection, month: Month) -> None:
    """Detach the month without stopping a writer, then drop it. `conn` must be in autocommit."""
    parent, table = sql.Identifier(month.table), sql.Identifier(month.name)

    def detach() -> psycopg.Cursor[Any] | None:
        row = conn.execute(_DETACHING, [month.name]).fetchone()
        if row is None:
            return None  # detached already
        # A detach interrupted in its second transaction is finished, not begun again.
        how = sql.SQL("FINALIZE" if row[0] else "CONCURRENTLY")
        return conn.execute(sql.SQL("ALTER TABLE {} DETACH PARTITION {} {}").format(parent, table, how))

    _with_short_locks(conn, detach)
    _with_short_locks(conn, lambda: conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table)))


def _with_short_locks(
    conn: psycopg.Connection, step: Callable[[], psycopg.Cursor[Any] | None]
) -> tuple[Any, ...] | None:
    """Run `step` under LOCK_TIMEOUT, again after a pause each time a lock was not had in time."""
    (previous,) = db.one(conn.execute("SELECT current_setting('lock_timeout')"))
    conn.execute("SELECT set_config('lock_timeout', %s, false)", [LOCK_TIMEOUT])
    try:
        tries = 0
        while True:
            try:
                cursor = step()
                return cursor.fetchone() if cursor is not None and cursor.description else None
            except errors.LockNotAvailable:
                tries += 1
                if tries == _TRIES:
                    raise
                time.sleep(_PAUSE_S)
    finally:
        conn.execute("SELECT set_config('lock_timeout', %s, false)", [previous])


def make_ahead(conn: psycopg.Connection) -> int:
    """The coming months made, if missing: how many were."""
    return len(make(conn, datetime.now(UTC)))


# The worker makes the coming months itself, hourly, so that a service whose
# `maintenance` never runs still never meets a month without its partition.
AHEAD = Periodic("months_made", 3600.0, make_ahead)
