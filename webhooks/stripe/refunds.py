"""Refunds: how much of a payment went back, whatever order the events arrive in.

`charge.refunded` carries the charge's cumulative `amount_refunded`, so each
event states the whole refund position, not a delta. The position with the
newest event wins (ties: the larger amount, since refunds only add up), and
a refund that arrives before the payment's own events still creates the
payment's row: it is neither lost nor reset by the older events that follow.
"""
from __future__ import annotations

import psycopg

from ..service.events import Event, require_created, require_id, timestamp
from ..service.outcomes import PARTIALLY_REFUNDED, REFUNDED, SUPERSEDED
from .payments import ensure_payment, payment_id_of
from ..service.registry import handles

_SET_REFUNDED = """
UPDATE payments
SET amount_refunded = %(amount_refunded)s, refunded = %(refunded)s, refund_at = %(at)s,
    -- The payment's own events own its amount; the charge's only fills a gap.
    amount = coalesce(amount, %(amount)s), currency = coalesce(currency, %(currency)s),
    updated_at = now()
WHERE payment_id = %(payment_id)s AND account = %(account)s
  AND (refund_at IS NULL OR (%(at)s, %(amount_refunded)s) >= (refund_at, amount_refunded))
RETURNING refunded
"""

_RECORD_REFUND = """
INSERT INTO refunds
    (refund_id, account, payment_id, charge_id, amount, currency, event_id, created_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, coalesce(%s, now()))
ON CONFLICT (refund_id, account) DO NOTHING
"""


@handles("charge.refunded")
def charge_refunded(conn: psycopg.Connection, event: Event) -> str:
    charge = event.object
    payment_id = payment_id_of(charge.get("payment_intent"), charge.get("id"))
    amount, refunded_amount = charge.get("amount"), charge.get("amount_refunded") or 0
    fully = bool(charge.get("refunded")) or (amount is not None and refunded_amount >= amount)
    ensure_payment(conn, event, payment_id)
    row = conn.execute(
        _SET_REFUNDED,
        {
            "payment_id": payment_id,
            "account": event.account_key,
            "amount": amount,
            "currency": charge.get("currency"),
            "amount_refunded": refunded_amount,
            "refunded": fully,
            "at": require_created(event),
        },
    ).fetchone()
    _record_refunds(conn, event, payment_id, charge)
    if row is None:
        return SUPERSEDED
    return REFUNDED if row[0] else PARTIALLY_REFUNDED


def _record_refunds(conn: psycopg.Connection, event: Event, payment_id: str, charge: dict) -> None:
    """One row per named refund: only sent when `refunds` is expanded (or on old API versions)."""
    listed = charge.get("refunds")
    refunds = listed.get("data") if isinstance(listed, dict) else None
    for refund in refunds or []:
        conn.execute(
            _RECORD_REFUND,
            [
                require_id(refund.get("id"), "refund id"),
                event.account_key,
                payment_id,
                charge.get("id"),
                refund.get("amount"),
                refund.get("currency"),
                event.id,
                timestamp(refund.get("created")),
            ],
        )
