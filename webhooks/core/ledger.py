"""The webhook_events ledger: claiming an event id, completing it, reading it back.

Every function takes a connection already inside the caller's transaction,
except `record_failure`, which must not be (see its docstring), and
`claim_in_one_statement`, whose statement is its own transaction.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row

from webhooks.infra import db
from webhooks.infra.logs import public_message

from .events import Event, Unprocessable

# The claim and completion are SQL functions (ledger.sql), because a
# one-statement delivery runs them too. A claim is completed at once
# (status, outcome, answer) when the answer is known before any handler
# runs; else 'processing' until `complete`. `(claim).*` is the
# webhooks_claimed row: the new id, or the answer of the row holding the id.
_CLAIM = """
SELECT (claim).*
FROM webhooks_claim(
    p_provider => %(provider)s, p_event_id => %(event_id)s, p_event_type => %(event_type)s,
    p_account => %(account)s, p_livemode => %(livemode)s, p_created => %(created)s,
    p_payload => %(payload)s, p_status => %(status)s, p_outcome => %(outcome)s,
    p_response_status => %(response_status)s::smallint, p_response_body => %(response_body)s
) AS claim
"""
# The row's width: a one-statement delivery selects `(claim).*` first, then its own columns.
_CLAIM_COLUMNS = 5

_COMPLETE = """
SELECT webhooks_complete(
    p_ledger_id => %(ledger_id)s, p_outcome => %(outcome)s,
    p_response_status => %(response_status)s::smallint, p_response_body => %(response_body)s)
"""

_RECORD_FAILURE = """
INSERT INTO webhook_failures
    (provider, event_id, event_type, account, error_class, error_message, payload, handler, raised_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
"""


class EventIdReused(Unprocessable):
    """The event id is claimed by an event of another type: not a redelivery of this one.

    Answering it as a replay would drop this event without a trace. A
    provider should never do this (Stripe's and GitHub's ids are unique;
    Shopify's docs say one event id means one event, though its libraries
    call the webhook id the idempotency key), so it is refused loudly and
    recorded, for an operator to look at.
    """

    error = "event_id_reused"


@dataclass(frozen=True)
class Stored:
    """The answer given when the event was completed."""

    status: int
    body: str


@dataclass(frozen=True)
class Claim:
    """A claim's result: the new row's id, or else the answer the row holding the id gave.

    `held` is None when there is no completed answer to replay: the row that
    beat ours can have been pruned, or never committed, by the time it was read.
    """

    ledger_id: int | None
    held: Stored | None = None


def claim(
    conn: psycopg.Connection,
    provider: str,
    event: Event,
    completed: tuple[str, Stored] | None = None,
) -> Claim:
    """Insert the ledger row, or read the one that holds the event id, in one statement.

    With `completed` (outcome, answer) the row is written completed, for an
    event whose answer is known without running a handler.

    If another transaction holds an uncommitted claim on the same id, this
    blocks until that transaction ends or the session's lock_timeout fires
    (LockNotAvailable), which is what bounds a duplicate's wait.
    """
    params = {**claim_arguments(provider, event), **_completion(completed)}
    return claimed(event, db.one(db.cursor(conn).execute(_CLAIM, params)))


def claim_in_one_statement(
    conn: psycopg.Connection, query: str, provider: str, event: Event, params: dict[str, Any]
) -> tuple[Claim, tuple[Any, ...]]:
    """Claim `event` as part of `query`, one statement, which commits on its own.

    `query` calls a SQL function that runs the claim (webhooks_claim) with
    the claim's named arguments (`claim_arguments`, as `p_provider =>
    %(provider)s` and so on: webhooks_claim's) besides its own `params`, and selects the
    claim's row, `(claim).*`, before its own columns. Returns the Claim and
    those columns.
    """
    row = db.one(db.cursor(conn).execute(query, {**claim_arguments(provider, event), **params}))
    return claimed(event, row[:_CLAIM_COLUMNS]), row[_CLAIM_COLUMNS:]


def claimed(event: Event, row: tuple[Any, ...]) -> Claim:
    """The Claim from a claim function's row.

    Event ids are unique across Stripe, so the event that reaches us under
    two scopes (an organisation destination's `context`, a plain endpoint)
    is one event, answered once. A completed row of another type under the
    id raises EventIdReused.
    """
    ledger_id, status, response_status, body, held_type = row
    if ledger_id is not None:
        return Claim(ledger_id)
    if status != "completed":
        return Claim(None)
    if held_type is not None and event.type is not None and held_type != event.type:
        raise EventIdReused(f"{event.id} is already the id of a {held_type} event, not of this {event.type}")
    return Claim(None, Stored(status=response_status, body=body))


def claim_arguments(provider: str, event: Event) -> dict[str, Any]:
    """The row's own fields, as every claim function takes them by name."""
    return {
        "provider": provider,
        "event_id": event.id,
        "event_type": event.type,
        "account": event.account_key,
        "livemode": event.livemode,
        "created": event.created,
        "payload": event.raw,
    }


def _completion(completed: tuple[str, Stored] | None) -> dict[str, Any]:
    if completed is None:
        return {"status": "processing", "outcome": None, "response_status": None, "response_body": None}
    outcome, stored = completed
    return {
        "status": "completed",
        "outcome": outcome,
        "response_status": stored.status,
        "response_body": stored.body,
    }


# A stored refusal for good (a 422) taken back to `processing` under its row
# lock, as a claim would be, so a redelivery meanwhile waits (409) and a
# rollback leaves the refusal as it was; the outbox jobs the re-judging
# enqueues name the event, as a claim's do (webhooks_claim, ledger.sql).
_REOPEN = """
WITH reopened AS (
    UPDATE webhook_events
    SET status = 'processing', outcome = NULL, response_status = NULL, response_body = NULL,
        completed_at = NULL
    WHERE provider = %(provider)s AND event_id = %(event_id)s
      AND status = 'completed' AND response_status = 422
    RETURNING id
)
SELECT id, set_config('webhooks.event_provider', %(provider)s, true),
       set_config('webhooks.event_id', %(event_id)s, true)
FROM reopened
"""


def reopen(conn: psycopg.Connection, provider: str, event_id: str) -> int | None:
    """Take the event's stored refusal (422) back as this transaction's claim: its ledger id, or None."""
    row = db.cursor(conn).execute(_REOPEN, {"provider": provider, "event_id": event_id}).fetchone()
    return None if row is None else row[0]


def complete(conn: psycopg.Connection, ledger_id: int, outcome: str, stored: Stored) -> None:
    db.cursor(conn).execute(
        _COMPLETE,
        {
            "ledger_id": ledger_id,
            "outcome": outcome,
            "response_status": stored.status,
            "response_body": stored.body,
        },
    )


def record_failure(
    conn: psycopg.Connection, provider: str, event: Event, error: BaseException, handler: str | None
) -> None:
    """Write a failed attempt, and the handler it ran, on `conn`, which must not be in the aborted claim.

    A write inside the transaction that failed is refused (25P02) or rolled
    back with it; this has to be its own transaction on a healthy connection.
    The event's account is kept with it: a provider whose scope travels in an
    unsigned header (Shopify's shop) needs it to read the stored body back.
    """
    conn.execute(
        _RECORD_FAILURE,
        [
            provider,
            event.id,
            event.type,
            event.account,
            type(error).__name__,
            public_message(error)[:2000],
            event.raw,
            handler,
            raised_at(error, handler),
        ],
    )


def raised_at(error: BaseException, handler: str | None) -> str | None:
    """Where `error` was raised, as module:function:line: in the handler's module when the
    raise passed through it (a library's frame below says less to its author), else the last frame."""
    frames = [
        (frame.f_globals.get("__name__", "?"), frame.f_code.co_name, line)
        for frame, line in traceback.walk_tb(error.__traceback__)
    ]
    own = [frame for frame in frames if handler and handler.startswith(f"{frame[0]}.")]
    if not (own or frames):
        return None
    name, function, line = (own or frames)[-1]
    return f"{name}:{function}:{line}"


_STORED_EVENTS = """
SELECT e.event_id, e.event_type, e.account, p.payload
FROM webhook_events e
JOIN webhook_payloads p ON p.ledger_id = e.id AND p.received_at = e.received_at
WHERE e.provider = %(provider)s
  AND (%(ids)s::text[] IS NULL OR e.event_id = ANY(%(ids)s))
  AND (%(types)s::text[] IS NULL OR e.event_type = ANY(%(types)s))
  AND (%(since)s::timestamptz IS NULL OR e.received_at >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR e.received_at < %(until)s)
ORDER BY e.received_at, e.id
LIMIT %(limit)s
"""


def stored_events(
    conn: psycopg.Connection,
    provider: str,
    *,
    ids: list[str] | None = None,
    types: list[str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int | None = None,
) -> list[StoredEvent]:
    """The matching events, oldest first, each with its raw payload as received.

    A criterion left as None does not filter.
    """
    params = dict(provider=provider, ids=ids, types=types, since=since, until=until, limit=limit)
    return conn.cursor(row_factory=class_row(StoredEvent)).execute(_STORED_EVENTS, params).fetchall()


@dataclass(frozen=True)
class StoredEvent:
    event_id: str
    event_type: str | None
    account: str | None
    payload: str
