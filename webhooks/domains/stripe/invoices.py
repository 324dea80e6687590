"""Subscription invoices: each paid invoice fulfilled once, its period extending access.

Invoices link to their subscription through
`parent.subscription_details.subscription` (API 2025-03-31 "basil" and
later; older versions put `subscription` on the invoice itself). An invoice's
status follows its events in `created` order, and the subscription's
paid-through date only grows, so both end the same whatever order the
events arrive in.

`invoice.paid` acts only on an invoice whose own `status` is `paid` (The
Invoice object, https://docs.stripe.com/api/invoices/object: draft, open,
paid, uncollectible, void); any other is recorded as `not_paid` and grants
nothing.

Lock order: the invoice's row, then its subscription's (`access.tracking`),
then its payment's (`mark_invoice_payment`); subscription events lock only the
subscription's and payment events never lock an invoice, so none deadlock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import psycopg

from webhooks.core.events import Event, Json, require_created, require_id, timestamp
from webhooks.core.outcomes import ALREADY_FULFILLED, FULFILLED, NOT_PAID, SUPERSEDED
from webhooks.core.registry import handles

from . import access
from .declared import BASIL, Amount, Count, Currency, Id, Need, StripeObject, Timestamp, Word
from .lookups import Listing, Lookup, Rows
from .orders import mark_invoice_payment
from .payments import PAYMENT_FAILED


def _paid(invoice: Json) -> bool:
    return invoice.get("status") == "paid"


# A paid invoice has its fulfilment row.
LOOKUPS = (
    Lookup(
        "invoice",
        "/v1/invoices/",
        Rows("invoice", "invoice_fulfilments", "invoice_id", at="fulfilled_at"),
        agrees=_paid,
        listing=Listing("/v1/invoices", lambda invoice: invoice["id"], {"status": "paid"}),
    ),
)


class _Period(StripeObject):
    start: Timestamp | None = None
    end: Timestamp | None = None


class _Line(StripeObject):
    period: _Period | None = None


class _Lines(StripeObject):
    data: list[_Line] = []


class _SubscriptionDetails(StripeObject):
    subscription: Id | None = None


class _Parent(StripeObject):
    subscription_details: _SubscriptionDetails | None = None


class Invoice(StripeObject):
    """The Invoice fields the handlers read (https://docs.stripe.com/api/invoices/object)."""

    object: Literal["invoice"]
    id: Id
    status: Word | None = None
    amount_due: Amount
    amount_paid: Amount
    currency: Currency
    attempt_count: Count | None = None
    lines: _Lines | None = None
    parent: _Parent | None = None  # basil and later
    subscription: Id | None = None  # before basil
    payment_intent: Id | None = None  # before basil

    # The subscription link moved at basil (Stripe's changelog, "Invoicing
    # resources now specify how they were generated",
    # https://docs.stripe.com/changelog/basil/2025-03-31/adds-new-parent-field-to-invoicing-objects):
    # without it a paid invoice would be fulfilled and grant no access.
    NEEDS = (
        Need(("subscription",), until=BASIL),
        Need(("parent", "subscription_details", "subscription"), since=BASIL),
    )


# Ties (same second): a paid invoice stays paid.
_STATUS_RANK = {"payment_failed": 0, "paid": 1}

_CLAIM_INVOICE = """
INSERT INTO invoices AS i (invoice_id, account) VALUES (%s, %s)
ON CONFLICT (invoice_id) DO UPDATE SET account = i.account
RETURNING account
"""

_SET_INVOICE = """
UPDATE invoices AS i
SET status = %(status)s, status_rank = %(rank)s, status_at = %(at)s,
    subscription_id = coalesce(%(subscription_id)s, i.subscription_id),
    amount_due = %(amount_due)s, amount_paid = %(amount_paid)s, currency = %(currency)s,
    attempt_count = %(attempt_count)s, updated_at = now()
WHERE i.invoice_id = %(invoice_id)s
  AND (i.status_at IS NULL OR (%(at)s, %(rank)s) >= (i.status_at, i.status_rank))
RETURNING status
"""

_FULFIL_INVOICE = """
INSERT INTO invoice_fulfilments
    (invoice_id, account, subscription_id, event_id, amount_paid, currency,
     period_start, period_end)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (invoice_id) DO NOTHING
RETURNING id
"""

_EXTEND = """
UPDATE subscriptions
SET paid_through = greatest(paid_through, %s), updated_at = now()
WHERE subscription_id = %s
"""


def subscription_of(invoice: Json) -> str | None:
    details = (invoice.get("parent") or {}).get("subscription_details") or {}
    subscription = details.get("subscription") or invoice.get("subscription")
    return require_id(subscription, "subscription id") if subscription else None


def _service_period(invoice: Json) -> tuple[datetime | None, datetime | None]:
    """The span the invoice's lines pay for (the invoice's own period_* is the previous one)."""
    periods = [line.get("period") or {} for line in (invoice.get("lines") or {}).get("data") or []]
    starts = [p["start"] for p in periods if isinstance(p.get("start"), int)]
    ends = [p["end"] for p in periods if isinstance(p.get("end"), int)]
    return (timestamp(min(starts)) if starts else None, timestamp(max(ends)) if ends else None)


def _set_invoice(conn: psycopg.Connection, event: Event, status: str) -> bool:
    """Claim the invoice's row, then record `status` unless a newer event set one."""
    invoice = event.object
    invoice_id = require_id(invoice.get("id"), "invoice id")
    access.claim_row(conn, event, _CLAIM_INVOICE, "invoice", invoice_id)
    row = conn.execute(
        _SET_INVOICE,
        {
            "invoice_id": invoice_id,
            "subscription_id": subscription_of(invoice),
            "status": status,
            "rank": _STATUS_RANK[status],
            "at": require_created(event),
            "amount_due": invoice.get("amount_due"),
            "amount_paid": invoice.get("amount_paid"),
            "currency": invoice.get("currency"),
            "attempt_count": invoice.get("attempt_count"),
        },
    ).fetchone()
    return row is not None


@handles("invoice.paid", reads=Invoice)
def invoice_paid(conn: psycopg.Connection, event: Event) -> str:
    invoice = event.object
    if not _paid(invoice):
        return NOT_PAID
    _set_invoice(conn, event, "paid")
    subscription = subscription_of(invoice)
    start, end = _service_period(invoice)
    row = conn.execute(
        _FULFIL_INVOICE,
        [
            invoice["id"],
            event.account_key,
            subscription,
            event.id,
            invoice.get("amount_paid"),
            invoice.get("currency"),
            start,
            end,
        ],
    ).fetchone()
    if subscription:
        with access.tracking(conn, event, subscription):
            conn.execute(_EXTEND, [end, subscription])
    # Last: the payment's row is locked after the invoice's and the subscription's.
    mark_invoice_payment(conn, event, invoice.get("payment_intent"))  # pre-basil only
    return FULFILLED if row else ALREADY_FULFILLED


@handles("invoice.payment_failed", reads=Invoice)
def invoice_payment_failed(conn: psycopg.Connection, event: Event) -> str:
    # Access is not touched: Stripe's retries run with the subscription
    # `past_due`, and its customer.subscription.updated/deleted says how they ended.
    return PAYMENT_FAILED if _set_invoice(conn, event, "payment_failed") else SUPERSEDED
