"""The transactional outbox: side effects that must not run inside the claim.

An email receipt or a call to a shop's API cannot be rolled back with the
claim's transaction, so fulfilment only records the intent here, on the
claim's own connection: it commits with the fulfilment or vanishes with it.
`webhooks.worker` delivers it afterwards, at least once, carrying an
idempotency key so the receiver can make "at least once" effectively once.

The queue is pgqueuer's table (migrations/0010_outbox_pgqueuer.sql): jobs are
written on the connection we are handed, inside our transaction, and
pgqueuer's worker claims them with FOR UPDATE SKIP LOCKED.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from webhooks.infra.db import cursor, one, storable

from . import jobs

ENTRYPOINT = "webhooks.outbox"
KEY_HEADER = "idempotency-key"
KIND_HEADER = "kind"
# pgqueuer's statuses: queued (waiting, possibly for a retry's backoff),
# picked (a worker has it), failed (dead letter: held after the last attempt).
DEAD = "failed"
# pgqueuer's own enqueue with on_conflict="skip", as one statement: its
# Python wrapper (parameter normalising, tracing hooks, batch UNNEST and
# ordinal mapping for a single job) cost more on the hot path than the
# insert itself (docs/benchmark.md, "Outbox job written by our own statement").
# The function (outbox.sql) writes the row and log entry pgqueuer writes,
# with this module's ENTRYPOINT and headers, so its worker consumes them
# unchanged (tests/test_outbox.py); the one-statement payment delivery
# enqueues through it too.
_ENQUEUE = "SELECT webhooks_enqueue(p_kind => %(kind)s, p_payload => %(payload)s::jsonb, p_key => %(key)s)"


def enqueue(
    conn: psycopg.Connection, kind: jobs.JobKind | str, payload: dict[str, Any], idempotency_key: str
) -> bool:
    """Record a side effect on `conn`, inside the caller's transaction.

    The same key enqueued twice while the first is still pending is one job
    (False the second time); after that it is a second delivery with the
    same key, which the receiver treats as done. Values copied from a
    payload are made `storable` (the job is jsonb). A job that breaks its
    kind's schema raises `jobs.InvalidJob`, failing the transaction; a kind
    named by a plain string has none.
    """
    name = kind if isinstance(kind, str) else kind.name
    payload = storable(payload)
    jobs.check(kind, {"kind": name, **payload})
    payload_json = json.dumps(payload, separators=(",", ":"))
    (written,) = one(
        cursor(conn).execute(_ENQUEUE, {"kind": name, "payload": payload_json, "key": idempotency_key})
    )
    return bool(written)


def backoff_s(attempts: int, base_s: float, max_s: float, rand: Callable[[], float] = random.random) -> float:
    """Delay before the retry that follows `attempts` failures.

    Exponential with "equal jitter": at least half the exponential step, so
    delays keep growing, plus a random half, so workers that failed together
    against the same outage do not retry in lockstep.
    """
    step = min(max_s, base_s * 2.0**attempts)
    return step / 2 + rand() * step / 2


@dataclass(frozen=True)
class StatusCount:
    status: str
    jobs: int
    oldest_age_s: float


_DEPTH = """
SELECT status::text, count(*), extract(epoch FROM now() - min(created))::float8
FROM pgqueuer
WHERE entrypoint = %s
GROUP BY status
ORDER BY status
"""


def depth(conn: psycopg.Connection) -> list[StatusCount]:
    """Jobs in the outbox by status, with how long the oldest has waited."""
    return [StatusCount(*row) for row in conn.execute(_DEPTH, [ENTRYPOINT])]


@dataclass(frozen=True)
class Job:
    id: int
    status: str
    kind: str
    idempotency_key: str
    # Tries made so far, as the worker counts them in its log.
    attempts: int
    created: datetime
    execute_after: datetime
    last_error: str | None


_RECENT = """
SELECT j.id, j.status::text, j.headers->>%(kind)s, j.headers->>%(key)s,
       -- pgqueuer counts the retries it scheduled: a dead job's last try is not among them.
       j.attempts + (j.status = 'failed')::int,
       j.created, j.execute_after,
       (SELECT l.traceback->>'exception_message'
        FROM pgqueuer_log l
        WHERE l.job_id = j.id AND l.traceback IS NOT NULL
        ORDER BY l.id DESC LIMIT 1)
FROM pgqueuer j
WHERE j.entrypoint = %(entrypoint)s
ORDER BY (j.status = 'failed') DESC, j.id DESC
LIMIT %(limit)s
"""


def pending(conn: psycopg.Connection, limit: int = 50) -> list[Job]:
    """Jobs not yet delivered, dead letters first; delivered jobs leave the table."""
    rows = conn.execute(
        _RECENT,
        {"kind": KIND_HEADER, "key": KEY_HEADER, "entrypoint": ENTRYPOINT, "limit": limit},
    )
    return [Job(*row) for row in rows]
