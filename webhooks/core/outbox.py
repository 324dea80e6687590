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
# The event whose claim enqueued the job, when one did (webhooks_claim sets it for its transaction).
EVENT_PROVIDER_HEADER = "event-provider"
EVENT_ID_HEADER = "event-id"
EVENT_HEADERS = (EVENT_PROVIDER_HEADER, EVENT_ID_HEADER)
# pgqueuer's statuses: queued (waiting, possibly for a retry's backoff),
# picked (a worker has it), failed (dead letter: held after the last attempt).
DEAD = "failed"
# pgqueuer's own enqueue with on_conflict="skip", as one statement: its
# Python wrapper (parameter normalising, tracing hooks, batch UNNEST and
# ordinal mapping for a single job) cost more on the hot path than the
# insert itself (docs/benchmark.md, "Outbox job written by our own statement").
# The function (outbox.sql) writes the row and log entry pgqueuer writes,
# with this module's ENTRYPOINT and headers, so its worker consumes them
# unchanged (tests/worker/test_outbox.py); the one-statement payment delivery
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


# The top-level key `loadtest` (and locustfile.py) writes into every body it
# signs: the signature covers it, so only whoever holds the secret can mark
# an event so, and no provider sends it. The worker delivers none of the jobs
# a marked event enqueued (webhooks/worker/loop.py): a load test never
# reaches the shop's receiver.
TEST_TRAFFIC_KEY = "webhooks_loadtest"
_FROM_TEST_TRAFFIC = """
SELECT p.payload::jsonb ? %(key)s
FROM webhook_events e
JOIN webhook_payloads p ON p.ledger_id = e.id AND p.received_at = e.received_at
WHERE e.provider = %(provider)s AND e.event_id = %(event_id)s
"""


def from_test_traffic(conn: psycopg.Connection, headers: dict[str, Any]) -> bool:
    """Whether the job with these headers was enqueued by a load test's event."""
    provider, event_id = (headers.get(name) for name in EVENT_HEADERS)
    if not (provider and event_id):
        return False
    row = (
        cursor(conn)
        .execute(_FROM_TEST_TRAFFIC, {"key": TEST_TRAFFIC_KEY, "provider": provider, "event_id": event_id})
        .fetchone()
    )
    return bool(row and row[0])


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
    # The event whose claim enqueued it; None for the access sweep's jobs and older ones.
    event_provider: str | None = None
    event_id: str | None = None


@dataclass(frozen=True)
class Jobs:
    """Which outbox jobs: every condition given must hold."""

    status: str | None = None
    kind: str | None = None
    ids: list[int] | None = None
    # Created before this moment.
    before: datetime | None = None
    # Made by this event's claim.
    event: tuple[str, str] | None = None
    # Whose last failure said exactly this (a dead letter's error, as `pending` reads it).
    error: str | None = None

    def params(self) -> dict[str, Any]:
        provider, event_id = self.event or (None, None)
        return {
            "entrypoint": ENTRYPOINT,
            "kind_header": KIND_HEADER,
            "key_header": KEY_HEADER,
            "provider_header": EVENT_PROVIDER_HEADER,
            "event_header": EVENT_ID_HEADER,
            "status": self.status,
            "kind": self.kind,
            "ids": self.ids,
            "before": self.before,
            "provider": provider,
            "event_id": event_id,
            "error": self.error,
        }


EVERY_JOB = Jobs()
DEAD_LETTERS = Jobs(status=DEAD)

# A job's last failure's text, as pgqueuer logged it.
_LAST_ERROR = """(SELECT l.traceback->>'exception_message'
 FROM pgqueuer_log l
 WHERE l.job_id = j.id AND l.traceback IS NOT NULL
 ORDER BY l.id DESC LIMIT 1)"""

# The one selection of jobs every read and action here shares.
_MATCHING = f"""
j.entrypoint = %(entrypoint)s
AND (%(status)s::text IS NULL OR j.status::text = %(status)s)
AND (%(kind)s::text IS NULL OR j.headers->>%(kind_header)s = %(kind)s)
AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
AND (%(before)s::timestamptz IS NULL OR j.created < %(before)s)
AND (%(event_id)s::text IS NULL OR (j.headers->>%(provider_header)s = %(provider)s
                                    AND j.headers->>%(event_header)s = %(event_id)s))
AND (%(error)s::text IS NULL OR coalesce({_LAST_ERROR}, '') = %(error)s)
"""

_LIST = f"""
SELECT j.id, j.status::text, j.headers->>%(kind_header)s, j.headers->>%(key_header)s,
       -- pgqueuer counts the retries it scheduled: a dead job's last try is not among them.
       j.attempts + (j.status = 'failed')::int,
       j.created, j.execute_after,
       {_LAST_ERROR},
       j.headers->>%(provider_header)s, j.headers->>%(event_header)s
FROM pgqueuer j
WHERE {_MATCHING}
ORDER BY (j.status = 'failed') DESC, j.id DESC
LIMIT %(limit)s
"""


def pending(conn: psycopg.Connection, limit: int | None = 50, which: Jobs = EVERY_JOB) -> list[Job]:
    """Jobs not yet delivered, dead letters first; delivered jobs leave the table."""
    return [Job(*row) for row in conn.execute(_LIST, {**which.params(), "limit": limit})]


@dataclass(frozen=True)
class DeadLetterGroup:
    """Dead letters of one kind whose last failure said the same: what a bulk requeue selects."""

    kind: str
    error: str | None
    jobs: int
    oldest: datetime


_GROUPS = f"""
SELECT j.headers->>%(kind_header)s, {_LAST_ERROR} AS error, count(*), min(j.created)
FROM pgqueuer j
WHERE j.entrypoint = %(entrypoint)s AND j.status = 'failed'
GROUP BY 1, 2
ORDER BY count(*) DESC, 1, 2
LIMIT %(limit)s
"""


def dead_letter_groups(conn: psycopg.Connection, limit: int = 50) -> list[DeadLetterGroup]:
    """The dead letters counted by kind and by error, the biggest group first."""
    return [DeadLetterGroup(*row) for row in conn.execute(_GROUPS, {**DEAD_LETTERS.params(), "limit": limit})]


def dead_letter_ids(conn: psycopg.Connection, which: Jobs) -> list[int]:
    """The ids of the dead letters among `which`, oldest first: a bulk requeue's items."""
    return [job_id for (job_id,) in conn.execute(_IDS, {**which.params(), "status": DEAD})]


_IDS = f"SELECT j.id FROM pgqueuer j WHERE {_MATCHING} ORDER BY j.id"


# As pgqueuer's own requeue (QueueManagementService.requeue, its
# build_requeue_jobs_query): back to queued now with its tries counted from
# zero, and the log entry it writes. Ours is one statement on the caller's
# connection that says which jobs it moved, and leaves dead a job whose key
# is pending again (enqueued anew since it died): requeuing it would break
# the key's uniqueness among pending jobs.
_REQUEUE = f"""
WITH requeued AS (
    UPDATE pgqueuer j
    SET status = 'queued', execute_after = now(), updated = now(), attempts = 0, queue_manager_id = NULL
    WHERE {_MATCHING} AND j.status = 'failed'
      AND NOT EXISTS (SELECT 1 FROM pgqueuer p
                      WHERE p.dedupe_key = j.dedupe_key AND p.status IN ('queued', 'picked'))
    RETURNING j.id, j.entrypoint, j.priority
), logged AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    SELECT id, 'queued', entrypoint, priority FROM requeued
)
SELECT id FROM requeued ORDER BY id
"""

# A dead letter given up on: the row goes, its log keeps the history (`prune` ages it out).
_PURGE = f"""
WITH purged AS (
    DELETE FROM pgqueuer j
    WHERE {_MATCHING} AND j.status = 'failed'
    RETURNING j.id, j.entrypoint, j.priority
), logged AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    SELECT id, 'deleted', entrypoint, priority FROM purged
)
SELECT id FROM purged ORDER BY id
"""


def requeue(conn: psycopg.Connection, which: Jobs = DEAD_LETTERS) -> list[int]:
    """The dead letters among `which` moved back to queued, for the worker to try again; their ids."""
    return [job_id for (job_id,) in conn.execute(_REQUEUE, which.params())]


def purge(conn: psycopg.Connection, which: Jobs = DEAD_LETTERS) -> list[int]:
    """The dead letters among `which` deleted; their ids."""
    return [job_id for (job_id,) in conn.execute(_PURGE, which.params())]
