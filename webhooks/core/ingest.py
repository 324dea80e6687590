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

from webhooks.infra import db
from . import ledger, registry
from webhooks.infra.config import Settings
from webhooks.infra.db import is_unavailable
from .events import STRIPE, Event, InvalidEvent, UnsupportedApiVersion, mode_outcome, require_api_version

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


def accept(pool: ConnectionPool, provider: str, event: Event, settings: Settings) -> Answer:
    """A verified, parsed event's answer: the path every delivery, backfill and fetch takes.

    A connected account's event of the other mode is claimed and skipped. A
    handled event in an API version the handlers cannot read is re-synced
    (claimed, its object fetched later in the pinned version) when the
    Stripe API is configured and a re-sync is registered, else refused (500).
    Other providers' events have no mode or API version: they are delivered.
    """
    if provider != STRIPE:
        return deliver(pool, provider, event)
    try:
        skip = mode_outcome(event, settings.stripe_mode)
    except InvalidEvent as exc:
        return invalid_event(exc)
    if skip is not None:
        return deliver(pool, provider, event, lambda conn, event: skip)
    if registry.handled(event.type):
        try:
            require_api_version(event, settings.stripe_api_versions)
        except UnsupportedApiVersion as exc:
            resync = registry.fallback("resync") if settings.stripe_api_key else None
            if resync is None:
                return refuse(pool, provider, event, exc)
            return deliver(pool, provider, event, resync)
    return deliver(pool, provider, event)


def deliver(
    pool: ConnectionPool, provider: str, event: Event, handler: registry.Handler | None = None
) -> Answer:
    """Claim and fulfil `event` with its registered handler, or with `handler` when given."""
    try:
        return _settle(pool, provider, event, handler)
    except errors.LockNotAvailable:
        return IN_PROGRESS
    except InvalidEvent as exc:
        return invalid_event(exc)
    except (UnsupportedApiVersion, ledger.EventIdReused) as exc:
        return refuse(pool, provider, event, exc)
    except Exception as exc:
        _record_failure(pool, provider, event, exc)
        if is_unavailable(exc):
            return Answer(503, json_body(error="database_unavailable"), "unavailable")
        return Answer(500, json_body(error="fulfilment_failed"), "failed")


def invalid_event(exc: InvalidEvent) -> Answer:
    return Answer(400, json_body(error=exc.error, detail=str(exc)), "invalid")


def refuse(
    pool: ConnectionPool, provider: str, event: Event, exc: UnsupportedApiVersion | ledger.EventIdReused
) -> Answer:
    """A 500 recorded as a failure, claiming nothing: the provider retries, and an operator sees it."""
    _record_failure(pool, provider, event, exc)
    return Answer(500, json_body(error=exc.error, detail=str(exc)), exc.error)


def _settle(
    pool: ConnectionPool, provider: str, event: Event, handler: registry.Handler | None
) -> Answer:
    conflict = None
    for _ in range(_ATTEMPTS):
        try:
            answer = _claim_and_fulfil(pool, provider, event, handler)
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


def _claim_and_fulfil(
    pool: ConnectionPool, provider: str, event: Event, handler: registry.Handler | None
) -> Answer | None:
    settled = None if handler else registry.settled(event, provider)
    if settled is not None:
        return _claim_settled(pool, provider, event, settled)
    whole = None if handler else registry.one_statement(event, provider)
    if whole is not None:
        return _deliver_in_one_statement(pool, provider, event, whole)
    with db.connection(pool) as conn, db.transaction(conn):
        claim = ledger.claim(conn, provider, event)
        if claim.ledger_id is None:
            return _replayed(claim)
        outcome = handler(conn, event) if handler else registry.run(conn, event, provider)
        stored = _stored(event, outcome)
        ledger.complete(conn, claim.ledger_id, outcome, stored)
    return Answer(stored.status, stored.body, outcome)


def _claim_settled(pool: ConnectionPool, provider: str, event: Event, outcome: str) -> Answer | None:
    """An event no handler acts on, claimed already completed: one statement, no transaction.

    The ledger row is all such an event writes, so the one INSERT commits
    claim and completion together, as the transaction would, in one round
    trip instead of four (BEGIN, claim, complete, COMMIT).
    """
    stored = _stored(event, outcome)
    with db.connection(pool) as conn:
        claim = ledger.claim(conn, provider, event, completed=(outcome, stored))
    if claim.ledger_id is None:
        return _replayed(claim)
    return Answer(stored.status, stored.body, outcome)


def _deliver_in_one_statement(
    pool: ConnectionPool, provider: str, event: Event, whole: registry.OneStatement
) -> Answer | None:
    """Claim, effects and completion in one statement, which commits them together.

    Outside a transaction block a statement is its own transaction: this is
    the transaction above in one round trip instead of six, for the events
    most deliveries are (a payment's success).
    """
    with db.connection(pool) as conn:
        claim, outcome = whole.deliver(conn, provider, event)
    if claim.ledger_id is None:
        return _replayed(claim)
    stored = _stored(event, outcome)
    return Answer(stored.status, stored.body, outcome)


def _stored(event: Event, outcome: str) -> ledger.Stored:
    return ledger.Stored(200, json_body(event_id=event.id, outcome=outcome))


def _replayed(claim: ledger.Claim) -> Answer | None:
    """The completed answer of the delivery that beat our claim; None if there is none to read."""
    if claim.held is None:
        return None
    return Answer(claim.held.status, claim.held.body, "replayed", replayed=True)


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
