"""The transaction boundary: one delivery, one connection, one transaction.

Claim, fulfilment and completion commit together or not at all, so a 200 is
only ever sent for committed effects and a failure leaves no claim behind for
the provider's retry to trip over.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import structlog
from psycopg import errors
from psycopg_pool import ConnectionPool, PoolTimeout

from . import db, ledger, registry
from .db import is_unavailable
from .events import Event, InvalidEvent

log = structlog.get_logger(__name__)

# A claim can vanish between our INSERT and SELECT (rolled back or pruned);
# looking again settles it, and after this many looks the provider's retry will.
_ATTEMPTS = 3


@dataclass(frozen=True)
class Answer:
    status: int
    body: str
    outcome: str
    replayed: bool = False


def json_body(**fields) -> str:
    return json.dumps(fields, separators=(",", ":"))


IN_PROGRESS = Answer(409, json_body(error="delivery_in_progress"), "in_progress")


def deliver(pool: ConnectionPool, provider: str, event: Event) -> Answer:
    try:
        return _settle(pool, provider, event)
    except errors.LockNotAvailable:
        return IN_PROGRESS
    except InvalidEvent as exc:
        return invalid_event(exc)
    except Exception as exc:
        _record_failure(pool, provider, event, exc)
        if is_unavailable(exc):
            return Answer(503, json_body(error="database_unavailable"), "unavailable")
        return Answer(500, json_body(error="fulfilment_failed"), "failed")


def invalid_event(exc: InvalidEvent) -> Answer:
    return Answer(400, json_body(error=exc.error, detail=str(exc)), "invalid")


def _settle(pool: ConnectionPool, provider: str, event: Event) -> Answer:
    conflict = None
    for _ in range(_ATTEMPTS):
        try:
            answer = _claim_and_fulfil(pool, provider, event)
        except errors.UniqueViolation as exc:
            # A duplicate committed a write our handler made without
            # ON CONFLICT; a fresh attempt sees it and answers from it.
            conflict = exc
            continue
        if answer is not None:
            return answer
    if conflict is not None:
        # Still clashing after fresh looks: not a race but a handler whose key
        # collides with committed data. A 409 would hide it until Stripe gives
        # up; failing loudly records it and keeps the event retryable.
        raise conflict
    return IN_PROGRESS


def _claim_and_fulfil(pool: ConnectionPool, provider: str, event: Event) -> Answer | None:
    with db.connection(pool) as conn, conn.transaction():
        ledger_id = ledger.claim(conn, provider, event)
        if ledger_id is None:
            stored = ledger.stored_answer(conn, provider, event.id, event.account_key)
            if stored is None:
                return None
            return Answer(stored.status, stored.body, "replayed", replayed=True)
        outcome = registry.run(conn, event)
        stored = ledger.Stored(200, json_body(event_id=event.id, outcome=outcome))
        ledger.complete(conn, ledger_id, outcome, stored)
    return Answer(stored.status, stored.body, outcome)


def _record_failure(pool: ConnectionPool, provider: str, event: Event, exc: Exception) -> None:
    log.error("delivery_failed", event_id=event.id, event_type=event.type, exc_info=exc)
    if isinstance(exc, PoolTimeout):
        # No connection could be had a moment ago: waiting for another one
        # to record that would only delay the 503 (the log line records it).
        return
    try:
        with db.connection(pool) as conn, conn.transaction():
            ledger.record_failure(conn, provider, event, exc)
    except Exception as record_exc:
        log.error("failure_not_recorded", event_id=event.id, error=type(record_exc).__name__)
