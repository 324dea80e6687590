"""Connect scope as a checked attribute of an object, never part of its key.

The account an event is scoped to comes from its envelope (`account`, or a
thin event's `context`), and the same object can reach us under two of
them: an organisation destination puts `context` on a platform's own
events, a plain endpoint does not. Keying rows by account would give that
object two rows (a refund landing beside its payment, access never
revoked), so rows are keyed by the globally unique object id and store the
first account seen; a later event under another account is recorded and
alerted on here, and its effects still apply to the one row.
"""

from __future__ import annotations

from typing import Any

import psycopg
import structlog
from prometheus_client import Counter

from webhooks.core.events import Event
from webhooks.core.parts import Parts
from webhooks.core.scope import record

log = structlog.get_logger(__name__)

# Counted where handlers run, outside any app; the web app's /metrics exposes it.
SCOPE_CONFLICTS = Counter(
    "webhook_scope_conflicts_total",
    "Events that named another Connect account for an object already stored",
    ["object_type"],
    registry=None,
)
PARTS = Parts(metrics=(SCOPE_CONFLICTS,))


def check(
    conn: psycopg.Connection,
    event: Event,
    object_type: str,
    object_id: str,
    stored_account: str | None,
) -> bool:
    """True when the stored account (None: no row yet) agrees with the event's.

    A disagreement is written on the caller's connection, in its transaction,
    so it is recorded exactly when the event's effects commit.
    """
    if stored_account is None or stored_account == event.account_key:
        return True
    record(conn, event, object_type, object_id, stored_account)
    alert(event, object_type, object_id, stored_account)
    return False


def alert(event: Event, object_type: str, object_id: str, stored_account: str) -> None:
    """Count and log a disagreement already recorded (by `check`, or by SQL that checked it)."""
    SCOPE_CONFLICTS.labels(object_type).inc()
    log.warning(
        "scope_conflict",
        object_type=object_type,
        object_id=object_id,
        stored_account=stored_account,
        event_account=event.account_key,
        event_id=event.id,
    )


def stored(
    conn: psycopg.Connection, event: Event, object_type: str, object_id: str, query: str
) -> tuple[Any, ...] | None:
    """The object's stored row from `query` (its account second), its scope checked.

    The row is read after the payment's row lock, so it cannot change under us.
    """
    row = conn.execute(query, [object_id]).fetchone()
    check(conn, event, object_type, object_id, row[1] if row else None)
    return row
