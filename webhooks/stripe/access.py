"""Subscription access: the view's decision before and after an event, and the job when it flips.

The rule itself is SQL (`subscription_access_at`, migrations/0017), so the
shop's code reading the `subscription_access` view and the handlers here
decide alike. Every handler that changes a subscription first claims its row
(which locks it, so the "before" it reads is the state its change applies
to), and `tracking` enqueues `subscription.access_changed` in the same
transaction when the decision flips: the job commits exactly with the change.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterator

import psycopg
import structlog

from ..service import outbox
from ..service.events import Event
from . import scope

log = structlog.get_logger(__name__)

ACCESS_CHANGED = "subscription.access_changed"

# Creates the row or, when it exists, locks it with a no-op update; either
# way it returns the account stored with it, for the scope check.
_CLAIM_SUBSCRIPTION = """
INSERT INTO subscriptions AS s (subscription_id, account) VALUES (%s, %s)
ON CONFLICT (subscription_id) DO UPDATE SET account = s.account
RETURNING account
"""

_DECISION = """
SELECT has_access, reason, access_until
FROM subscription_access_at(coalesce(%s::timestamptz, now()))
WHERE subscription_id = %s
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
) -> None:
    """Lock (creating if need be) the row `claim_sql` names and check the event's scope on it."""
    stored = conn.execute(claim_sql, [object_id, event.account_key]).fetchone()[0]
    scope.check(conn, event, object_type, object_id, stored)


def decision(
    conn: psycopg.Connection, subscription_id: str, at: datetime | None = None
) -> Decision | None:
    """What the view says for one subscription at `at` (the transaction's time by default)."""
    row = conn.execute(_DECISION, [at, subscription_id]).fetchone()
    return Decision(*row) if row else None


@contextmanager
def tracking(conn: psycopg.Connection, event: Event, subscription_id: str) -> Iterator[None]:
    """Run the body's change to the subscription; enqueue the job if access flipped."""
    claim_row(conn, event, _CLAIM_SUBSCRIPTION, "subscription", subscription_id)
    before = decision(conn, subscription_id)
    yield
    after = decision(conn, subscription_id)
    if after.has_access != before.has_access:
        _notify(conn, event, subscription_id, after)


def _notify(conn: psycopg.Connection, event: Event, subscription_id: str, after: Decision) -> None:
    outbox.enqueue(
        conn,
        ACCESS_CHANGED,
        {
            "subscription_id": subscription_id,
            "account": event.account,
            "change": "granted" if after.has_access else "revoked",
            "reason": after.reason,
            "access_until": after.access_until.isoformat() if after.access_until else None,
            "event_id": event.id,
            "event_type": event.type,
        },
        idempotency_key=f"{ACCESS_CHANGED}:{subscription_id}:{event.id}",
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
