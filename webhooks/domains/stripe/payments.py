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

from webhooks.core.events import Event, Json, require_created, require_id
from webhooks.core.parts import Parts
from webhooks.infra.db import cursor, one, storable

from . import scope
from .lookups import Lookup, Rows

# The payment failed (a PaymentIntent's, a Checkout Session's or an invoice's).
PAYMENT_FAILED = "payment_failed"
PARTS = Parts(outcomes=(PAYMENT_FAILED,))

# Payments, not fulfilments, are what reconcile checks: a succeeded payment
# that is not an order (an invoice's, a held one) has no fulfilment, and is
# still a payment Stripe and we must agree on.
ROWS = Rows("payment", "payments", "payment_id", at="status_at", state="status = 'succeeded'")
# A payment with no PaymentIntent is keyed by its charge (payment_id_of).
LOOKUPS = (
    Lookup(
        "charge",
        "/v1/charges/",
        ROWS,
        prefixes=("ch_", "py_"),
        agrees=lambda charge: charge.get("status") == "succeeded",
    ),
)

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
    session_metadata: Json | None
    intent_metadata: Json | None
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


# One statement per event, written once in SQL (webhooks_note_payment,
# payments.sql) since a payment's success is decided there too: the row
# is created or locked, the identity facts added (the first event to state
# one keeps it), and the status applied only if this event is not older
# than the one that set the current status.
_NOTE = """
SELECT * FROM webhooks_note_payment(
    p_payment_id => %(payment_id)s, p_account => %(account)s, p_status => %(status)s,
    p_rank => %(rank)s::smallint, p_at => %(at)s, p_amount => %(amount)s, p_currency => %(currency)s,
    p_checkout_mode => %(checkout_mode)s, p_session_id => %(session_id)s,
    p_client_reference_id => %(client_reference_id)s, p_customer => %(customer)s,
    p_session_metadata => %(session_metadata)s::jsonb, p_intent_metadata => %(intent_metadata)s::jsonb,
    p_invoice_id => %(invoice_id)s)
"""

_FACTS = (
    "checkout_mode",
    "session_id",
    "client_reference_id",
    "customer",
    "session_metadata",
    "intent_metadata",
    "invoice_id",
)


def payment_id_of(*candidates: Any) -> str:
    """The first id given: callers list the payment intent first, then fallbacks."""
    return require_id(next((c for c in candidates if c), None), "payment id")


def note(
    conn: psycopg.Connection,
    event: Event,
    payment_id: str,
    status: str | None = None,
    amount: int | None = None,
    currency: str | None = None,
    **facts: Any,
) -> Payment:
    """Lock the payment's row (creating it), add what this event knows, check its scope.

    With `status`, also record it (with the event's amount and currency)
    unless a newer event already set one: `status_applied` says which.
    """
    params = dict(
        facts_params(facts),
        payment_id=payment_id,
        account=event.account_key,
        status=status,
        amount=amount,
        currency=currency,
        rank=None if status is None else _STATUS_RANK.get(status),
        at=require_created(event) if status else None,
    )
    # The function's row type lists Payment's fields in order.
    payment = Payment(*one(cursor(conn).execute(_NOTE, params)))
    scope.check(conn, event, "payment", payment_id, payment.account)
    return payment


def facts_params(facts: dict[str, Any]) -> dict[str, Any]:
    """What an event states of a payment's identity, as the SQL functions take it.

    Free text (metadata, client_reference_id) can hold what PostgreSQL cannot
    store (a NUL, a lone surrogate, NaN): it is stored as `storable` makes it,
    so that the paid order still ships; the ledger keeps the payload as signed.
    """
    params = {name: storable(facts.get(name)) for name in _FACTS}
    for name in ("session_metadata", "intent_metadata"):
        if params[name] is not None:
            params[name] = json.dumps(params[name])
    return params


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
