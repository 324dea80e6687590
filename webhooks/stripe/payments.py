"""One-off payments: the `payments` row every payment event writes first.

Stripe sends several events for one payment (the session, the payment
intent, the charge, its refunds and disputes), in no guaranteed order. They
all name the payment intent, so that id (or, without one, the session's or
charge's own id) keys the `payments` row. Stripe ids are globally unique, so
the Connect account is not part of the key: it is stored with the row and
checked on every event (scope.py).

Every handler that touches a payment starts with `note` (one upsert), before
any other row of that payment, so the events of one payment apply one after
another and always in the same lock order, which rules out deadlocks.
Whether a succeeded payment is shipped is orders.py's decision.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg
from ..service.db import cursor
from ..service.events import Event, require_created, require_id
from . import scope

# Breaks a tie between two events created in the same second: the later
# stage of a payment wins (Stripe's timestamps are whole seconds).
_STATUS_RANK = {"awaiting_payment": 0, "failed": 1, "succeeded": 2}


@dataclass(frozen=True)
class Payment:
    """What the row knows of a payment once an event's facts are added."""

    account: str
    checkout_mode: str | None
    session_id: str | None
    client_reference_id: str | None
    customer: str | None
    session_metadata: dict | None
    intent_metadata: dict | None
    invoice_id: str | None
    amount: int | None
    amount_refunded: int
    disputed: bool
    held_at: Any
    status_applied: bool
    # A fulfilment was committed before this statement began. False does not
    # mean unshipped: one committed while this statement waited for the row
    # lock is not seen (the unique index still refuses a second one).
    fulfilled: bool

    def refunded_in_full(self, amount: int | None) -> bool:
        """Fully refunded, against the stored amount or, before one is stored, `amount`.

        A refund event can arrive before any event that states the payment's amount.
        """
        total = self.amount if self.amount is not None else amount
        return total is not None and 0 < total <= self.amount_refunded


# One statement per event: the row is created or locked (a concurrent first
# event of the same payment waits here), the identity facts added (they do
# not change, so the first event to state one keeps it), and the status
# applied only if this event is not older than the one that set the current
# status. A conflicting row is locked even when the status is not applied,
# so the lock order is the same for every event.
_NEWER = """EXCLUDED.status IS NOT NULL AND (p.status IS NULL
    OR (EXCLUDED.status_at, EXCLUDED.status_rank) >= (p.status_at, p.status_rank))"""

_NOTE = f"""
INSERT INTO payments AS p
    (payment_id, account, status, status_rank, status_at, amount, currency, checkout_mode,
     session_id, client_reference_id, customer, session_metadata, intent_metadata, invoice_id)
VALUES (%(payment_id)s, %(account)s, %(status)s, %(rank)s, %(at)s, %(amount)s, %(currency)s,
        %(checkout_mode)s, %(session_id)s, %(client_reference_id)s, %(customer)s,
        %(session_metadata)s, %(intent_metadata)s, %(invoice_id)s)
ON CONFLICT (payment_id) DO UPDATE
SET status = CASE WHEN {_NEWER} THEN EXCLUDED.status ELSE p.status END,
    status_rank = CASE WHEN {_NEWER} THEN EXCLUDED.status_rank ELSE p.status_rank END,
    status_at = CASE WHEN {_NEWER} THEN EXCLUDED.status_at ELSE p.status_at END,
    amount = CASE WHEN {_NEWER} THEN coalesce(EXCLUDED.amount, p.amount) ELSE p.amount END,
    currency = CASE WHEN {_NEWER} THEN coalesce(EXCLUDED.currency, p.currency) ELSE p.currency END,
    checkout_mode = coalesce(p.checkout_mode, EXCLUDED.checkout_mode),
    session_id = coalesce(p.session_id, EXCLUDED.session_id),
    client_reference_id = coalesce(p.client_reference_id, EXCLUDED.client_reference_id),
    customer = coalesce(p.customer, EXCLUDED.customer),
    session_metadata = coalesce(p.session_metadata, EXCLUDED.session_metadata),
    intent_metadata = coalesce(p.intent_metadata, EXCLUDED.intent_metadata),
    invoice_id = coalesce(p.invoice_id, EXCLUDED.invoice_id),
    updated_at = now()
RETURNING account, checkout_mode, session_id, client_reference_id, customer,
          session_metadata, intent_metadata, invoice_id, amount, amount_refunded, disputed,
          held_at,
          -- Holding this event's (status, created, rank) is the same as having applied it.
          (status, status_at, status_rank) IS NOT DISTINCT FROM (%(status)s, %(at)s, %(rank)s)
          AS status_applied,
          EXISTS (SELECT 1 FROM fulfilments f WHERE f.payment_id = p.payment_id) AS fulfilled
"""

_FACTS = (
    "checkout_mode", "session_id", "client_reference_id", "customer",
    "session_metadata", "intent_metadata", "invoice_id",
)


def payment_id_of(*candidates: Any) -> str:
    """The first id given: callers list the payment intent first, then fallbacks."""
    return require_id(next((c for c in candidates if c), None), "payment id")


def note(
    conn: psycopg.Connection, event: Event, payment_id: str, status: str | None = None,
    amount: int | None = None, currency: str | None = None, **facts: Any,
) -> Payment:
    """Lock the payment's row (creating it), add what this event knows, check its scope.

    With `status`, also record it (with the event's amount and currency)
    unless a newer event already set one: `status_applied` says which.
    """
    params = {name: facts.get(name) for name in _FACTS}
    for name in ("session_metadata", "intent_metadata"):
        if params[name] is not None:
            params[name] = json.dumps(params[name])
    params.update(
        payment_id=payment_id, account=event.account_key, status=status, amount=amount,
        currency=currency, rank=_STATUS_RANK.get(status),
        at=require_created(event) if status else None,
    )
    # RETURNING lists Payment's fields in order.
    payment = Payment(*cursor(conn).execute(_NOTE, params).fetchone())
    scope.check(conn, event, "payment", payment_id, payment.account)
    return payment


def set_status(
    conn: psycopg.Connection,
    event: Event,
    payment_id: str,
    status: str,
    amount: int | None,
    currency: str | None,
) -> bool:
    """Record `status` unless a newer event already set one; True if applied."""
    return note(conn, event, payment_id, status, amount, currency).status_applied
