"""Which succeeded payments are one-off orders, and shipping each of them once.

A payment is an order when a Checkout Session in `payment` mode names it, or
when its PaymentIntent carries the shop's order marker (a metadata key,
WEBHOOK_ORDER_MARKER_KEY), and it pays no invoice. Subscription renewals,
Invoicing invoices and PaymentIntents the shop did not create (Dashboard,
Terminal, other apps) succeed like any payment but are never shipped; the
outcome word says why. An invoice's PaymentIntent is recognised from
`invoice` on pre-basil PaymentIntents, from `invoice.payment_intent` on
pre-basil invoices, and from `invoice_payment.paid` (basil and later).

Both success events of a Checkout payment add what they know to the payment
row (session, client_reference_id, metadata, customer), and the first one
that finds the payment to be an order ships it: one `order.fulfilled` job
carrying everything known by then. A payment already fully refunded or
disputed when its success arrives is held instead (one `payment.review` job).
"""
from __future__ import annotations

import structlog

import psycopg

from ..service import outbox
from ..service.events import Event, require_id
from ..service.outcomes import (
    ALREADY_FULFILLED,
    FULFILLED,
    HELD,
    INVOICE_PAYMENT,
    NOT_AN_ORDER,
)
from .payments import Payment, note

log = structlog.get_logger(__name__)

ORDER_FULFILLED = "order.fulfilled"
PAYMENT_REVIEW = "payment.review"

_marker_key = "order_id"


def configure(order_marker_key: str) -> None:
    """Set the metadata key that marks a PaymentIntent as an order (from Settings)."""
    global _marker_key
    _marker_key = order_marker_key


# The fulfilment row and its `order.fulfilled` job, in one statement: the
# job is written only if the row is (the unique index refuses a second).
_FULFIL = outbox.guarded("""
INSERT INTO fulfilments
    (payment_id, provider, account, event_id, event_type, amount, currency)
VALUES (%s, 'stripe', %s, %s, %s, %s, %s)
ON CONFLICT (payment_id) DO NOTHING
RETURNING id
""")

# Held only if never shipped: the row lock taken by `note` orders this
# against a concurrent success event of the same payment.
_HOLD = """
UPDATE payments SET held_at = now(), updated_at = now()
WHERE payment_id = %s AND held_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM fulfilments f WHERE f.payment_id = %s)
RETURNING payment_id
"""


def not_an_order(payment: Payment) -> str | None:
    """The outcome word for why this payment is not a one-off order; None if it is one."""
    if payment.invoice_id:
        return INVOICE_PAYMENT
    if payment.checkout_mode == "payment":
        return None
    if (payment.intent_metadata or {}).get(_marker_key):
        return None
    return NOT_AN_ORDER


def succeeded(
    conn: psycopg.Connection, event: Event, payment_id: str, amount: int | None,
    currency: str | None, *, order: bool = False, **facts,
) -> str:
    """Record the success and ship the payment once, if it is an order and not refunded or disputed.

    Whatever the outcome, the status is recorded, so a later event (the
    session that makes it an order) finds the payment already succeeded.
    `order=True` is a handler's own decision that the payment is an order.
    """
    payment = note(conn, event, payment_id, "succeeded", amount, currency, **facts)
    if payment.held_at is not None:
        return HELD
    reason = None if order else not_an_order(payment)
    if reason is not None:
        return reason
    if payment.disputed or payment.refunded_in_full(amount):
        return _hold(conn, event, payment_id, payment, amount, currency)
    if payment.fulfilled:
        # Known from the payment's own statement: one round trip fewer for
        # the second success event of every order.
        return ALREADY_FULFILLED
    shipped = _enqueue(
        conn, ORDER_FULFILLED, event, payment_id, payment, amount, currency,
        guard=(_FULFIL, [payment_id, event.account_key, event.id, event.type, amount, currency]),
    )
    return FULFILLED if shipped else ALREADY_FULFILLED


def fulfil_payment(
    conn: psycopg.Connection, event: Event, payment_id: str, amount: int | None,
    currency: str | None,
) -> str:
    """For a shop's own handler: `payment_id` succeeded and is an order; ship it once."""
    return succeeded(conn, event, require_id(payment_id, "payment id"), amount, currency, order=True)


def _hold(conn, event, payment_id, payment, amount, currency) -> str:
    if conn.execute(_HOLD, [payment_id, payment_id]).fetchone() is None:
        return ALREADY_FULFILLED  # shipped before the refund or dispute arrived
    _enqueue(conn, PAYMENT_REVIEW, event, payment_id, payment, amount, currency,
             reason="disputed" if payment.disputed else "refunded")
    return HELD


def _enqueue(
    conn: psycopg.Connection, kind: str, event: Event, payment_id: str, payment: Payment,
    amount: int | None, currency: str | None, guard=None, **extra,
) -> bool:
    """The shop's side effect, committed exactly when the decision is; keyed by the payment.

    With `guard`, only if that write (see outbox.guarded) is made; True if the job was.

    The order's identity is what both success events stated so far; the
    session's metadata wins over the PaymentIntent's for a key set on both.
    """
    return outbox.enqueue(
        conn,
        kind,
        {
            "payment_id": payment_id,
            # The checked attribute, not this event's scope (see scope.py).
            "account": payment.account or None,
            "event_id": event.id,
            "event_type": event.type,
            "amount": amount,
            "currency": currency,
            "session_id": payment.session_id,
            "client_reference_id": payment.client_reference_id,
            "customer": payment.customer,
            "metadata": {**(payment.intent_metadata or {}), **(payment.session_metadata or {})},
            **extra,
        },
        idempotency_key=f"{kind}:{payment_id}",
        guard=guard,
    )


def mark_invoice_payment(conn: psycopg.Connection, event: Event, payment_intent: str | None) -> None:
    """Record that `payment_intent` pays an invoice, so it is never shipped as an order.

    Called by the invoice events that name it (pre-basil `invoice.payment_intent`,
    basil's `invoice_payment.paid`); a no-op when they do not.
    """
    if not payment_intent:
        return
    invoice = event.object.get("invoice") if event.object.get("object") == "invoice_payment" else None
    payment = note(conn, event, payment_intent, invoice_id=invoice or event.object.get("id"))
    shipped = conn.execute(
        "SELECT 1 FROM fulfilments WHERE payment_id = %s", [payment_intent]
    ).fetchone()
    if shipped:
        # Only possible when an invoice's PaymentIntent carried the order marker.
        log.warning("invoice_payment_already_shipped", payment_id=payment_intent,
                    event_id=event.id, account=payment.account)
