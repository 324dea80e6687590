"""Subscription lifecycles as Stripe sends them, and the mirror and access they leave.

Subscription events are built from the `customer.subscription.deleted`
sample (a dahlia/basil shape: the period on the items), invoices from the
invoice samples. Every id of one story carries the story's tag, so
`retag` gives the same story with fresh ids: subscriptions are keyed by
object id alone, so two deliveries compared side by side need their own.
"""

from __future__ import annotations

import copy
import json
import secrets
from datetime import UTC, datetime

from tests.support.stories import DAY, _invoice, fixture

MONTH = 30 * DAY
HOUR = 3600


class Story:
    """Builds the events of one subscription; ids are `<prefix>_<tag>_<n>`."""

    def __init__(self, start: int, tag: str | None = None):
        self.tag = tag or secrets.token_hex(6)
        self.start = start
        self.sub = f"sub_{self.tag}"
        self._n = 0

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self.tag}_{self._n}"

    def invoice_id(self) -> str:
        return self._id("in")

    def subscription(self, kind: str, created: int, status: str, period_start: int, **fields) -> dict:
        """A `customer.subscription.<kind>` event; `fields` override the subscription's own."""
        evt = fixture("customer.subscription.deleted")
        evt.update(id=self._id("evt"), type=f"customer.subscription.{kind}", created=created)
        sub = evt["data"]["object"]
        sub.update(
            id=self.sub,
            status=status,
            canceled_at=None,
            ended_at=None,
            cancellation_details={"comment": None, "feedback": None, "reason": None},
        )
        item = sub["items"]["data"][0]
        item.update(
            subscription=self.sub, current_period_start=period_start, current_period_end=period_start + MONTH
        )
        sub.update(fields)
        return evt

    def invoice(self, event_type: str, invoice_id: str, period_start: int, created: int) -> dict:
        evt = _invoice(event_type, self.sub, invoice_id, period_start, created)
        evt["id"] = self._id("evt")
        return evt


def pre_basil(evt: dict) -> dict:
    """The same subscription event as an API version before 2025-03-31 sends it."""
    evt = copy.deepcopy(evt)
    evt["api_version"] = "2024-12-18.acacia"
    sub = evt["data"]["object"]
    for item in sub["items"]["data"]:
        sub["current_period_start"] = item.pop("current_period_start")
        sub["current_period_end"] = item.pop("current_period_end")
    return evt


def retag(events: list[dict], old: str, new: str) -> list[dict]:
    return [json.loads(json.dumps(evt).replace(old, new)) for evt in events]


def at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def access_at(db, subscription_id: str, moment: int) -> tuple:
    """(has_access, reason) the view's rule gives at `moment`."""
    return db.execute(
        "SELECT has_access, reason FROM subscription_access_at(%s) WHERE subscription_id = %s",
        [at(moment), subscription_id],
    ).fetchone()


_MIRROR = """
SELECT subscription_id, account, status, status_at, customer, cancel_at_period_end, cancel_at,
       canceled_at, trial_end, pause_behavior, pause_resumes_at, current_period_start,
       current_period_end, latest_invoice, paid_through, revoked_at, revoked_reason
FROM subscriptions WHERE subscription_id LIKE %s ORDER BY 1
"""
_INVOICES = """
SELECT invoice_id, subscription_id, status, status_at, amount_paid FROM invoices
WHERE invoice_id LIKE %(like)s ORDER BY 1
"""
_FULFILMENTS = """
SELECT invoice_id, subscription_id, period_start, period_end FROM invoice_fulfilments
WHERE invoice_id LIKE %(like)s ORDER BY 1
"""


def state(db, tag: str, moment: int) -> dict:
    """The mirror, invoices, fulfilments and access of a story's subscription, ids untagged."""
    like = f"%\\_{tag}%"
    access = db.execute(
        "SELECT subscription_id, has_access, reason, access_until FROM subscription_access_at(%s)"
        " WHERE subscription_id LIKE %s ORDER BY 1",
        [at(moment), like],
    ).fetchall()
    rows = {
        "mirror": [row[:1] + row[2:] for row in db.execute(_MIRROR, [like]).fetchall()],
        "invoices": db.execute(_INVOICES, {"like": like}).fetchall(),
        "fulfilments": db.execute(_FULFILMENTS, {"like": like}).fetchall(),
        "access": access,
    }
    return json.loads(json.dumps(rows, default=str).replace(tag, "TAG"))


def jobs(db, kind: str) -> list[dict]:
    """The outbox jobs of `kind`, oldest first, with their idempotency keys."""
    rows = db.execute(
        "SELECT headers->>'idempotency-key', convert_from(payload, 'UTF8') FROM pgqueuer"
        " WHERE headers->>'kind' = %s ORDER BY id",
        [kind],
    ).fetchall()
    return [{"key": key, **json.loads(payload)} for key, payload in rows]


def renewal(story: Story, paid_after: int = 90 * 60) -> list[tuple[str, dict]]:
    """A paid first month; the renewal's invoice, drafted at the period end, paid `paid_after` on."""
    b, first, second = story.start, story.invoice_id(), story.invoice_id()
    return [
        ("created", story.subscription("created", b, "incomplete", b, latest_invoice=first)),
        ("first_paid", story.invoice("invoice.paid", first, b, b + 2)),
        ("activated", story.subscription("updated", b + 3, "active", b, latest_invoice=first)),
        ("renewed", story.subscription("updated", b + MONTH, "active", b + MONTH, latest_invoice=second)),
        ("renewal_paid", story.invoice("invoice.paid", second, b + MONTH, b + MONTH + paid_after)),
    ]


# What Stripe does after the last failed retry: the Dashboard's setting.
AFTER_RETRIES = ("cancel", "unpaid", "past_due")
RETRIES_END = MONTH + 14 * DAY


def dunning(story: Story, after_retries: str) -> list[tuple[str, dict]]:
    """The renewal's payment fails; Smart Retries fail for two weeks; then `after_retries`."""
    b = story.start
    events = renewal(story)[:4]
    renewal_invoice = events[3][1]["data"]["object"]["latest_invoice"]
    failed_at = b + MONTH + HOUR
    events += [
        ("renewal_failed", story.invoice("invoice.payment_failed", renewal_invoice, b + MONTH, failed_at)),
        (
            "past_due",
            story.subscription(
                "updated", failed_at + 1, "past_due", b + MONTH, latest_invoice=renewal_invoice
            ),
        ),
    ]
    end = b + RETRIES_END
    if after_retries == "cancel":
        events.append(
            (
                "deleted",
                story.subscription(
                    "deleted",
                    end,
                    "canceled",
                    b + MONTH,
                    latest_invoice=renewal_invoice,
                    canceled_at=end,
                    ended_at=end,
                    cancellation_details={"comment": None, "feedback": None, "reason": "payment_failed"},
                ),
            )
        )
    elif after_retries == "unpaid":
        events.append(
            (
                "unpaid",
                story.subscription("updated", end, "unpaid", b + MONTH, latest_invoice=renewal_invoice),
            )
        )
    return events


def lifecycle(story: Story) -> list[tuple[str, dict]]:
    """Renewal fails, is paid on a retry, is scheduled to cancel, and ends with the period."""
    b = story.start
    events = dunning(story, "past_due")
    renewal_invoice = events[3][1]["data"]["object"]["latest_invoice"]
    retried = b + MONTH + 3 * DAY
    return events + [
        ("retry_paid", story.invoice("invoice.paid", renewal_invoice, b + MONTH, retried)),
        (
            "recovered",
            story.subscription("updated", retried + 1, "active", b + MONTH, latest_invoice=renewal_invoice),
        ),
        (
            "cancel_scheduled",
            story.subscription(
                "updated",
                b + MONTH + 10 * DAY,
                "active",
                b + MONTH,
                cancel_at_period_end=True,
                latest_invoice=renewal_invoice,
            ),
        ),
        (
            "deleted",
            story.subscription(
                "deleted",
                b + 2 * MONTH,
                "canceled",
                b + MONTH,
                canceled_at=b + 2 * MONTH,
                ended_at=b + 2 * MONTH,
                latest_invoice=renewal_invoice,
                cancellation_details={"comment": None, "feedback": None, "reason": "cancellation_requested"},
            ),
        ),
    ]
