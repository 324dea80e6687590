"""Disputes: a chargeback flags its payment, whichever of its events came first."""
from __future__ import annotations

import psycopg

from ..service.events import Event, require_id
from ..service.outcomes import ALREADY_FLAGGED, DISPUTE_FLAGGED
from .payments import ensure_payment, payment_id_of
from ..service.registry import handles

# Locks the payment's row first, like every payment event (see payments.py).
_FLAG_PAYMENT = """
UPDATE payments SET disputed = true, updated_at = now() WHERE payment_id = %s AND account = %s
"""

_RECORD_DISPUTE = """
INSERT INTO disputes
    (dispute_id, account, payment_id, charge_id, amount, currency, reason, event_id)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (dispute_id, account) DO NOTHING
RETURNING dispute_id
"""


@handles("charge.dispute.created")
def dispute_created(conn: psycopg.Connection, event: Event) -> str:
    dispute = event.object
    payment_id = payment_id_of(dispute.get("payment_intent"), dispute.get("charge"))
    ensure_payment(conn, event, payment_id)
    conn.execute(_FLAG_PAYMENT, [payment_id, event.account_key])
    row = conn.execute(
        _RECORD_DISPUTE,
        [
            require_id(dispute.get("id"), "dispute id"),
            event.account_key,
            payment_id,
            dispute.get("charge"),
            dispute.get("amount"),
            dispute.get("currency"),
            dispute.get("reason"),
            event.id,
        ],
    ).fetchone()
    return DISPUTE_FLAGGED if row else ALREADY_FLAGGED
