"""PaymentIntents: their success and failure, and the invoice one of them pays.

A PaymentIntent is paid when its own `status` is `succeeded` (The
PaymentIntent object, https://docs.stripe.com/api/payment_intents/object),
whichever event carries it.

Before API 2025-03-31 (basil) a PaymentIntent that pays an invoice names it
(`invoice`); basil dropped the field, and `invoice_payment.paid` links the
two instead.
"""

from __future__ import annotations

from typing import Literal

import psycopg

from webhooks.core.events import Event, Json
from webhooks.core.outcomes import NOT_PAID, SUPERSEDED
from webhooks.core.registry import handles

from . import payments
from .declared import Amount, Currency, Id, Metadata, StripeObject, Word
from .lookups import Listing, Lookup
from .orders import INVOICE_PAYMENT, Orders, Success, mark_invoice_payment, success
from .payments import PAYMENT_FAILED, note, payment_id_of


class PaymentIntent(StripeObject):
    """The PaymentIntent fields the handlers read (https://docs.stripe.com/api/payment_intents/object)."""

    object: Literal["payment_intent"]
    id: Id
    status: Word
    amount: Amount
    amount_received: Amount
    currency: Currency
    customer: Id | None = None
    metadata: Metadata | None = None
    invoice: Id | None = None  # before basil only


class _Payment(StripeObject):
    payment_intent: Id | None = None


class InvoicePayment(StripeObject):
    """The InvoicePayment fields the handlers read (https://docs.stripe.com/api/invoice-payment/object)."""

    object: Literal["invoice_payment"]
    id: Id
    invoice: Id
    payment: _Payment


def _succeeded(intent: Json) -> bool:
    return intent.get("status") == "succeeded"


LOOKUPS = (
    Lookup(
        "payment_intent",
        "/v1/payment_intents/",
        payments.ROWS,
        prefixes=("pi_",),
        agrees=_succeeded,
        listing=Listing(
            "/v1/payment_intents",
            lambda intent: intent["id"] if _succeeded(intent) else None,
        ),
    ),
)


def payment_success(event: Event) -> Success | None:
    """The success the PaymentIntent states; None unless it has succeeded."""
    intent = event.object
    if not _succeeded(intent):
        return None
    return success(
        event,
        payment_id_of(intent.get("id")),
        intent.get("amount_received"),
        intent.get("currency"),
        intent_metadata=intent.get("metadata") or {},
        customer=intent.get("customer"),
        invoice_id=intent.get("invoice"),
    )


def payment_intent_succeeded(conn: psycopg.Connection, event: Event, orders: Orders) -> str:
    paid = payment_success(event)
    return NOT_PAID if paid is None else orders.succeeded(conn, event, paid)


@handles("payment_intent.payment_failed", reads=PaymentIntent)
def payment_intent_failed(conn: psycopg.Connection, event: Event) -> str:
    intent = event.object
    payment_id = payment_id_of(intent.get("id"))
    applied = note(
        conn,
        event,
        payment_id,
        "failed",
        intent.get("amount"),
        intent.get("currency"),
        invoice_id=intent.get("invoice"),
    ).status_applied
    return PAYMENT_FAILED if applied else SUPERSEDED


@handles("invoice_payment.paid", reads=InvoicePayment)
def invoice_payment_paid(conn: psycopg.Connection, event: Event) -> str:
    """Basil and later: the invoice payment names the PaymentIntent that paid the invoice."""
    payment = event.object.get("payment") or {}
    mark_invoice_payment(conn, event, payment.get("payment_intent"))
    return INVOICE_PAYMENT
