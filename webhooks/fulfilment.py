"""What an event does to the shop, run inside the claim's transaction.

A handler takes the claim's connection and the parsed event and returns the
outcome word stored in the ledger. Register one with `@handles("type")`.
"""
from __future__ import annotations

import importlib
from typing import Callable

import psycopg

from . import outbox
from .events import Event, require_id

Handler = Callable[[psycopg.Connection, Event], str]
_HANDLERS: dict[str, Handler] = {}

IGNORED = "ignored"
FULFILLED = "fulfilled"
ALREADY_FULFILLED = "already_fulfilled"
AWAITING_PAYMENT = "awaiting_payment"
# The outbox kind that tells the shop to ship: one per fulfilled payment.
ORDER_FULFILLED = "order.fulfilled"

_FULFIL = """
INSERT INTO fulfilments
    (payment_id, provider, account, event_id, event_type, amount, currency)
VALUES (%s, 'stripe', %s, %s, %s, %s, %s)
ON CONFLICT (payment_id) DO NOTHING
RETURNING id
"""


def handles(*event_types: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for event_type in event_types:
            _HANDLERS[event_type] = handler
        return handler

    return register


def load(modules: tuple[str, ...]) -> None:
    """Import handler modules so their @handles decorators register."""
    for module in modules:
        importlib.import_module(module)


def run(conn: psycopg.Connection, event: Event) -> str:
    handler = _HANDLERS.get(event.type)
    return handler(conn, event) if handler else IGNORED


def fulfil_payment(
    conn: psycopg.Connection, event: Event, payment_id: str, amount: int | None, currency: str | None
) -> str:
    """Fulfil `payment_id` once, whichever event gets here first.

    A concurrent, uncommitted fulfilment of the same payment makes this wait
    (bounded by lock_timeout) and then either find it done or take over.
    """
    require_id(payment_id, "payment id")
    row = conn.execute(
        _FULFIL, [payment_id, event.account, event.id, event.type, amount, currency]
    ).fetchone()
    if row is None:
        return ALREADY_FULFILLED
    # Same transaction: the notice exists exactly when the fulfilment does.
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
        idempotency_key=f"{ORDER_FULFILLED}:{payment_id}",
    )
    return FULFILLED


@handles("checkout.session.completed")
def _checkout_completed(conn: psycopg.Connection, event: Event) -> str:
    session = event.object
    if session.get("payment_status") != "paid":
        # Delayed methods (SEPA, ACH) settle later with async_payment_succeeded.
        return AWAITING_PAYMENT
    # The payment intent is the key every event of this payment shares; a
    # session without one (a no-cost order) is its own payment.
    payment_id = session.get("payment_intent") or session.get("id")
    return fulfil_payment(
        conn, event, payment_id, session.get("amount_total"), session.get("currency")
    )


@handles("payment_intent.succeeded")
def _payment_intent_succeeded(conn: psycopg.Connection, event: Event) -> str:
    intent = event.object
    return fulfil_payment(
        conn, event, intent.get("id"), intent.get("amount_received"), intent.get("currency")
    )
