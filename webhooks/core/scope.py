"""An object's scope (a Connect account, a shop) disagreeing with an event's: recorded with its effects.

Domains key rows by their provider's globally unique object ids and store
the first account (or shop) seen with them. An event of the object under
another is recorded in `scope_conflicts` by the SQL function in scope.sql,
on the event's connection, so it is recorded exactly when the event's
effects commit; what a disagreement changes is the domain's to say.
"""

from __future__ import annotations

import psycopg

from .events import Event

_RECORD = """
SELECT webhooks_scope_conflict(
    p_object_type => %(object_type)s, p_object_id => %(object_id)s,
    p_stored_account => %(stored_account)s, p_event_account => %(event_account)s,
    p_event_id => %(event_id)s)
"""


def record(conn: psycopg.Connection, event: Event, object_type: str, object_id: str, stored: str) -> None:
    """Record that `event` names its account for an object stored under another, `stored`."""
    conn.execute(
        _RECORD,
        {
            "object_type": object_type,
            "object_id": object_id,
            "stored_account": stored,
            "event_account": event.account_key,
            "event_id": event.id,
        },
    )
