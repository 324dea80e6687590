"""Refunds: each refund's lifecycle, and how much of its payment went back.

A refund is keyed by its id and moves one way through its statuses:
pending -> requires_action -> succeeded -> failed | canceled. Stripe says a
refund can still fail after it succeeded (the money returns to the balance),
and failed and canceled are final, so a status applies only when it is
further along than the stored one; the event's `created` never decides.
`refund.created`, `refund.updated`, `refund.failed` and
`charge.refund.updated` carry the Refund; `charge.refunded` carries the
Charge, whose `refunds` list is only sent on API versions before 2022-11-15
(or when expanded), and whose `amount_refunded` is the charge's cumulative
position, kept ordered by event time as before.

The payment's `amount_refunded` is recomputed from both after every change:
the refunds that are not failed or canceled, or the charge's position less
the refunds that failed, whichever is larger. So a refund named by both a
refund event and the charge is counted once, and a failed one is subtracted.

Jobs, one per transition of a refund: `payment.refunded` when a refund is
first seen alive, `refund.failed` when it fails or is canceled.
"""
from __future__ import annotations

import psycopg

from ..service import outbox
from ..service.events import Event, require_created, require_id, timestamp
from ..service.outcomes import PARTIALLY_REFUNDED, REFUND_FAILED, REFUNDED, SUPERSEDED
from ..service.registry import handles
from . import scope
from .payments import note, payment_id_of

_RANK = {"pending": 0, "requires_action": 1, "succeeded": 2, "failed": 3, "canceled": 3}
_DEAD = 3
PAYMENT_REFUNDED = "payment.refunded"
REFUND_FAILED_JOB = "refund.failed"

_STORED = "SELECT status_rank, account FROM refunds WHERE refund_id = %s"

_UPSERT = """
INSERT INTO refunds AS r
    (refund_id, account, payment_id, charge_id, amount, currency, status, status_rank,
     failure_reason, event_id, created_at)
VALUES (%(refund_id)s, %(account)s, %(payment_id)s, %(charge_id)s, %(amount)s, %(currency)s,
        %(status)s, %(rank)s, %(failure_reason)s, %(event_id)s, coalesce(%(created)s, now()))
ON CONFLICT (refund_id) DO UPDATE
SET status = EXCLUDED.status, status_rank = EXCLUDED.status_rank,
    failure_reason = coalesce(EXCLUDED.failure_reason, r.failure_reason), updated_at = now()
WHERE EXCLUDED.status_rank > r.status_rank
"""

_CHARGE_POSITION = """
UPDATE payments
SET charge_refunded = %(charge_refunded)s, refund_at = %(at)s,
    -- The payment's own events own its amount; the charge's only fills a gap.
    amount = coalesce(amount, %(amount)s), currency = coalesce(currency, %(currency)s),
    updated_at = now()
WHERE payment_id = %(payment_id)s
  AND (refund_at IS NULL OR (%(at)s, %(charge_refunded)s) >= (refund_at, charge_refunded))
RETURNING payment_id
"""

_RECOMPUTE = """
WITH r AS (
    SELECT coalesce(sum(amount) FILTER (WHERE status_rank < 3), 0) AS alive,
           coalesce(sum(amount) FILTER (WHERE status_rank >= 3), 0) AS dead
    FROM refunds WHERE payment_id = %(payment_id)s
)
UPDATE payments p
SET amount_refunded = greatest(r.alive, p.charge_refunded - r.dead), updated_at = now()
FROM r
WHERE p.payment_id = %(payment_id)s
RETURNING p.amount_refunded, p.refunded
"""


def _record(conn: psycopg.Connection, event: Event, payment_id: str, refund: dict) -> str | None:
    """Apply one refund's status; the job kind of the transition it made, if any."""
    refund_id = require_id(refund.get("id"), "refund id")
    status = refund.get("status") or "succeeded"  # old charge lists name no status
    rank = _RANK.get(status)
    if rank is None:
        raise ValueError(f"unknown refund status {status!r}")
    stored = scope.stored(conn, event, "refund", refund_id, _STORED)
    if stored is not None and rank <= stored[0]:
        return None
    conn.execute(
        _UPSERT,
        {
            "refund_id": refund_id, "account": event.account_key, "payment_id": payment_id,
            "charge_id": refund.get("charge"), "amount": refund.get("amount"),
            "currency": refund.get("currency"), "status": status, "rank": rank,
            "failure_reason": refund.get("failure_reason"), "event_id": event.id,
            "created": timestamp(refund.get("created")),
        },
    )
    if rank == _DEAD:
        return REFUND_FAILED_JOB
    return PAYMENT_REFUNDED if stored is None else None


def _settle(conn: psycopg.Connection, payment_id: str) -> tuple[int, bool]:
    return conn.execute(_RECOMPUTE, {"payment_id": payment_id}).fetchone()


def _notify(conn, event, kind, payment_id, refund, position) -> None:
    outbox.enqueue(
        conn,
        kind,
        {
            "payment_id": payment_id,
            "account": event.account,
            "refund_id": refund["id"],
            "amount": refund.get("amount"),
            "currency": refund.get("currency"),
            "status": refund.get("status") or "succeeded",
            "failure_reason": refund.get("failure_reason"),
            "payment_amount_refunded": position[0],
            "payment_fully_refunded": position[1],
        },
        idempotency_key=f"{kind}:{refund['id']}",
    )


def _outcome(position: tuple[int, bool]) -> str:
    return REFUNDED if position[1] else PARTIALLY_REFUNDED


@handles("refund.created", "refund.updated", "refund.failed", "charge.refund.updated")
def refund_changed(conn: psycopg.Connection, event: Event) -> str:
    refund = event.object
    payment_id = payment_id_of(refund.get("payment_intent"), refund.get("charge"))
    note(conn, event, payment_id)
    kind = _record(conn, event, payment_id, refund)
    position = _settle(conn, payment_id)
    if kind is not None:
        _notify(conn, event, kind, payment_id, refund, position)
    if kind == REFUND_FAILED_JOB:
        return REFUND_FAILED
    return _outcome(position) if kind is not None else SUPERSEDED


@handles("charge.refunded")
def charge_refunded(conn: psycopg.Connection, event: Event) -> str:
    charge = event.object
    payment_id = payment_id_of(charge.get("payment_intent"), charge.get("id"))
    note(conn, event, payment_id)
    moved = conn.execute(
        _CHARGE_POSITION,
        {
            "payment_id": payment_id,
            "amount": charge.get("amount"),
            "currency": charge.get("currency"),
            "charge_refunded": charge.get("amount_refunded") or 0,
            "at": require_created(event),
        },
    ).fetchone()
    listed = charge.get("refunds")
    changes = [
        (kind, refund)
        for refund in (listed.get("data") if isinstance(listed, dict) else None) or []
        if (kind := _record(conn, event, payment_id, {"charge": charge.get("id"), **refund}))
    ]
    position = _settle(conn, payment_id)
    for kind, refund in changes:
        _notify(conn, event, kind, payment_id, refund, position)
    return _outcome(position) if moved or changes else SUPERSEDED
