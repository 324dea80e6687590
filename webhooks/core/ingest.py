"""The transaction boundary: an admitted event accepted, one connection, one transaction.

Claim, fulfilment and completion commit together or not at all, so a 200 is
only ever sent for committed effects and a failure leaves no claim behind for
the provider's retry to trip over. An accepted event takes one of three
shapes, which the registry's plan names:

- settled: no handler runs, so the claim is inserted already completed with
  an outcome word, one statement (an event nobody handles, a connected
  account's event of the other Stripe mode);
- one statement: a handler whose whole effect, claim and completion
  included, is a SQL function, called in one statement (a payment's success);
- a transaction: BEGIN, the claim, the handler, the completion, COMMIT.

An event whose object is not what its sender sends (InvalidFields) is
claimed with its 422 and its failure in one transaction, and no handler
ever runs for it: every redelivery gets that stored answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import structlog
from psycopg import errors

from webhooks.infra import db
from webhooks.infra.db import Pool, is_unavailable

from . import ledger
from .events import Event, InvalidEvent, InvalidFields, Unprocessable
from .registry import Handler, InOneStatement, InTransaction, OneStatement, Plan, Registry, Settled

log = structlog.get_logger(__name__)

# A claim can vanish between our INSERT and SELECT (rolled back or pruned);
# looking again answers it, and after this many looks the provider's retry will.
_ATTEMPTS = 3


@dataclass(frozen=True)
class Answer:
    status: int
    body: str
    outcome: str
    replayed: bool = False


def json_body(**fields: Any) -> str:
    return json.dumps(fields, separators=(",", ":"))


IN_PROGRESS = Answer(409, json_body(error="delivery_in_progress"), "in_progress")


def accept(
    pool: Pool,
    registry: Registry,
    provider: str,
    event: Event,
    settled: str | None = None,
    rejudge: bool = False,
) -> Answer:
    """Accept an admitted event: its claim, its plan, its answer (every delivery, backfill, reprocess, fetch).

    `settled` is the outcome word its provider's admission settled it with,
    if any: the event is claimed completed with it and no handler runs.
    `rejudge` (reprocess of a stored refusal, after an upgrade): a stored
    422 is judged again by this process's rules, through its own row
    (`Rejudged`); refused again, the stored 422 stays and is replayed.
    """
    try:
        try:
            plan = Settled(settled) if settled is not None else registry.plan(provider, event)
            if rejudge:
                return _answer(
                    pool, provider, event, Rejudged(_as_transaction(registry, provider, event, plan))
                )
            return _answer(pool, provider, event, plan)
        except InvalidFields as exc:
            # Refused for good, whatever a handler had begun rolled back.
            rejected = Rejected(exc, registry.handler_name(provider, event.type))
            return _answer(pool, provider, event, rejected)
    except errors.LockNotAvailable:
        return IN_PROGRESS
    except InvalidEvent as exc:
        return refuse_invalid(pool, registry, provider, event, exc)
    except Unprocessable as exc:
        return refuse(pool, registry, provider, event, exc)
    except Exception as exc:
        _record_failure(pool, registry, provider, event, exc)
        if is_unavailable(exc):
            return Answer(503, json_body(error="database_unavailable"), "unavailable")
        return Answer(500, json_body(error="fulfilment_failed"), "failed")


def invalid_event(exc: InvalidEvent) -> Answer:
    return Answer(400, json_body(error=exc.error, detail=str(exc)), "invalid")


def refuse_invalid(pool: Pool, registry: Registry, provider: str, event: Event, exc: InvalidEvent) -> Answer:
    """A signed, parsed event refused as unusable (400), recorded as a failure: never without a trace."""
    _record_failure(pool, registry, provider, event, exc)
    return invalid_event(exc)


def refuse(pool: Pool, registry: Registry, provider: str, event: Event, exc: Unprocessable) -> Answer:
    """A 500 recorded as a failure, claiming nothing: the provider retries, and an operator sees it."""
    _record_failure(pool, registry, provider, event, exc)
    return Answer(500, json_body(error=exc.error, detail=str(exc)), exc.error)


@dataclass(frozen=True)
class Rejudged:
    """A stored refusal's row taken back as the claim (ledger.reopen), then this plan, in one transaction."""

    plan: Settled | InTransaction


def _as_transaction(registry: Registry, provider: str, event: Event, plan: Plan) -> Settled | InTransaction:
    """The plan as a transaction: a one-statement plan claims a new row, so its handler runs instead."""
    if isinstance(plan, InOneStatement):
        return InTransaction(registry.handler(provider, event.type))
    return plan


@dataclass(frozen=True)
class Rejected:
    """No handler runs, now or later: the claim is completed with this refusal, and its failure recorded."""

    refusal: InvalidFields
    handler: str | None


def _answer(pool: Pool, provider: str, event: Event, plan: Plan | Rejected | Rejudged) -> Answer:
    """The plan's answer, looking again while a claim that beat ours has none to replay."""
    conflict = None
    for _ in range(_ATTEMPTS):
        try:
            answer = _attempt(pool, provider, event, plan)
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


def _attempt(pool: Pool, provider: str, event: Event, plan: Plan | Rejected | Rejudged) -> Answer | None:
    """The answer, or None when the claim that beat ours left no answer to replay (look again)."""
    match plan:
        case Settled(outcome):
            return _settled(pool, provider, event, outcome)
        case Rejected(refusal, handler):
            return _rejected(pool, provider, event, refusal, handler)
        case Rejudged(inner):
            return _rejudged(pool, provider, event, inner)
        case InOneStatement(statement):
            return _in_one_statement(pool, provider, event, statement)
        case InTransaction(handler):
            return _in_transaction(pool, provider, event, handler)


def _settled(pool: Pool, provider: str, event: Event, outcome: str) -> Answer | None:
    """No handler runs: the claim is inserted completed, one statement, no transaction.

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


def _rejected(
    pool: Pool, provider: str, event: Event, refusal: InvalidFields, handler: str | None
) -> Answer | None:
    """The claim completed with the refusal, and the failure that shows it, committed together."""
    stored = ledger.Stored(
        refusal.status, json_body(event_id=event.id, error=refusal.error, detail=str(refusal))
    )
    with db.connection(pool) as conn, db.transaction(conn):
        claim = ledger.claim(conn, provider, event, completed=(refusal.error, stored))
        if claim.ledger_id is None:
            return _replayed(claim)
        ledger.record_failure(conn, provider, event, refusal, handler)
    log.warning("delivery_rejected", event_id=event.id, event_type=event.type, detail=str(refusal))
    return Answer(stored.status, stored.body, refusal.error)


def _in_one_statement(pool: Pool, provider: str, event: Event, whole: OneStatement) -> Answer | None:
    """Claim, effects and completion in one statement, which commits them together.

    Outside a transaction block a statement is its own transaction: this is
    the transaction below in one round trip instead of six, for the events
    most deliveries are (a payment's success).
    """
    with db.connection(pool) as conn:
        claim, outcome = whole.accept(conn, provider, event)
    if claim.ledger_id is None or outcome is None:
        return _replayed(claim)
    stored = _stored(event, outcome)
    return Answer(stored.status, stored.body, outcome)


def _in_transaction(pool: Pool, provider: str, event: Event, handler: Handler) -> Answer | None:
    """BEGIN, the claim, the handler on the claim's connection, the completion, COMMIT."""
    with db.connection(pool) as conn, db.transaction(conn):
        claim = ledger.claim(conn, provider, event)
        if claim.ledger_id is None:
            return _replayed(claim)
        outcome = handler(conn, event)
        stored = _stored(event, outcome)
        ledger.complete(conn, claim.ledger_id, outcome, stored)
    return Answer(stored.status, stored.body, outcome)


def _rejudged(pool: Pool, provider: str, event: Event, plan: Settled | InTransaction) -> Answer | None:
    """BEGIN, the stored refusal's row reopened (or, with none, a claim), the plan, the completion, COMMIT.

    Audited: the refusal's failure row stays, and a log line names the
    event, the refusal it replaced and the outcome.
    """
    with db.connection(pool) as conn, db.transaction(conn):
        reopened = ledger.reopen(conn, provider, event.id)
        claim = ledger.Claim(reopened) if reopened is not None else ledger.claim(conn, provider, event)
        if claim.ledger_id is None:
            return _replayed(claim)
        outcome = plan.outcome if isinstance(plan, Settled) else plan.handler(conn, event)
        stored = _stored(event, outcome)
        ledger.complete(conn, claim.ledger_id, outcome, stored)
    if reopened is not None:
        log.warning(
            "stored_refusal_rejudged",
            provider=provider,
            event_id=event.id,
            event_type=event.type,
            outcome=outcome,
        )
    return Answer(stored.status, stored.body, outcome)


def _stored(event: Event, outcome: str) -> ledger.Stored:
    return ledger.Stored(200, json_body(event_id=event.id, outcome=outcome))


def _replayed(claim: ledger.Claim) -> Answer | None:
    """The completed answer of the delivery that beat our claim; None if there is none to read."""
    if claim.held is None:
        return None
    return Answer(claim.held.status, claim.held.body, "replayed", replayed=True)


def _record_failure(pool: Pool, registry: Registry, provider: str, event: Event, exc: Exception) -> None:
    log.error("delivery_failed", event_id=event.id, event_type=event.type, exc_info=exc)
    if db.server_silent(exc):
        # No connection could be had a moment ago, or the server fell silent
        # (a partition): another connection would wait as long to record
        # that, and only delay the 503 (the log line records it).
        return
    try:
        with db.connection(pool) as conn, conn.transaction():
            ledger.record_failure(conn, provider, event, exc, registry.handler_name(provider, event.type))
    except Exception as record_exc:
        log.error("failure_not_recorded", event_id=event.id, error=type(record_exc).__name__)
