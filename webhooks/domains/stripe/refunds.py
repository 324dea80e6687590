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
position, kept ordered by event time as before. Between 2022-11-15 and
2024-10-28.acacia nothing else names a card refund: when the position says
more was refunded than the refunds known by id, the worker fetches the
charge with its refunds (`_fetch_refunds`), so each is told once by its id.

The payment's `amount_refunded` is recomputed from both after every change:
the refunds that are not failed or canceled, or the charge's position less
the refunds that failed, whichever is larger. So a refund named by both a
refund event and the charge is counted once, and a failed one is subtracted.

Money refunded is what was captured and then given back. Before API
2025-03-31 (basil) a partial capture or a cancelled authorisation released
the rest of the authorisation as a Refund, which moved the charge's
`amount_refunded` and sent `charge.refunded` (Stripe's changelog, "Partially
capturing or canceling payments no longer creates a Refund",
https://docs.stripe.com/changelog/basil/2025-03-31/remove-refund-from-partial-capture-and-payment-cancellation-flow).
So a pre-basil charge's position leaves out what it released
(`amount - amount_captured`, or all of a never-captured charge), and the
Refund Stripe made for it (that amount, no reason of the shop's, before any
other refund of the charge) is not counted and tells the shop nothing.
Fully refunded is measured against `amount_captured` (migrations/0027).

Jobs, one per transition of a refund: `payment.refunded` when a refund is
first seen alive, `refund.failed` when it fails or is canceled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import psycopg
from pydantic import ConfigDict

from webhooks.core import jobs, outbox
from webhooks.core.events import Event, Json, require_created, require_id, timestamp
from webhooks.core.outcomes import REFUNDED, SUPERSEDED
from webhooks.core.parts import Parts
from webhooks.core.registry import handles
from webhooks.infra.db import one

from . import fetch, scope
from .declared import BASIL, Amount, Currency, Flag, Id, StripeObject, Timestamp, UnknownValue, Word
from .lookups import Listing, Lookup, Rows
from .payments import note, payment_id_of

# The refund's own status after the event (`refunded`: the payment is refunded in full).
PARTIALLY_REFUNDED = "partially_refunded"
REFUND_FAILED = "refund_failed"  # failed or canceled: no longer counted
# Before basil, what a partial capture or a cancellation released uncaptured
# came as a Refund: no money went back.
AUTHORIZATION_RELEASED = "authorization_released"


class _Refund(jobs.Job):
    """What a refund's job says of it and of its payment."""

    payment_id: str
    """the PaymentIntent id (a Charges-API payment's charge id, or a session without a PaymentIntent's own
    id)"""
    account: str | None
    """the Connect account (`acct_...`) the object belongs to; null for the platform's own"""
    refund_id: str
    """the Refund id"""
    amount: jobs.Amount
    """in the currency's smallest unit"""
    currency: jobs.Currency
    """ISO currency code, lower case"""
    status: str
    """the refund's status (`pending`, `requires_action`, `succeeded`, `failed`, `canceled`)"""
    failure_reason: str | None
    """Stripe's `failure_reason` of a failed refund"""
    payment_amount_refunded: int
    """what is refunded of the payment now, all its refunds counted"""
    payment_fully_refunded: bool
    """whether all that was captured is refunded"""


class PaymentRefundedJob(_Refund):
    """Enqueued when a refund is first seen alive. Key: `payment.refunded:<refund_id>`."""

    model_config = ConfigDict(title="A refund of a payment")

    kind: Literal["payment.refunded"]


class RefundFailedJob(_Refund):
    """Enqueued when a refund fails. Key: `refund.failed:<refund_id>`."""

    model_config = ConfigDict(title="A refund that failed")

    kind: Literal["refund.failed"]


PAYMENT_REFUNDED = jobs.documented(PaymentRefundedJob)
REFUND_FAILED_JOB = jobs.documented(RefundFailedJob)
PARTS = Parts(
    outcomes=(REFUNDED, PARTIALLY_REFUNDED, REFUND_FAILED, AUTHORIZATION_RELEASED),
    jobs=(PAYMENT_REFUNDED, REFUND_FAILED_JOB),
)


def _succeeded(refund: Json) -> bool:
    return refund.get("status") == "succeeded"


LOOKUPS = (
    Lookup(
        "refund",
        "/v1/refunds/",
        Rows("refund", "refunds", "refund_id", at="updated_at", state="status = 'succeeded'"),
        agrees=_succeeded,
        listing=Listing("/v1/refunds", lambda refund: refund["id"] if _succeeded(refund) else None),
    ),
)


class Refund(StripeObject):
    """The Refund fields the handlers read (https://docs.stripe.com/api/refunds/object)."""

    object: Literal["refund"]
    id: Id
    status: Word | None = None  # old charges' refund lists name none
    amount: Amount
    currency: Currency
    payment_intent: Id | None = None
    charge: Id | None = None
    failure_reason: Word | None = None
    reason: Word | None = None
    created: Timestamp | None = None


class _Refunds(StripeObject):
    data: list[Refund] = []


class Charge(StripeObject):
    """The Charge fields the handlers read (https://docs.stripe.com/api/charges/object)."""

    object: Literal["charge"]
    id: Id
    amount: Amount
    amount_captured: Amount | None = None
    amount_refunded: Amount
    captured: Flag | None = None
    refunded: Flag | None = None
    currency: Currency
    payment_intent: Id | None = None
    refunds: _Refunds | None = None  # listed before 2022-11-15, or when expanded


_RANK = {"pending": 0, "requires_action": 1, "succeeded": 2, "failed": 3, "canceled": 3}
_DEAD = 3
# The versions at which a card refund is named only by the charge's cumulative
# position: no `refunds` list from 2022-11-15, `refund.created` from 2024-10-28.
_UNNAMED_REFUNDS = ("2022-11-15", "2024-10-28")

_STORED = "SELECT status_rank, account FROM refunds WHERE refund_id = %s"

_UPSERT = """
INSERT INTO refunds AS r
    (refund_id, account, payment_id, charge_id, amount, currency, status, status_rank,
     failure_reason, reason, event_id, created_at)
VALUES (%(refund_id)s, %(account)s, %(payment_id)s, %(charge_id)s, %(amount)s, %(currency)s,
        %(status)s, %(rank)s, %(failure_reason)s, %(reason)s, %(event_id)s,
        coalesce(%(created)s, now()))
ON CONFLICT (refund_id) DO UPDATE
SET status = EXCLUDED.status, status_rank = EXCLUDED.status_rank,
    failure_reason = coalesce(EXCLUDED.failure_reason, r.failure_reason),
    reason = coalesce(r.reason, EXCLUDED.reason), updated_at = now()
WHERE EXCLUDED.status_rank > r.status_rank
"""

# What the charge says was captured and released: facts that only grow,
# whichever event brings them.
_CAPTURE = """
UPDATE payments
SET amount_captured = greatest(amount_captured, %(captured)s),
    released = greatest(released, %(released)s), updated_at = now()
WHERE payment_id = %(payment_id)s
"""

# The charge's position leaves out what any event said was released: a
# Refund that exists is in `amount_refunded` whichever version renders it
# (a charge fetched again in the pinned version, fetch.py, included).
_CHARGE_POSITION = """
UPDATE payments
SET charge_refunded = greatest(%(amount_refunded)s - released, 0), refund_at = %(at)s,
    -- The payment's own events own its amount; the charge's only fills a gap.
    amount = coalesce(amount, %(amount)s), currency = coalesce(currency, %(currency)s),
    updated_at = now()
WHERE payment_id = %(payment_id)s
  AND (refund_at IS NULL
       OR (%(at)s, greatest(%(amount_refunded)s - released, 0)) >= (refund_at, charge_refunded))
RETURNING payment_id
"""

_RECOMPUTE = """
WITH reversal AS (
    -- The pre-basil Refund of the released part: Stripe's own (no reason,
    -- or an expired authorisation's), made at the capture (so not after the
    -- success) or the cancellation, before any refund of captured money.
    SELECT r.refund_id
    FROM refunds r JOIN payments p USING (payment_id)
    WHERE r.payment_id = %(payment_id)s AND p.released > 0 AND r.amount = p.released
      AND coalesce(r.reason, 'expired_uncaptured_charge') = 'expired_uncaptured_charge'
      AND (p.status IS DISTINCT FROM 'succeeded' OR r.created_at <= p.status_at)
    ORDER BY r.created_at, r.refund_id
    LIMIT 1
), r AS (
    SELECT coalesce(sum(amount) FILTER (WHERE status_rank < 3), 0) AS alive,
           coalesce(sum(amount) FILTER (WHERE status_rank >= 3), 0) AS dead
    FROM refunds
    WHERE payment_id = %(payment_id)s AND refund_id NOT IN (SELECT refund_id FROM reversal)
)
UPDATE payments p
SET amount_refunded = greatest(r.alive, p.charge_refunded - r.dead), updated_at = now()
FROM r
WHERE p.payment_id = %(payment_id)s
RETURNING p.amount_refunded, p.refunded, (SELECT refund_id FROM reversal),
          p.charge_refunded - r.dead > r.alive
"""


@dataclass(frozen=True)
class Position:
    """The payment's refunds once an event is applied."""

    amount_refunded: int
    fully_refunded: bool
    # The pre-basil Refund of the released, never captured part, if known.
    release: str | None
    # The charge says more was refunded than the refunds known by id add up to.
    unnamed: bool


def _before_basil(event: Event) -> bool:
    return event.api_version is not None and event.api_version[:10] < BASIL


def _captured(charge: Json) -> int | None:
    """What the charge captured: 0 for a released (cancelled) authorisation, None if not said."""
    if charge.get("captured"):
        captured = charge.get("amount_captured")
        return captured if isinstance(captured, int) else charge.get("amount")
    return 0 if charge.get("refunded") else None


def _released(event: Event, charge: Json) -> int:
    """The part of a pre-basil charge's amount_refunded that was released uncaptured."""
    captured, amount = _captured(charge), charge.get("amount")
    if not _before_basil(event) or captured is None or not isinstance(amount, int):
        return 0
    return max(amount - captured, 0)


def _record(conn: psycopg.Connection, event: Event, payment_id: str, refund: Json) -> jobs.JobKind | None:
    """Apply one refund's status; the job kind of the transition it made, if any."""
    refund_id = require_id(refund.get("id"), "refund id")
    status = refund.get("status") or "succeeded"  # old charge lists name no status
    rank = _RANK.get(status)
    if rank is None:
        raise UnknownValue("data.object.status: not a refund status the refund lifecycle here knows")
    stored = scope.stored(conn, event, "refund", refund_id, _STORED)
    if stored is not None and rank <= stored[0]:
        return None
    conn.execute(
        _UPSERT,
        {
            "refund_id": refund_id,
            "account": event.account_key,
            "payment_id": payment_id,
            "charge_id": refund.get("charge"),
            "amount": refund.get("amount"),
            "currency": refund.get("currency"),
            "status": status,
            "rank": rank,
            "failure_reason": refund.get("failure_reason"),
            "reason": refund.get("reason"),
            "event_id": event.id,
            "created": timestamp(refund.get("created")),
        },
    )
    if rank == _DEAD:
        return REFUND_FAILED_JOB
    return PAYMENT_REFUNDED if stored is None else None


def _recompute(conn: psycopg.Connection, payment_id: str) -> Position:
    return Position(*one(conn.execute(_RECOMPUTE, {"payment_id": payment_id})))


def _notify(
    conn: psycopg.Connection,
    event: Event,
    kind: jobs.JobKind,
    payment_id: str,
    refund: Json,
    position: Position,
) -> None:
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
            "payment_amount_refunded": position.amount_refunded,
            "payment_fully_refunded": position.fully_refunded,
        },
        idempotency_key=f"{kind.name}:{refund['id']}",
    )


def _outcome(position: Position) -> str:
    if position.fully_refunded:
        return REFUNDED
    return PARTIALLY_REFUNDED if position.amount_refunded else AUTHORIZATION_RELEASED


@handles("refund.created", "refund.updated", "refund.failed", "charge.refund.updated", reads=Refund)
def refund_changed(conn: psycopg.Connection, event: Event) -> str:
    refund = event.object
    payment_id = payment_id_of(refund.get("payment_intent"), refund.get("charge"))
    note(conn, event, payment_id)
    kind = _record(conn, event, payment_id, refund)
    position = _recompute(conn, payment_id)
    if kind is None:
        return SUPERSEDED
    if refund["id"] == position.release:
        return AUTHORIZATION_RELEASED
    _notify(conn, event, kind, payment_id, refund, position)
    return REFUND_FAILED if kind == REFUND_FAILED_JOB else _outcome(position)


@handles("charge.refunded", reads=Charge)
def charge_refunded(conn: psycopg.Connection, event: Event) -> str:
    charge = event.object
    payment_id = payment_id_of(charge.get("payment_intent"), charge.get("id"))
    note(conn, event, payment_id)
    released = _released(event, charge)
    conn.execute(_CAPTURE, {"payment_id": payment_id, "captured": _captured(charge), "released": released})
    moved = conn.execute(
        _CHARGE_POSITION,
        {
            "payment_id": payment_id,
            "amount": charge.get("amount"),
            "currency": charge.get("currency"),
            "amount_refunded": charge.get("amount_refunded") or 0,
            "at": require_created(event),
        },
    ).fetchone()
    listed = charge.get("refunds")
    changes = [
        (kind, refund)
        for refund in (listed.get("data") if isinstance(listed, dict) else None) or []
        if (kind := _record(conn, event, payment_id, {"charge": charge.get("id"), **refund}))
    ]
    position = _recompute(conn, payment_id)
    for kind, refund in changes:
        if refund["id"] != position.release:
            _notify(conn, event, kind, payment_id, refund, position)
    if moved and position.unnamed and _refunds_unnamed(event) and not isinstance(listed, dict):
        _fetch_refunds(conn, event, charge)
    return _outcome(position) if moved or changes else SUPERSEDED


def _refunds_unnamed(event: Event) -> bool:
    version = (event.api_version or "")[:10]
    return _UNNAMED_REFUNDS[0] <= version < _UNNAMED_REFUNDS[1]


def _fetch_refunds(conn: psycopg.Connection, event: Event, charge: Json) -> None:
    """Queue the fetch of the charge with its refunds listed, to apply as this event again.

    From API 2022-11-15 a Charge no longer lists its refunds, and until
    2024-10-28.acacia `refund.created` was not sent for a charge's refund:
    `charge.refunded` then names only the cumulative amount, and Stripe's
    changelog says the refund's id took "an extra API call"
    (https://docs.stripe.com/changelog/acacia/2024-10-28/refund-webhook-update). The shop is
    told of each refund by its id (`payment.refunded:<refund_id>`, as at
    every other version), so the worker fetches the charge with `refunds`
    expanded (fetch.py, never inside this transaction) and applies it as
    `<event id>:fetched`; each refund is then recorded once, whichever of
    the fetch, a redelivery or a later refund event names it first.
    """
    url = f"/v1/charges/{require_id(charge.get('id'), 'charge id')}?expand[]=refunds"
    fetch.enqueue(conn, event, event.type, url, via="account")
