"""Subscription billing: each paid invoice fulfilled once, revocation final.

Invoices link to their subscription through
`parent.subscription_details.subscription` (API 2025-03-31 "basil" and
later; older versions put `subscription` on the invoice itself). The
subscription's paid-through date only grows and its revocation is never
undone, so its row ends the same whatever order the events arrive in: an
invoice paid after (or delivered after) the deletion does not restore access.
"""
from __future__ import annotations

import psycopg

from ..service.events import Event, require_created, require_id, timestamp
from ..service.outcomes import ALREADY_FULFILLED, ALREADY_REVOKED, FULFILLED, PAYMENT_FAILED, REVOKED, SUPERSEDED
from ..service.registry import handles
from .orders import mark_invoice_payment

# Ties (same second): a paid invoice stays paid.
_STATUS_RANK = {"payment_failed": 0, "paid": 1}

# Every invoice handler locks the invoice row first, the subscription row last.
_SET_INVOICE = """
INSERT INTO invoices AS i
    (invoice_id, account, subscription_id, status, status_rank, status_at,
     amount_due, amount_paid, currency, attempt_count)
VALUES (%(invoice_id)s, %(account)s, %(subscription_id)s, %(status)s, %(rank)s, %(at)s,
        %(amount_due)s, %(amount_paid)s, %(currency)s, %(attempt_count)s)
ON CONFLICT (invoice_id, account) DO UPDATE
SET status = EXCLUDED.status, status_rank = EXCLUDED.status_rank, status_at = EXCLUDED.status_at,
    subscription_id = coalesce(EXCLUDED.subscription_id, i.subscription_id),
    amount_due = EXCLUDED.amount_due, amount_paid = EXCLUDED.amount_paid,
    currency = EXCLUDED.currency, attempt_count = EXCLUDED.attempt_count, updated_at = now()
WHERE (EXCLUDED.status_at, EXCLUDED.status_rank) >= (i.status_at, i.status_rank)
RETURNING status
"""

_FULFIL_INVOICE = """
INSERT INTO invoice_fulfilments
    (invoice_id, account, subscription_id, event_id, amount_paid, currency,
     period_start, period_end)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (invoice_id, account) DO NOTHING
RETURNING id
"""

_EXTEND = """
INSERT INTO subscriptions AS s (subscription_id, account, paid_through)
VALUES (%s, %s, %s)
ON CONFLICT (subscription_id, account) DO UPDATE
SET paid_through = greatest(s.paid_through, EXCLUDED.paid_through), updated_at = now()
"""

_REVOKE = """
INSERT INTO subscriptions AS s (subscription_id, account, revoked_at, revoked_reason)
VALUES (%s, %s, %s, %s)
ON CONFLICT (subscription_id, account) DO UPDATE
SET revoked_at = EXCLUDED.revoked_at, revoked_reason = EXCLUDED.revoked_reason,
    updated_at = now()
WHERE s.revoked_at IS NULL
RETURNING subscription_id
"""


def subscription_of(invoice: dict) -> str | None:
    details = (invoice.get("parent") or {}).get("subscription_details") or {}
    subscription = details.get("subscription") or invoice.get("subscription")
    return require_id(subscription, "subscription id") if subscription else None


def _service_period(invoice: dict) -> tuple:
    """The span the invoice's lines pay for (the invoice's own period_* is the previous one)."""
    periods = [line.get("period") or {} for line in (invoice.get("lines") or {}).get("data") or []]
    starts = [p["start"] for p in periods if isinstance(p.get("start"), int)]
    ends = [p["end"] for p in periods if isinstance(p.get("end"), int)]
    return (timestamp(min(starts)) if starts else None, timestamp(max(ends)) if ends else None)


def _set_invoice(conn: psycopg.Connection, event: Event, status: str) -> bool:
    invoice = event.object
    row = conn.execute(
        _SET_INVOICE,
        {
            "invoice_id": require_id(invoice.get("id"), "invoice id"),
            "account": event.account_key,
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


@handles("invoice.paid")
def invoice_paid(conn: psycopg.Connection, event: Event) -> str:
    invoice = event.object
    _set_invoice(conn, event, "paid")
    subscription = subscription_of(invoice)
    start, end = _service_period(invoice)
    row = conn.execute(
        _FULFIL_INVOICE,
        [invoice["id"], event.account_key, subscription, event.id, invoice.get("amount_paid"),
         invoice.get("currency"), start, end],
    ).fetchone()
    if subscription:
        conn.execute(_EXTEND, [subscription, event.account_key, end])
    mark_invoice_payment(conn, event, invoice.get("payment_intent"))  # pre-basil only
    return FULFILLED if row else ALREADY_FULFILLED


@handles("invoice.payment_failed")
def invoice_payment_failed(conn: psycopg.Connection, event: Event) -> str:
    # Access is not touched: Stripe's retry schedule decides, and ends it
    # with customer.subscription.deleted if every retry fails.
    return PAYMENT_FAILED if _set_invoice(conn, event, "payment_failed") else SUPERSEDED


@handles("customer.subscription.deleted")
def subscription_deleted(conn: psycopg.Connection, event: Event) -> str:
    subscription = event.object
    reason = (subscription.get("cancellation_details") or {}).get("reason")
    row = conn.execute(
        _REVOKE,
        [require_id(subscription.get("id"), "subscription id"), event.account_key,
         require_created(event), reason],
    ).fetchone()
    return REVOKED if row else ALREADY_REVOKED
