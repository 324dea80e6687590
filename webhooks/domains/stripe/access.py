"""Subscription access: the view's decision after an event or with time, and the job when it flips.

The rule itself is SQL (`subscription_access_at`, access.sql), so the
shop's code reading the `subscription_access` view and the handlers here
decide alike. Every handler that changes a subscription first claims its row
(which locks it, so the state it reads is the one its change applies to),
and `tracking` enqueues `subscription.access_changed` in the same
transaction when the decision differs from what the shop was last told
(`notified_access`): the job commits exactly with the change. Access also
ends with time alone (a grace running out, a `cancel_at` passing); `sweep`
tells those, under the same row lock, so each flip is told once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import psycopg
import structlog
from pydantic import ConfigDict

from webhooks.core import jobs, outbox
from webhooks.core.events import Event, Json
from webhooks.core.parts import Parts
from webhooks.infra.db import one, one_as

from . import scope

log = structlog.get_logger(__name__)


class SubscriptionAccessChangedJob(jobs.Job):
    """Key: `subscription.access_changed:<subscription_id>:<event_id>`, or `...:time:<moment>` for the
    sweep."""

    model_config = ConfigDict(title="A subscription's access granted or revoked")

    kind: Literal["subscription.access_changed"]
    subscription_id: str
    """the Subscription id"""
    account: str | None
    """the Connect account (`acct_...`) the object belongs to; null for the platform's own"""
    change: Literal["granted", "revoked"]
    """what changed"""
    reason: str
    """the access rule's branch that decided (docs/subscriptions.md, The access rule)"""
    access_until: jobs.Moment | None
    """when access ends if nothing changes (ISO 8601), when known"""
    event_id: str | None
    """the event that changed it; null when time alone did (the sweep)"""
    event_type: str | None
    """that event's type; null for the sweep"""


ACCESS_CHANGED = jobs.documented(SubscriptionAccessChangedJob)
PARTS = Parts(jobs=(ACCESS_CHANGED,))

# Creates the row or, when it exists, locks it with a no-op update; either
# way it returns the account stored with it, for the scope check, and what
# the shop was last told of its access.
_CLAIM_SUBSCRIPTION = """
INSERT INTO subscriptions AS s (subscription_id, account) VALUES (%s, %s)
ON CONFLICT (subscription_id) DO UPDATE SET account = s.account
RETURNING account, notified_access
"""

_DECISION = """
SELECT has_access, reason, access_until
FROM subscription_access_at(at => coalesce(%s::timestamptz, now()))
WHERE subscription_id = %s
"""

_NOTIFIED = "UPDATE subscriptions SET notified_access = %s WHERE subscription_id = %s"

# Candidates only: each is locked and decided again before anything is told.
_STALE = """
SELECT a.subscription_id
FROM subscription_access_at(at => coalesce(%s::timestamptz, now())) a
JOIN subscriptions s USING (subscription_id)
WHERE s.notified_access IS DISTINCT FROM a.has_access AND s.notified_access IS NOT NULL
"""

_LOCK = """
SELECT notified_access, account, coalesce(%s::timestamptz, now())
FROM subscriptions WHERE subscription_id = %s
FOR UPDATE SKIP LOCKED
"""

_PUBLISH = """
UPDATE subscription_access_settings
SET grace = %(grace)s, renewal_margin = %(margin)s, updated_at = now()
WHERE (grace, renewal_margin) IS DISTINCT FROM (%(grace)s, %(margin)s)
"""


@dataclass(frozen=True)
class Decision:
    has_access: bool
    reason: str
    access_until: datetime | None


def claim_row(
    conn: psycopg.Connection, event: Event, claim_sql: str, object_type: str, object_id: str
) -> tuple[Any, ...]:
    """Lock (creating if need be) the row `claim_sql` names and check the event's scope on it.

    Returns what `claim_sql` returns: the stored account first.
    """
    row = one(conn.execute(claim_sql, [object_id, event.account_key]))
    scope.check(conn, event, object_type, object_id, row[0])
    return row


def decision(conn: psycopg.Connection, subscription_id: str, at: datetime | None = None) -> Decision:
    """What the view says for one subscription of the mirror at `at` (the transaction's time by default)."""
    return one_as(conn, Decision, _DECISION, [at, subscription_id])


@contextmanager
def tracking(conn: psycopg.Connection, event: Event, subscription_id: str) -> Iterator[None]:
    """Run the body's change to the subscription; enqueue the job if access flipped.

    "Flipped" is against what the shop was last told, or, for a row no job
    has spoken of yet, against the decision before the change.
    """
    _, told = claim_row(conn, event, _CLAIM_SUBSCRIPTION, "subscription", subscription_id)
    if told is None:
        told = decision(conn, subscription_id).has_access
    yield
    after = decision(conn, subscription_id)
    if after.has_access != told:
        payload = {"account": event.account, "event_id": event.id, "event_type": event.type}
        _notify(conn, subscription_id, after, payload, key=event.id)
    conn.execute(_NOTIFIED, [after.has_access, subscription_id])


def sweep(conn: psycopg.Connection, at: datetime | None = None) -> int:
    """Tell every flip that time alone made by `at` (now by default); how many were told.

    Each subscription is its own transaction under its row lock, so a sweep
    and an event (or two sweeps, one per worker) never tell one flip twice;
    a row an event holds is skipped, and that event tells it.
    """
    told = 0
    for (subscription_id,) in conn.execute(_STALE, [at]).fetchall():
        with conn.transaction():
            row = conn.execute(_LOCK, [at, subscription_id]).fetchone()
            if row is None:
                continue  # an event holds it, and tells what it finds
            notified, account, moment = row
            now = decision(conn, subscription_id, at)
            if now.has_access == notified:
                continue
            payload = {"account": account or None, "event_id": None, "event_type": None}
            _notify(conn, subscription_id, now, payload, key=f"time:{moment.isoformat()}")
            conn.execute(_NOTIFIED, [now.has_access, subscription_id])
            told += 1
    return told


def _notify(conn: psycopg.Connection, subscription_id: str, after: Decision, cause: Json, key: str) -> None:
    outbox.enqueue(
        conn,
        ACCESS_CHANGED,
        {
            "subscription_id": subscription_id,
            "change": "granted" if after.has_access else "revoked",
            "reason": after.reason,
            "access_until": after.access_until.isoformat() if after.access_until else None,
            **cause,
        },
        idempotency_key=f"{ACCESS_CHANGED.name}:{subscription_id}:{key}",
    )


def publish_settings(url: str, grace: timedelta, renewal_margin: timedelta) -> None:
    """Write the service's grace and renewal margin where the view reads them.

    Best effort at start-up: a database that is down or not migrated yet
    must not stop the service from starting (it answers 503 until it is);
    the view keeps the spans last written, which an operator sees in
    `python -m webhooks subscriptions show`.
    """
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=3) as conn:
            conn.execute(_PUBLISH, {"grace": grace, "margin": renewal_margin})
    except psycopg.Error as exc:
        log.warning("subscription_settings_not_written", error=type(exc).__name__)
