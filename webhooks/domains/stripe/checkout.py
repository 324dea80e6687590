"""Checkout Sessions: a session in `payment` mode makes its payment an order.

A session without a payment intent (a no-cost order) is its own payment.
Subscription sessions are the billing side's (invoices, subscriptions.py),
and setup sessions take no payment: neither touches a payment row.

The session's own `payment_status` decides, whichever event carries it:
Stripe's "Fulfill orders" page (https://docs.stripe.com/checkout/fulfillment)
fulfils a session that is not `unpaid`, and The Checkout Session object
(https://docs.stripe.com/api/checkout/sessions/object) names the two
values that are: `paid`, and `no_payment_required` (a free order).
"""

from __future__ import annotations

from typing import Literal

import psycopg

from webhooks.core.events import Event, Json
from webhooks.core.outcomes import AWAITING_PAYMENT, NOT_PAID, SUPERSEDED
from webhooks.core.registry import handles

from . import payments
from .declared import Amount, Currency, Id, Metadata, StripeObject, Text, Word
from .lookups import Listing, Lookup
from .orders import SETUP_CHECKOUT, SUBSCRIPTION_CHECKOUT, Orders, Success, success
from .payments import PAYMENT_FAILED, note, payment_id_of


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
# A tuple, not a set: any JSON value can be compared with it.
_PAID = ("paid", "no_payment_required")


def _paid(session: Json) -> bool:
    return session.get("payment_status") in _PAID


def _paid_payment(session: Json) -> str | None:
    """The payment a listed session stands for once paid (its intent, or itself without one)."""
    if session.get("mode", "payment") != "payment" or not _paid(session):
        return None
    payment = session.get("payment_intent") or session.get("id")
    return payment if isinstance(payment, str) else None


LOOKUPS = (
    Lookup(
        "checkout.session",
        "/v1/checkout/sessions/",
        payments.ROWS,
        prefixes=("cs_",),
        agrees=_paid,
        listing=Listing("/v1/checkout/sessions", _paid_payment, {"status": "complete"}),
    ),
)


def _facts(session: Json) -> Json:
    return {
        "checkout_mode": session.get("mode", "payment"),
        "session_id": session.get("id"),
        "client_reference_id": session.get("client_reference_id"),
        "customer": session.get("customer"),
        "session_metadata": session.get("metadata") or {},
    }


def _payment_id(session: Json) -> str:
    return payment_id_of(session.get("payment_intent"), session.get("id"))


def _other_mode(session: Json) -> str | None:
    """The outcome of a session that takes no one-off payment; None for a payment-mode one."""
    return _OTHER_MODES.get(session.get("mode", "payment"))


def payment_success(event: Event) -> Success | None:
    """The success a payment-mode session states once paid; None while it is not (or takes no payment)."""
    session = event.object
    if _other_mode(session) is not None or not _paid(session):
        return None
    return success(
        event,
        _payment_id(session),
        session.get("amount_total"),
        session.get("currency"),
        **_facts(session),
    )


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


def _decided(conn: psycopg.Connection, event: Event, orders: Orders) -> str | None:
    """The outcome of a session that takes no one-off payment or is paid; None while it is unpaid."""
    other = _other_mode(event.object)
    if other is not None:
        return other
    paid = payment_success(event)
    return None if paid is None else orders.succeeded(conn, event, paid)


def checkout_completed(conn: psycopg.Connection, event: Event, orders: Orders) -> str:
    # Unpaid: a delayed method (SEPA, ACH) is paid days later, in async_payment_succeeded.
    return _decided(conn, event, orders) or _not_paid(conn, event, "awaiting_payment", AWAITING_PAYMENT)


def checkout_async_succeeded(conn: psycopg.Connection, event: Event, orders: Orders) -> str:
    return _decided(conn, event, orders) or NOT_PAID


@handles("checkout.session.async_payment_failed", reads=Session)
def checkout_async_failed(conn: psycopg.Connection, event: Event) -> str:
    return _not_paid(conn, event, "failed", PAYMENT_FAILED)
