"""A mirror of each subscription, fed by its `customer.subscription.*` events.

Every such event carries the whole subscription, so the mirror takes the
snapshot of the newest event: one whose `created` (then its status rank,
within one second) is older than the stored one's changes nothing. A
deletion is final: it applies whatever arrived before it, and nothing
applies after it, so the row ends the same in every delivery order.

Access is not decided here but by the `subscription_access` view; every
change runs inside `access.tracking`, which tells the shop when it flips.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import psycopg
from pydantic import ConfigDict

from webhooks.core import jobs, outbox
from webhooks.core.events import Event, Json, id_of, require_created, require_id, timestamp
from webhooks.core.outcomes import SUPERSEDED
from webhooks.core.parts import Parts
from webhooks.core.registry import handles

from . import access
from .declared import Count, Expandable, Flag, Id, StripeObject, Timestamp, UnknownValue, Word
from .lookups import Lookup

# The mirror took the event's snapshot; a trial's end was announced
# (customer.subscription.trial_will_end); access ended with the subscription.
SUBSCRIPTION_UPDATED = "subscription_updated"
TRIAL_ENDING = "trial_ending"
REVOKED = "revoked"
ALREADY_REVOKED = "already_revoked"


class SubscriptionTrialEndingJob(jobs.Job):
    """Enqueued by `customer.subscription.trial_will_end`. Key:
    `subscription.trial_ending:<subscription_id>:<event_id>`."""

    model_config = ConfigDict(title="A trial ends in three days, or was ended early")

    kind: Literal["subscription.trial_ending"]
    subscription_id: str
    """the Subscription id"""
    account: str | None
    """the Connect account (`acct_...`) the object belongs to; null for the platform's own"""
    customer: str | None
    """the Stripe customer id"""
    trial_end: int | None
    """when the trial ends (Unix time)"""
    event_id: str
    """the event whose delivery enqueued the job"""


TRIAL_ENDING_JOB = jobs.documented(SubscriptionTrialEndingJob)
PARTS = Parts(
    outcomes=(SUBSCRIPTION_UPDATED, TRIAL_ENDING, REVOKED, ALREADY_REVOKED), jobs=(TRIAL_ENDING_JOB,)
)
LOOKUPS = (Lookup("subscription", "/v1/subscriptions/"),)


class _Item(StripeObject):
    current_period_start: Timestamp | None = None
    current_period_end: Timestamp | None = None


class _Items(StripeObject):
    data: list[_Item] = []


class _Pause(StripeObject):
    behavior: Word | None = None
    resumes_at: Timestamp | None = None


class _Cancellation(StripeObject):
    reason: Word | None = None


class Subscription(StripeObject):
    """The Subscription fields the handlers read (https://docs.stripe.com/api/subscriptions/object)."""

    object: Literal["subscription"]
    id: Id
    status: Word
    customer: Expandable
    cancel_at_period_end: Flag | None = None
    cancel_at: Timestamp | None = None
    canceled_at: Timestamp | None = None
    trial_end: Timestamp | None = None
    pause_collection: _Pause | None = None
    collection_method: Word | None = None
    days_until_due: Count | None = None
    items: _Items | None = None  # each item's period: basil and later
    current_period_start: Timestamp | None = None  # before basil
    current_period_end: Timestamp | None = None  # before basil
    latest_invoice: Expandable | None = None
    cancellation_details: _Cancellation | None = None


# Ties (same second) go to the later stage of the lifecycle.
_STATUS_RANK = {
    "incomplete": 0,
    "trialing": 1,
    "active": 2,
    "past_due": 3,
    "paused": 3,
    "unpaid": 4,
    "incomplete_expired": 5,
    "canceled": 6,
}

_APPLY = """
UPDATE subscriptions AS s
SET status = %(status)s, status_rank = %(rank)s, status_at = %(at)s, customer = %(customer)s,
    cancel_at_period_end = %(cancel_at_period_end)s, cancel_at = %(cancel_at)s,
    canceled_at = %(canceled_at)s, trial_end = %(trial_end)s,
    pause_behavior = %(pause_behavior)s, pause_resumes_at = %(pause_resumes_at)s,
    collection_method = %(collection_method)s, days_until_due = %(days_until_due)s,
    current_period_start = %(period_start)s, current_period_end = %(period_end)s,
    latest_invoice = coalesce(%(latest_invoice)s, s.latest_invoice),
    revoked_at = CASE WHEN %(final)s THEN %(at)s END,
    revoked_reason = CASE WHEN %(final)s THEN %(reason)s END,
    updated_at = now()
WHERE s.subscription_id = %(subscription_id)s AND s.revoked_at IS NULL
  AND (%(final)s OR s.status_at IS NULL OR (%(at)s, %(rank)s) >= (s.status_at, s.status_rank))
RETURNING 1
"""


def _periods(subscription: Json) -> tuple[datetime | None, datetime | None]:
    """The current period: on the subscription before 2025-03-31 (basil), on its items after.

    With items on different intervals the latest start is the renewal that
    matters for dunning, and the latest end is when the paid time runs out.
    """
    holders = (subscription.get("items") or {}).get("data") or []
    if isinstance(subscription.get("current_period_start"), int):
        holders = [subscription]
    starts = [h["current_period_start"] for h in holders if isinstance(h.get("current_period_start"), int)]
    ends = [h["current_period_end"] for h in holders if isinstance(h.get("current_period_end"), int)]
    return (timestamp(max(starts)) if starts else None, timestamp(max(ends)) if ends else None)


def _days(value: object) -> int | None:
    """A send_invoice subscription's days until an invoice is due (null otherwise)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10_000 else None


def _snapshot(event: Event, final: bool) -> Json:
    subscription = event.object
    status = subscription.get("status")
    if status not in _STATUS_RANK:
        # A status Stripe added later: refused, recorded and retried (as an
        # unknown refund or dispute status is) rather than guessed at, so
        # access is never decided on a word we do not know.
        raise UnknownValue("data.object.status: not a subscription status the access rules here know")
    pause = subscription.get("pause_collection") or {}
    start, end = _periods(subscription)
    return {
        "subscription_id": require_id(subscription.get("id"), "subscription id"),
        "status": status,
        "rank": _STATUS_RANK[status],
        "at": require_created(event),
        "customer": id_of(subscription.get("customer")),
        "cancel_at_period_end": subscription.get("cancel_at_period_end"),
        "cancel_at": timestamp(subscription.get("cancel_at")),
        "canceled_at": timestamp(subscription.get("canceled_at")),
        "trial_end": timestamp(subscription.get("trial_end")),
        "pause_behavior": pause.get("behavior"),
        "pause_resumes_at": timestamp(pause.get("resumes_at")),
        "collection_method": subscription.get("collection_method"),
        "days_until_due": _days(subscription.get("days_until_due")),
        "period_start": start,
        "period_end": end,
        "latest_invoice": id_of(subscription.get("latest_invoice")),
        "final": final,
        "reason": (subscription.get("cancellation_details") or {}).get("reason"),
    }


def _apply(conn: psycopg.Connection, event: Event, final: bool = False) -> bool:
    """The event's snapshot onto the mirror, if it is the newest; True if applied."""
    snapshot = _snapshot(event, final)
    with access.tracking(conn, event, snapshot["subscription_id"]):
        return conn.execute(_APPLY, snapshot).fetchone() is not None


@handles(
    "customer.subscription.created",
    "customer.subscription.updated",
    "customer.subscription.paused",
    "customer.subscription.resumed",
    reads=Subscription,
)
def subscription_changed(conn: psycopg.Connection, event: Event) -> str:
    return SUBSCRIPTION_UPDATED if _apply(conn, event) else SUPERSEDED


@handles("customer.subscription.deleted", reads=Subscription)
def subscription_deleted(conn: psycopg.Connection, event: Event) -> str:
    return REVOKED if _apply(conn, event, final=True) else ALREADY_REVOKED


@handles("customer.subscription.trial_will_end", reads=Subscription)
def trial_will_end(conn: psycopg.Connection, event: Event) -> str:
    """Three days before a trial ends (or at once when it is ended early): tell the shop."""
    _apply(conn, event)
    subscription = event.object
    outbox.enqueue(
        conn,
        TRIAL_ENDING_JOB,
        {
            "subscription_id": subscription["id"],
            "account": event.account,
            "customer": id_of(subscription.get("customer")),
            "trial_end": subscription.get("trial_end"),
            "event_id": event.id,
        },
        idempotency_key=f"{TRIAL_ENDING_JOB.name}:{subscription['id']}:{event.id}",
    )
    return TRIAL_ENDING
