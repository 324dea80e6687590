"""One-off payments: Checkout sessions and payment intents, fulfilled once.

Stripe sends several events for one payment (the session, the payment
intent, the charge), in no guaranteed order. They all name the payment
intent, so that id (or, without one, the session's or charge's own id),
scoped by Connect account, is the key of both the `payments` row and the
`fulfilments` row.

Every handler that touches a payment starts by writing its `payments` row
(`set_status`, or `ensure_payment` before another update), before any other
row of that payment, so the events of one payment apply one after another
and always in the same lock order, which rules out deadlocks between them.
"""
from __future__ import annotations

from typing import Any

import psycopg

from ..service import outbox
from ..service.events import Event, require_created, require_id
from ..service.outcomes import (
    ALREADY_FULFILLED,
    AWAITING_PAYMENT,
    FULFILLED,
    IGNORED,
    PAYMENT_FAILED,
    SUPERSEDED,
)
from ..service.registry import handles

# The outbox kind that tells the shop to ship: one per fulfilled payment.
ORDER_FULFILLED = "order.fulfilled"

# Breaks a tie between two events created in the same second: the later
# stage of a payment wins (Stripe's timestamps are whole seconds).
_STATUS_RANK = {"awaiting_payment": 0, "failed": 1, "succeeded": 2}

# A concurrent first event of the same payment makes this wait for it.
_ENSURE = """
INSERT INTO payments (payment_id, account) VALUES (%s, %s)
ON CONFLICT (payment_id, account) DO NOTHING
"""

# Creates the payment with this status, or applies it only if this event is
# not older than the one that set the current status (no row returned then).
# One statement, not an ensure + update: a conflicting row is locked even
# when the WHERE rejects the update, so the lock order is the same.
_SET_STATUS = """
INSERT INTO payments AS p
    (payment_id, account, status, status_rank, status_at, amount, currency)
VALUES (%(payment_id)s, %(account)s, %(status)s, %(rank)s, %(at)s, %(amount)s, %(currency)s)
ON CONFLICT (payment_id, account) DO UPDATE
SET status = EXCLUDED.status, status_rank = EXCLUDED.status_rank, status_at = EXCLUDED.status_at,
    amount = coalesce(EXCLUDED.amount, p.amount), currency = coalesce(EXCLUDED.currency, p.currency),
    updated_at = now()
WHERE p.status IS NULL OR (EXCLUDED.status_at, EXCLUDED.status_rank) >= (p.status_at, p.status_rank)
RETURNING status
"""

_FULFIL = """
INSERT INTO fulfilments
    (payment_id, provider, account, event_id, event_type, amount, currency)
VALUES (%s, 'stripe', %s, %s, %s, %s, %s)
ON CONFLICT (payment_id, account) DO NOTHING
RETURNING id
"""


def payment_id_of(*candidates: Any) -> str:
    """The first id given: callers list the payment intent first, then fallbacks."""
    return require_id(next((c for c in candidates if c), None), "payment id")


def ensure_payment(conn: psycopg.Connection, event: Event, payment_id: str) -> None:
    """The payment's row exists, whichever of its events is the first to arrive."""
    conn.execute(_ENSURE, [payment_id, event.account_key])


def set_status(
    conn: psycopg.Connection,
    event: Event,
    payment_id: str,
    status: str,
    amount: int | None,
    currency: str | None,
) -> bool:
    """Record `status` unless a newer event already set one; True if applied."""
    row = conn.execute(
        _SET_STATUS,
        {
            "payment_id": payment_id,
            "account": event.account_key,
            "status": status,
            "rank": _STATUS_RANK[status],
            "at": require_created(event),
            "amount": amount,
            "currency": currency,
        },
    ).fetchone()
    return row is not None


def fulfil_payment(
    conn: psycopg.Connection, event: Event, payment_id: str, amount: int | None, currency: str | None
) -> str:
    """Mark `payment_id` succeeded and fulfil it once, whichever event gets here first.

    The fulfilment does not depend on the status update applying: a payment
    that succeeded is fulfilled even if a newer event (say, a failure of a
    later attempt) already set its status, so the outcome is the same in
    every delivery order. The unique index is the backstop.
    """
    require_id(payment_id, "payment id")
    set_status(conn, event, payment_id, "succeeded", amount, currency)
    row = conn.execute(
        _FULFIL, [payment_id, event.account_key, event.id, event.type, amount, currency]
    ).fetchone()
    if row is None:
        return ALREADY_FULFILLED
    _notify_fulfilled(conn, event, payment_id, amount, currency)
    return FULFILLED


def _notify_fulfilled(
    conn: psycopg.Connection, event: Event, payment_id: str, amount: int | None, currency: str | None
) -> None:
    """The shop's "ship it" side effect, in the fulfilment's own transaction.

    It commits exactly when the fulfilment does; the worker delivers it later
    under a key that is the fulfilment's own, so the receiver acts once.
    """
    scope = f"{event.account_key}:" if event.account_key else ""
    outbox.enqueue(
        conn,
        ORDER_FULFILLED,
        {
            "payment_id": payment_id,
            "account": event.account,
            "event_id": event.id,
            "event_type": event.type,
            "amount": amount,
            "currency": currency,
        },
        idempotency_key=f"{ORDER_FULFILLED}:{scope}{payment_id}",
    )


def _session_payment(session: dict) -> tuple[str, int | None, str | None]:
    # A session without a payment intent (a no-cost order) is its own payment.
    payment_id = payment_id_of(session.get("payment_intent"), session.get("id"))
    return payment_id, session.get("amount_total"), session.get("currency")


def _session_status(conn: psycopg.Connection, event: Event, status: str, outcome: str) -> str:
    payment_id, amount, currency = _session_payment(event.object)
    applied = set_status(conn, event, payment_id, status, amount, currency)
    return outcome if applied else SUPERSEDED


@handles("checkout.session.completed")
def checkout_completed(conn: psycopg.Connection, event: Event) -> str:
    session = event.object
    if session.get("mode", "payment") != "payment":
        # Subscription sessions are fulfilled per invoice (invoice.paid);
        # setup sessions take no payment.
        return IGNORED
    if session.get("payment_status") == "unpaid":
        # Delayed methods (SEPA, ACH) settle later with an async_payment event.
        return _session_status(conn, event, "awaiting_payment", AWAITING_PAYMENT)
    return fulfil_payment(conn, event, *_session_payment(session))


@handles("checkout.session.async_payment_succeeded")
def checkout_async_succeeded(conn: psycopg.Connection, event: Event) -> str:
    return fulfil_payment(conn, event, *_session_payment(event.object))


@handles("checkout.session.async_payment_failed")
def checkout_async_failed(conn: psycopg.Connection, event: Event) -> str:
    return _session_status(conn, event, "failed", PAYMENT_FAILED)


@handles("payment_intent.succeeded")
def payment_intent_succeeded(conn: psycopg.Connection, event: Event) -> str:
    intent = event.object
    return fulfil_payment(
        conn, event, payment_id_of(intent.get("id")), intent.get("amount_received"),
        intent.get("currency"),
    )


@handles("payment_intent.payment_failed")
def payment_intent_failed(conn: psycopg.Connection, event: Event) -> str:
    intent = event.object
    applied = set_status(
        conn, event, payment_id_of(intent.get("id")), "failed", intent.get("amount"),
        intent.get("currency"),
    )
    return PAYMENT_FAILED if applied else SUPERSEDED
