"""Checkout Sessions: a session in `payment` mode makes its payment an order.

A session without a payment intent (a no-cost order) is its own payment.
Subscription sessions are the billing side's (invoices, subscriptions.py),
and setup sessions take no payment: neither touches a payment row.
"""

from __future__ import annotations

from typing import Literal

import psycopg

from webhooks.core.events import Event
from webhooks.core.outcomes import (
    AWAITING_PAYMENT,
    PAYMENT_FAILED,
    SETUP_CHECKOUT,
    SUBSCRIPTION_CHECKOUT,
    SUPERSEDED,
)
from webhooks.core.registry import handles

from .declared import Amount, Currency, Id, Metadata, StripeObject, Text, Word
from .orders import Orders, Success, success
from .payments import note, payment_id_of


class Session(StripeObject):
    """The Checkout Session fields the handlers read (https://docs.stripe.com/api/checkout/sessions/object)."""

    object: Literal["checkout.session"]
    id: Id
    mode: Word
    payment_status: Word
    payment_intent: Id | None = None
    amount_total: Amount | None = None
    currency: Currency | None = None
    customer: Id | None = None
    client_reference_id: Text | None = None
    metadata: Metadata | None = None


_OTHER_MODES = {"subscription": SUBSCRIPTION_CHECKOUT, "setup": SETUP_CHECKOUT}


def _facts(session: dict) -> dict:
    return {
        "checkout_mode": session.get("mode", "payment"),
        "session_id": session.get("id"),
        "client_reference_id": session.get("client_reference_id"),
        "customer": session.get("customer"),
        "session_metadata": session.get("metadata") or {},
    }


def _payment_id(session: dict) -> str:
    return payment_id_of(session.get("payment_intent"), session.get("id"))


def payment_success(event: Event) -> Success:
    session = event.object
    return success(
        event,
        _payment_id(session),
        session.get("amount_total"),
        session.get("currency"),
        **_facts(session),
    )


def _paid(conn: psycopg.Connection, event: Event, orders: Orders) -> str:
    return orders.succeeded(conn, event, payment_success(event))


def _not_paid(conn: psycopg.Connection, event: Event, status: str, outcome: str) -> str:
    session = event.object
    payment_id = _payment_id(session)
    applied = note(
        conn,
        event,
        payment_id,
        status,
        session.get("amount_total"),
        session.get("currency"),
        **_facts(session),
    ).status_applied
    return outcome if applied else SUPERSEDED


def _paid_now(session: dict) -> bool:
    """A session that takes a payment and is paid; delayed methods (SEPA, ACH) settle later."""
    return session.get("mode", "payment") not in _OTHER_MODES and session.get("payment_status") != "unpaid"


def completed_success(event: Event) -> Success | None:
    return payment_success(event) if _paid_now(event.object) else None


def checkout_completed(conn: psycopg.Connection, event: Event, orders: Orders) -> str:
    session = event.object
    other = _OTHER_MODES.get(session.get("mode", "payment"))
    if other is not None:
        return other
    if not _paid_now(session):
        return _not_paid(conn, event, "awaiting_payment", AWAITING_PAYMENT)
    return _paid(conn, event, orders)


def checkout_async_succeeded(conn: psycopg.Connection, event: Event, orders: Orders) -> str:
    return _paid(conn, event, orders)


@handles("checkout.session.async_payment_failed", reads=Session)
def checkout_async_failed(conn: psycopg.Connection, event: Event) -> str:
    return _not_paid(conn, event, "failed", PAYMENT_FAILED)
