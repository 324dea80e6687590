"""`python -m webhooks prune`: forget old payloads, keep the fulfilments.

Deleting a ledger row re-opens its event id to a claim. That is safe once
Stripe has stopped retrying (3 days), and even then a late duplicate of a
paid event meets the unique index on fulfilments.payment_id and is answered
`already_fulfilled`: fulfilments are never pruned, they are the backstop.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg

from webhooks.core.redaction import REDACTED, redact  # noqa: F401  (REDACTED: part of this module's API)
from webhooks.infra.config import Settings
from webhooks.infra.db import connect

from . import durations, progress

# Stripe retries a failed delivery for up to three days.
PROVIDER_RETRY_HORIZON = timedelta(days=3)

# Each DELETE is one batch in its own (autocommit) transaction, so a long
# prune never holds locks on more than `batch` rows at a time.
_DELETES = {
    "webhook_events": """
        DELETE FROM webhook_events WHERE id IN (
            SELECT id FROM webhook_events
            WHERE received_at < %(cutoff)s AND status = 'completed'
            ORDER BY id LIMIT %(batch)s FOR UPDATE SKIP LOCKED)""",
    "webhook_failures": """
        DELETE FROM webhook_failures WHERE id IN (
            SELECT id FROM webhook_failures WHERE failed_at < %(cutoff)s
            ORDER BY id LIMIT %(batch)s FOR UPDATE SKIP LOCKED)""",
    # The outbox's delivery log and its per-second roll-up; pending and dead
    # jobs live in pgqueuer itself and stay.
    "pgqueuer_log": """
        DELETE FROM pgqueuer_log WHERE id IN (
            SELECT id FROM pgqueuer_log WHERE created < %(cutoff)s
            ORDER BY id LIMIT %(batch)s FOR UPDATE SKIP LOCKED)""",
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
        SELECT id, payload FROM webhook_events
        WHERE received_at < %(cutoff)s AND redacted_at IS NULL
        ORDER BY id LIMIT %(batch)s FOR UPDATE SKIP LOCKED""",
    "webhook_failures": """
        SELECT id, payload FROM webhook_failures
        WHERE failed_at < %(cutoff)s AND redacted_at IS NULL AND payload IS NOT NULL
        ORDER BY id LIMIT %(batch)s FOR UPDATE SKIP LOCKED""",
}

_REDACT = {
    "webhook_events": "UPDATE webhook_events SET payload = %s, redacted_at = now() WHERE id = %s",
    "webhook_failures": "UPDATE webhook_failures SET payload = %s, redacted_at = now() WHERE id = %s",
}


def _nothing(done: int) -> None:
    pass


def delete_older_than(
    conn: psycopg.Connection, cutoff: datetime, batch: int, done: Callable[[int], object] = _nothing
) -> dict[str, int]:
    """Rows deleted per table, in batches; `done` is told each batch's count."""
    deleted = {}
    for table, sql in _DELETES.items():
        deleted[table] = 0
        while True:
            count = conn.execute(sql, {"cutoff": cutoff, "batch": batch}).rowcount
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
) -> dict[str, int]:
    redacted = {}
    for table, select in _TO_REDACT.items():
        redacted[table] = 0
        while True:
            with conn.transaction():
                rows = conn.execute(select, {"cutoff": cutoff, "batch": batch}).fetchall()
                conn.cursor().executemany(
                    _REDACT[table], [(redact(payload, fields), id_) for id_, payload in rows]
                )
            redacted[table] += len(rows)
            done(len(rows))
            if len(rows) < batch:
                break
    return redacted


def _too_recent(name: str, window: timedelta, force: bool) -> bool:
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
    if _too_recent("--older-than", args.older_than, args.force) or (
        redacting and _too_recent("--redact-older-than", args.redact_older_than, args.force)
    ):
        return 2
    now = datetime.now(UTC)
    with connect(settings) as conn:
        with progress.bar(desc="deleting", unit=" rows") as shown:
            deleted = delete_older_than(conn, now - args.older_than, args.batch_size, shown.update)
        print("deleted " + " ".join(f"{t}={n}" for t, n in deleted.items()))
        if redacting:
            with progress.bar(desc="redacting", unit=" rows") as shown:
                redacted = redact_older_than(
                    conn,
                    now - args.redact_older_than,
                    args.batch_size,
                    frozenset(settings.redact_fields),
                    shown.update,
                )
            print("redacted " + " ".join(f"{t}={n}" for t, n in redacted.items()))
    return 0


def register(commands) -> None:
    prune = commands.add_parser(
        "prune",
        help="delete old ledger rows and failures in batches (never fulfilments); "
        "redact WEBHOOK_REDACT_FIELDS from younger payloads",
    )
    prune.add_argument("--older-than", type=durations.span, required=True, help="e.g. 30d")
    prune.add_argument(
        "--redact-older-than",
        type=durations.span,
        default=timedelta(days=7),
        help="redact stored payloads older than this (default 7d; only with WEBHOOK_REDACT_FIELDS)",
    )
    prune.add_argument("--batch-size", type=int, default=1000)
    prune.add_argument(
        "--force", action="store_true", help="allow windows shorter than the 3-day retry horizon"
    )
    prune.set_defaults(func=_prune)
