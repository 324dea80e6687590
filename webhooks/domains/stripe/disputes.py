"""Disputes: each dispute's lifecycle, keyed by its id, and the flag on its payment.

Stripe's statuses for an inquiry (warning_needs_response,
warning_under_review, warning_closed) and a chargeback (needs_response,
under_review, won, lost; prevented) only move forward, and an inquiry can
escalate to a chargeback, so the ranks below order all of them and a status
applies only when it is further along than the stored one: won, lost,
warning_closed and prevented are final. The event's `created` never decides.
`funds_withdrawn` and `funds_reinstated` are facts that, once true, stay so,
and the dispute's own `balance_transactions` state them ("zero, one, or two
balance transactions that show funds withdrawn and reinstated", The Dispute
object, https://docs.stripe.com/api/disputes/object), not the event's type.

The payment counts as disputed while it has a dispute that did not end in
its favour (won, warning_closed, prevented). Jobs: `dispute.opened` (with the
evidence deadline `due_by`) when a dispute is first seen, whatever its status
by then, and `dispute.closed` (with the result) when it reaches a final one.
"""

from __future__ import annotations

from typing import Literal

import psycopg
from pydantic import ConfigDict

from webhooks.core import jobs, outbox
from webhooks.core.events import Event, Json, require_id, timestamp
from webhooks.core.outcomes import SUPERSEDED
from webhooks.core.parts import Parts
from webhooks.core.registry import handles

from . import scope
from .declared import Amount, Currency, Id, SignedAmount, StripeObject, Timestamp, UnknownValue, Word
from .lookups import Listing, Lookup, Rows
from .payments import note, payment_id_of

DISPUTE_OPEN = "dispute_open"
DISPUTE_WON = "dispute_won"
DISPUTE_LOST = "dispute_lost"
DISPUTE_CLOSED = "dispute_closed"  # an inquiry closed, or a dispute prevented


class _Dispute(jobs.Job):
    """What a dispute's job says of it, opened or closed."""

    payment_id: str
    """the PaymentIntent id (a Charges-API payment's charge id, or a session without a PaymentIntent's own
    id)"""
    account: str | None
    """the Connect account (`acct_...`) the object belongs to; null for the platform's own"""
    dispute_id: str
    """the Dispute id"""
    amount: jobs.Amount
    """in the currency's smallest unit"""
    currency: jobs.Currency
    """ISO currency code, lower case"""
    reason: str | None
    """Stripe's dispute reason (`fraudulent`, ...)"""
    status: str
    """the dispute's status"""
    due_by: int | None
    """when evidence is due (Unix time), from `evidence_details.due_by`"""


class DisputeOpenedJob(_Dispute):
    """Key: `dispute.opened:<dispute_id>`."""

    model_config = ConfigDict(title="A dispute opened on a payment")

    kind: Literal["dispute.opened"]


class DisputeClosedJob(_Dispute):
    """`status` is the result (`won`, `lost`, `warning_closed`, `prevented`). Key:
    `dispute.closed:<dispute_id>`."""

    model_config = ConfigDict(title="A dispute closed")

    kind: Literal["dispute.closed"]


DISPUTE_OPENED = jobs.documented(DisputeOpenedJob)
DISPUTE_CLOSED_JOB = jobs.documented(DisputeClosedJob)
PARTS = Parts(
    outcomes=(DISPUTE_OPEN, DISPUTE_WON, DISPUTE_LOST, DISPUTE_CLOSED),
    jobs=(DISPUTE_OPENED, DISPUTE_CLOSED_JOB),
)
# Every dispute Stripe lists has its row, whatever its status.
LOOKUPS = (
    Lookup(
        "dispute",
        "/v1/disputes/",
        Rows("dispute", "disputes", "dispute_id", at="created_at"),
        listing=Listing("/v1/disputes", lambda dispute: dispute["id"]),
    ),
)


class _Evidence(StripeObject):
    due_by: Timestamp | None = None


class _BalanceTransaction(StripeObject):
    amount: SignedAmount


class Dispute(StripeObject):
    """The Dispute fields the handlers read (https://docs.stripe.com/api/disputes/object)."""

    object: Literal["dispute"]
    id: Id
    status: Word
    amount: Amount
    currency: Currency
    charge: Id
    payment_intent: Id | None = None
    reason: Word | None = None
    evidence_details: _Evidence | None = None
    balance_transactions: list[_BalanceTransaction] = []


_RANK = {
    "warning_needs_response": 0,
    "warning_under_review": 1,
    "needs_response": 2,
    "under_review": 3,
    "won": 4,
    "lost": 4,
    "warning_closed": 4,
    "prevented": 4,
}
_FINAL = 4
_OUTCOME = {
    "won": DISPUTE_WON,
    "lost": DISPUTE_LOST,
    "warning_closed": DISPUTE_CLOSED,
    "prevented": DISPUTE_CLOSED,
}

_STORED = "SELECT status_rank, account FROM disputes WHERE dispute_id = %s"

_UPSERT = """
INSERT INTO disputes AS d
    (dispute_id, account, payment_id, charge_id, amount, currency, reason, event_id,
     status, status_rank, due_by, funds_withdrawn, funds_reinstated)
VALUES (%(dispute_id)s, %(account)s, %(payment_id)s, %(charge_id)s, %(amount)s, %(currency)s,
        %(reason)s, %(event_id)s, %(status)s, %(rank)s, %(due_by)s, %(withdrawn)s, %(reinstated)s)
ON CONFLICT (dispute_id) DO UPDATE
SET status = CASE WHEN EXCLUDED.status_rank > d.status_rank THEN EXCLUDED.status ELSE d.status END,
    status_rank = greatest(d.status_rank, EXCLUDED.status_rank),
    due_by = coalesce(EXCLUDED.due_by, d.due_by),
    funds_withdrawn = d.funds_withdrawn OR EXCLUDED.funds_withdrawn,
    funds_reinstated = d.funds_reinstated OR EXCLUDED.funds_reinstated,
    updated_at = now()
WHERE EXCLUDED.status_rank > d.status_rank
   OR (EXCLUDED.funds_withdrawn AND NOT d.funds_withdrawn)
   OR (EXCLUDED.funds_reinstated AND NOT d.funds_reinstated)
RETURNING status
"""

_FLAG_PAYMENT = """
UPDATE payments SET updated_at = now(), disputed = EXISTS (
    SELECT 1 FROM disputes
    WHERE payment_id = %(payment_id)s
      AND coalesce(status, 'needs_response') NOT IN ('won', 'warning_closed', 'prevented'))
WHERE payment_id = %(payment_id)s
"""


@handles(
    "charge.dispute.created",
    "charge.dispute.updated",
    "charge.dispute.closed",
    "charge.dispute.funds_withdrawn",
    "charge.dispute.funds_reinstated",
    reads=Dispute,
)
def dispute_changed(conn: psycopg.Connection, event: Event) -> str:
    dispute = event.object
    dispute_id = require_id(dispute.get("id"), "dispute id")
    status = dispute.get("status")
    if status not in _RANK:
        raise UnknownValue("data.object.status: not a dispute status the dispute lifecycle here knows")
    payment_id = payment_id_of(dispute.get("payment_intent"), dispute.get("charge"))
    note(conn, event, payment_id)
    stored = scope.stored(conn, event, "dispute", dispute_id, _STORED)
    row = conn.execute(_UPSERT, _params(event, dispute, dispute_id, payment_id)).fetchone()
    if row is None:
        return SUPERSEDED
    conn.execute(_FLAG_PAYMENT, {"payment_id": payment_id})
    if stored is None:
        _notify(conn, event, DISPUTE_OPENED, payment_id, dispute)
    if _RANK[row[0]] == _FINAL and (stored is None or stored[0] < _FINAL):
        _notify(conn, event, DISPUTE_CLOSED_JOB, payment_id, dispute)
    return _OUTCOME.get(row[0], DISPUTE_OPEN)


def _params(event: Event, dispute: Json, dispute_id: str, payment_id: str) -> Json:
    return {
        "dispute_id": dispute_id,
        "account": event.account_key,
        "payment_id": payment_id,
        "charge_id": dispute.get("charge"),
        "amount": dispute.get("amount"),
        "currency": dispute.get("currency"),
        "reason": dispute.get("reason"),
        "event_id": event.id,
        "status": dispute["status"],
        "rank": _RANK[dispute["status"]],
        "due_by": timestamp((dispute.get("evidence_details") or {}).get("due_by")),
        **_funds(dispute),
    }


def _funds(dispute: Json) -> dict[str, bool]:
    """Whether the dispute's balance transactions took money out (negative) and put it back."""
    amounts = [move["amount"] for move in dispute.get("balance_transactions") or []]
    return {"withdrawn": any(a < 0 for a in amounts), "reinstated": any(a > 0 for a in amounts)}


def _notify(
    conn: psycopg.Connection, event: Event, kind: jobs.JobKind, payment_id: str, dispute: Json
) -> None:
    outbox.enqueue(
        conn,
        kind,
        {
            "payment_id": payment_id,
            "account": event.account,
            "dispute_id": dispute["id"],
            "amount": dispute.get("amount"),
            "currency": dispute.get("currency"),
            "reason": dispute.get("reason"),
            "status": dispute["status"],
            "due_by": (dispute.get("evidence_details") or {}).get("due_by"),
        },
        idempotency_key=f"{kind.name}:{dispute['id']}",
    )
