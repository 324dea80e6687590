"""Bulk work as jobs of its own: a reprocess of many failed events, or a requeue of many dead letters.

A request (/admin) or a command only fixes the selection: `start` writes
the job and one item per event or dead letter (migrations/0043_bulk_jobs.sql),
in the order they will run, and returns at once. The worker runs it
(`run_batch`), at most BATCH items in one transaction: their rows are
taken FOR UPDATE SKIP LOCKED, so two workers share a job without taking
the same item, and each item's result commits with its batch. A worker
killed mid-batch leaves that batch's items undone, for the next worker;
an event of theirs that had completed meanwhile only replays its stored
answer, through the same claim a redelivery takes, so nothing runs twice.

A batch holds its job's row FOR SHARE: `cancel` waits for the batches in
flight (BATCH bounds how long), so the counts it answers are final, and no
batch starts after it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import structlog
from psycopg.rows import class_row

from webhooks.infra.db import one
from webhooks.infra.logs import public_message

from . import outbox

log = structlog.get_logger(__name__)

REPROCESS, REQUEUE = "reprocess", "requeue"
# A job's status while a worker may take its items (then `finished`, or `cancelled`).
RUNNING = "running"
# Items one batch takes at most: the time a cancel waits, and the items a killed worker leaves to take again.
BATCH = 100


@dataclass(frozen=True)
class Progress:
    id: int
    action: str
    selection: dict[str, Any]
    status: str
    total: int
    done: int
    ok: int
    created_at: datetime
    finished_at: datetime | None

    @property
    def waiting(self) -> int:
        return self.total - self.done


@dataclass(frozen=True)
class Item:
    position: int
    provider: str | None
    event_id: str | None
    outbox_job_id: int | None
    done_at: datetime | None
    ok: bool | None
    result: str | None


_CREATE = "INSERT INTO bulk_jobs (action, selection, total) VALUES (%s, %s, %s) RETURNING id"


def start(
    conn: psycopg.Connection,
    action: str,
    selection: dict[str, Any],
    events: Iterable[tuple[str, str]] = (),
    dead_letters: Iterable[int] = (),
) -> int:
    """A job over these events (a reprocess) or dead letters (a requeue), in this order; its id.

    Its items are copied in one COPY, in the job's own transaction: the job
    exists whole or not at all.
    """
    items: list[tuple[str | None, str | None, int | None]]
    if action == REPROCESS:
        items = [(provider, event_id, None) for provider, event_id in events]
    else:
        items = [(None, None, dead_letter) for dead_letter in dead_letters]
    with conn.transaction():
        (job_id,) = one(conn.execute(_CREATE, [action, json.dumps(selection), len(items)]))
        with conn.cursor().copy(
            "COPY bulk_job_items (job_id, position, provider, event_id, outbox_job_id) FROM STDIN"
        ) as copy:
            for position, item in enumerate(items):
                copy.write_row((job_id, position, *item))
    return int(job_id)


_PROGRESS = """
SELECT j.id, j.action, j.selection, j.status, j.total,
       count(i.done_at)::int AS done, count(*) FILTER (WHERE i.ok)::int AS ok,
       j.created_at, j.finished_at
FROM bulk_jobs j LEFT JOIN bulk_job_items i ON i.job_id = j.id
WHERE (%(id)s::bigint IS NULL OR j.id = %(id)s)
GROUP BY j.id
ORDER BY j.id DESC
LIMIT %(limit)s
"""


def progress(conn: psycopg.Connection, job_id: int) -> Progress | None:
    rows = _progress(conn, job_id, 1)
    return rows[0] if rows else None


def recent(conn: psycopg.Connection, limit: int = 20) -> list[Progress]:
    """The latest jobs, newest first."""
    return _progress(conn, None, limit)


def _progress(conn: psycopg.Connection, job_id: int | None, limit: int) -> list[Progress]:
    cur = conn.cursor(row_factory=class_row(Progress))
    return cur.execute(_PROGRESS, {"id": job_id, "limit": limit}).fetchall()


_ITEMS = """
SELECT position, provider, event_id, outbox_job_id, done_at, ok, result
FROM bulk_job_items
WHERE job_id = %(id)s AND (NOT %(failed)s OR ok IS NOT TRUE AND done_at IS NOT NULL)
ORDER BY position
LIMIT %(limit)s
"""


def items(conn: psycopg.Connection, job_id: int, limit: int, failed_only: bool = False) -> list[Item]:
    """The first `limit` items of a job, in order; with `failed_only`, only those done but not ok."""
    cur = conn.cursor(row_factory=class_row(Item))
    return cur.execute(_ITEMS, {"id": job_id, "limit": limit, "failed": failed_only}).fetchall()


_CANCEL = (
    "UPDATE bulk_jobs SET status = 'cancelled', finished_at = now() WHERE id = %s AND status = 'running'"
)


def cancel(conn: psycopg.Connection, job_id: int) -> Progress | None:
    """The job stopped after the batches in flight: its counts then, or None when it was not running."""
    with conn.transaction():
        if not conn.execute(_CANCEL, [job_id]).rowcount:
            return None
    return progress(conn, job_id)


# The next items of running jobs (or of one), oldest job first. Their job's
# row is held FOR SHARE, so a cancel waits for this batch and none starts after it.
_TAKE = """
SELECT i.job_id, j.action, j.selection, i.position, i.provider, i.event_id, i.outbox_job_id
FROM bulk_job_items i JOIN bulk_jobs j ON j.id = i.job_id
WHERE j.status = 'running' AND i.done_at IS NULL AND (%(job)s::bigint IS NULL OR j.id = %(job)s)
ORDER BY i.job_id, i.position
LIMIT %(cap)s
FOR UPDATE OF i SKIP LOCKED
FOR SHARE OF j
"""

_DONE = """
UPDATE bulk_job_items SET done_at = now(), ok = %s, result = %s
WHERE job_id = %s AND position = %s
"""

# Finished once no item is left: whichever worker commits the last batch
# sees that, and only one UPDATE of the row changes its status.
_FINISH = """
UPDATE bulk_jobs j SET status = 'finished', finished_at = now()
WHERE j.id = ANY(%s) AND j.status = 'running'
  AND NOT EXISTS (SELECT 1 FROM bulk_job_items i WHERE i.job_id = j.id AND i.done_at IS NULL)
RETURNING j.id
"""

# Reprocesses one event, as its job's selection says (`allow_ignored`):
# whether it completed, and what it came to in one line.
Reprocess = Callable[[str, str, dict[str, Any]], tuple[bool, str]]


@dataclass(frozen=True)
class Ran:
    """One item a batch ran, and what it came to."""

    job_id: int
    position: int
    provider: str | None
    event_id: str | None
    outbox_job_id: int | None
    ok: bool
    result: str


@dataclass(frozen=True)
class Batch:
    ran: list[Ran]
    # The jobs whose last items it ran.
    finished: list[Progress]


def run_batch(
    conn: psycopg.Connection, reprocess: Reprocess, job_id: int | None = None, cap: int | None = None
) -> Batch:
    """One batch of a running job's items (of `job_id`'s, if given; BATCH unless `cap`), committed.

    `conn` is the batch's own (not autocommit); a reprocess runs through
    the service's claim on connections of its own.
    """
    with conn.transaction():
        taken = conn.execute(_TAKE, {"cap": cap or BATCH, "job": job_id}).fetchall()
        dead_letters = [row[6] for row in taken if row[1] == REQUEUE]
        requeued = set(
            outbox.requeue(conn, outbox.Jobs(status=outbox.DEAD, ids=dead_letters)) if dead_letters else []
        )
        ran = []
        for job, action, selection, position, provider, event_id, dead_letter in taken:
            if action == REPROCESS:
                ok, said = _reprocessed(reprocess, provider, event_id, selection)
            else:
                ok = dead_letter in requeued
                said = "requeued" if ok else "not a dead letter any more, or its key is pending again"
            conn.execute(_DONE, [ok, said[:500], job, position])
            ran.append(Ran(job, position, provider, event_id, dead_letter, ok, said))
    if not taken:
        return Batch([], [])
    with conn.transaction():
        finished = [job for (job,) in conn.execute(_FINISH, [sorted({row[0] for row in taken})])]
    return Batch(ran, [job for job in (progress(conn, job) for job in finished) if job])


def _reprocessed(
    reprocess: Reprocess, provider: str, event_id: str, selection: dict[str, Any]
) -> tuple[bool, str]:
    """One event's reprocess; one that raises is that item's result, not the job's end.

    A database error is the batch's: it rolls back, and the batch is taken
    again once the database answers, rather than every item marked failed.
    """
    try:
        return reprocess(provider, event_id, selection)
    except psycopg.Error:
        raise
    except Exception as exc:  # a bug in one event's path must not stop the job
        return False, f"not run: {type(exc).__name__}: {public_message(exc)}"


def audit(event: str, job: Progress, to: Any = log, **more: Any) -> None:
    """The job's `admin_action` line, as /admin's actions write theirs: its id, selection and counts."""
    to.info(
        "admin_action",
        action=f"bulk_{job.action}_{event}",
        job_id=job.id,
        count=job.total,
        done=job.done,
        ok=job.ok,
        **job.selection,
        **more,
    )
