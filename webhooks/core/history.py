"""The ledger read back for operators (`events` commands and /admin).

An event is `completed` when its ledger row committed with a success, and
`failed` when only failed attempts are recorded (a failure rolls its claim
back, so the failure table is the only trace until a retry succeeds) or
when its row holds a refusal for good (a 4xx answer: its object's fields
are not what the sender sends, core.events.InvalidFields).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from datetime import datetime

import psycopg
from psycopg.rows import class_row, dict_row

from .redaction import Policy

_FAILURES = """
SELECT provider, event_id, max(event_type) AS event_type, count(*) AS failures,
       min(failed_at) AS first_failed_at,
       (array_agg(error_class || ': ' || coalesce(error_message, '')
                  ORDER BY failed_at DESC))[1] AS last_error
FROM webhook_failures
GROUP BY provider, event_id
"""

# The status of a ledger row `e` as operators read it: one answered with a 4xx is a failure.
STATUS = "CASE WHEN e.response_status >= 400 THEN 'failed' ELSE e.status END"

_LIST = f"""
WITH failures AS ({_FAILURES}),
events AS (
    SELECT coalesce(e.provider, f.provider) AS provider,
           coalesce(e.event_id, f.event_id) AS event_id,
           coalesce(e.event_type, f.event_type) AS event_type,
           coalesce({STATUS}, 'failed') AS status,
           e.outcome,
           coalesce(f.failures, 0) AS failures,
           coalesce(e.received_at, f.first_failed_at) AS received_at,
           f.last_error
    FROM webhook_events e
    FULL JOIN failures f ON f.provider = e.provider AND f.event_id = e.event_id
)
SELECT provider, event_id, event_type, status, outcome, failures, received_at, last_error
FROM events
WHERE (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(provider)s::text IS NULL OR provider = %(provider)s)
  AND (%(type)s::text IS NULL OR event_type = %(type)s)
  AND (%(since)s::timestamptz IS NULL OR received_at >= %(since)s)
  AND (%(after_at)s::timestamptz IS NULL
       OR received_at < %(after_at)s OR (received_at = %(after_at)s AND event_id > %(after_id)s))
  AND (%(search)s::text IS NULL OR event_id = %(search)s
       OR EXISTS (SELECT 1 FROM webhook_events x
                  JOIN webhook_payloads p ON p.ledger_id = x.id AND p.received_at = x.received_at
                  WHERE x.provider = events.provider AND x.event_id = events.event_id
                    AND p.payload ~ %(in_payload)s)
       OR EXISTS (SELECT 1 FROM webhook_failures x
                  WHERE x.provider = events.provider AND x.event_id = events.event_id
                    AND x.payload ~ %(in_payload)s))
ORDER BY received_at DESC, event_id
LIMIT %(limit)s
"""

# What an operator may search by: an id as a provider writes one (Stripe's
# pi_..., cs_..., cus_...; Shopify's numbers; GitHub's GUIDs), nothing a
# pattern could be made of.
_SEARCHABLE = re.compile(r"[A-Za-z0-9_.:-]{1,255}")
# A page's rows at most, on /admin and in `events list`.
MAX_PAGE = 500

_LEDGER_ROW = f"""
SELECT e.event_type, {STATUS} AS status, e.outcome, e.response_status, e.response_body,
       e.received_at, e.completed_at, p.payload, e.account
FROM webhook_events e
LEFT JOIN webhook_payloads p ON p.ledger_id = e.id AND p.received_at = e.received_at
WHERE e.provider = %s AND e.event_id = %s
"""

_FAILED_ATTEMPTS = """
SELECT failed_at, event_type, error_class, error_message, payload, handler, account, raised_at
FROM webhook_failures
WHERE provider = %s AND event_id = %s
ORDER BY failed_at, id
"""


@dataclass(frozen=True)
class EventSummary:
    provider: str
    event_id: str
    event_type: str | None
    status: str
    outcome: str | None
    failures: int
    received_at: datetime
    last_error: str | None


@dataclass(frozen=True)
class Failure:
    failed_at: datetime
    error_class: str
    error_message: str | None
    # The handler the attempt ran (module.function), None when none was registered.
    handler: str | None
    # Where it raised: module:function:line (None for attempts recorded before it was kept).
    raised_at: str | None = None


@dataclass(frozen=True)
class EventDetail:
    provider: str
    event_id: str
    event_type: str | None
    status: str
    outcome: str | None
    response_status: int | None
    response_body: str | None
    received_at: datetime | None
    completed_at: datetime | None
    # The stored body: the ledger's, else the latest failed attempt's.
    payload: str | None
    failures: list[Failure]
    # The account or shop stored with the ledger row or the latest failed attempt ('' or None for none).
    account: str | None = None


class BadSearch(ValueError):
    """A search or a page's cursor that names nothing: one line for the operator."""


@dataclass(frozen=True)
class Cursor:
    """Where a page ended (keyset paging): the next one starts after this row, however many came since."""

    received_at: datetime
    event_id: str

    def __str__(self) -> str:
        return f"{self.received_at.isoformat()},{self.event_id}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        at, _, event_id = text.partition(",")
        try:
            return cls(datetime.fromisoformat(at), event_id)
        except ValueError:
            raise BadSearch(f"not a page cursor: {text[:80]!r} (it is <received_at>,<event_id>)") from None


def _in_payload(search: str) -> str:
    """A payload that has `search` as a whole value: a JSON string, or a bare number."""
    if not _SEARCHABLE.fullmatch(search):
        raise BadSearch("search for one id: letters, digits and _ . : - only, at most 255")
    quoted = f'"{re.escape(search)}"'
    return f"{quoted}|[:,\\[]\\s*{search}\\s*[],}}]" if search.isdigit() else quoted


def events(
    conn: psycopg.Connection,
    status: str | None = None,
    event_type: str | None = None,
    since: datetime | None = None,
    limit: int | None = 50,
    provider: str | None = None,
    search: str | None = None,
    after: Cursor | None = None,
) -> list[EventSummary]:
    """Most recent first, completed and failed alike unless `status` says which; any provider unless named.

    `search` is an id: the event's own, or one its payload has as a value
    (a payment, session, order, customer, refund or dispute). `after` is the
    previous page's last row. No `limit` (None) is every one.
    """
    params = {
        "status": status,
        "type": event_type,
        "since": since,
        "limit": limit,
        "provider": provider,
        "search": search,
        "in_payload": _in_payload(search) if search else None,
        "after_at": after and after.received_at,
        "after_id": after and after.event_id,
    }
    return conn.cursor(row_factory=class_row(EventSummary)).execute(_LIST, params).fetchall()


def to_reprocess(
    conn: psycopg.Connection,
    since: datetime | None = None,
    event_type: str | None = None,
    provider: str | None = None,
    refused: bool = False,
) -> list[EventSummary]:
    """The failed events a bulk reprocess re-runs (`events reprocess --status failed`, /admin), oldest first.

    Only those whose claim never completed; with `refused`, only those
    refused for good instead (a 4xx, its ledger row written), which a
    reprocess judges again (`events reprocess --status refused`).
    """
    rows = events(conn, "failed", event_type, since, None, provider)
    return [row for row in reversed(rows) if (row.outcome is not None) == refused]


def shown(detail: EventDetail, policy: Policy) -> EventDetail:
    """`detail` as an operator may see it: its payload and its failures' text under `policy`."""
    return replace(
        detail,
        payload=policy.payload(detail.payload),
        failures=[replace(f, error_message=policy.text(f.error_message)) for f in detail.failures],
    )


def readable(payload: str | None) -> str | None:
    """A stored payload indented for a person; text that is not JSON as it is."""
    if payload is None:
        return None
    try:
        return json.dumps(json.loads(payload), indent=2)
    except ValueError:
        return payload


@dataclass(frozen=True)
class _Attempt:
    failed_at: datetime
    event_type: str | None
    error_class: str
    error_message: str | None
    payload: str | None
    handler: str | None
    account: str | None
    raised_at: str | None


def event(conn: psycopg.Connection, provider: str, event_id: str) -> EventDetail | None:
    found = [provider, event_id]
    # The ledger row's columns are EventDetail's fields of the same names.
    ledger = conn.cursor(row_factory=dict_row).execute(_LEDGER_ROW, found).fetchone()
    attempts = conn.cursor(row_factory=class_row(_Attempt)).execute(_FAILED_ATTEMPTS, found).fetchall()
    if ledger is None and not attempts:
        return None
    failures = [
        Failure(a.failed_at, a.error_class, a.error_message, a.handler, a.raised_at) for a in attempts
    ]
    if ledger is None:
        latest = attempts[-1]
        return EventDetail(
            provider,
            event_id,
            latest.event_type,
            "failed",
            None,
            None,
            None,
            attempts[0].failed_at,
            None,
            latest.payload,
            failures,
            latest.account,
        )
    return EventDetail(provider=provider, event_id=event_id, failures=failures, **ledger)
