"""Every handled Stripe type at every API version a live account is pinned to, objects whole as then.

Objects are built from the sample payloads in tests/stripe_events/ (rendered in
2026-06-24.dahlia, the same as /work/shared/stripe-events/) and moved back to
each version's shape by the changelog entry that moved them (`shaped`). Each
version delivers one story through the in-process app and checks what every
event answered and which jobs it wrote; docs/events.md's table says the same
in words.
"""

from __future__ import annotations

import copy
import time

import pytest

from tests.conftest import post_event
from tests.support.payment_stories import refund
from tests.support.stories import DAY, fixture, fraud_warning
from tests.support.subscription_stories import MONTH, Story
from webhooks import bootstrap
from webhooks.infra.config import Settings
from webhooks.providers import stripe
from webhooks.traffic import samples

BASIL = "2025-03-31"
# https://docs.stripe.com/changelog/2022-11-15/deprecates-charges-auto-expand:
# from 2022-11-15 a Charge no longer carries its `refunds` list (nor a
# PaymentIntent its `charges`: https://docs.stripe.com/changelog/2022-11-15/removes-charges-attribute-paymentintent).
UNLISTED = "2022-11-15"
# https://docs.stripe.com/changelog/acacia/2024-10-28/refund-webhook-update:
# refund.* events for every refund, a charge's included.
REFUND_EVENTS = "2024-10-28"
# https://docs.stripe.com/changelog/basil/2025-05-28/partial-payments: invoice_payment.paid exists.
INVOICE_PAYMENTS = "2025-05-28"
VERSIONS = [
    "2020-08-27",
    "2022-08-01",
    "2022-11-15",
    "2023-10-16",
    "2024-06-20",
    "2024-10-28.acacia",
    "2025-03-31.basil",
    "2026-06-24.dahlia",
    "2026-10-28.endive",
]


def shaped(evt: dict, version: str, refunds: list[dict] | None = None) -> dict:
    """`evt` (a dahlia sample's shape) as an endpoint pinned to `version` receives it."""
    evt = copy.deepcopy(evt)
    evt["api_version"] = version
    obj = evt["data"]["object"]
    kind = obj.get("object")
    if version[:10] < BASIL:
        # https://docs.stripe.com/changelog/basil/2025-03-31/adds-new-parent-field-to-invoicing-objects
        # and .../add-support-for-multiple-partial-payments-on-invoices: the invoice's own
        # `subscription` and `payment_intent`, a PaymentIntent's and a Charge's `invoice`.
        if kind == "invoice":
            parent = obj.pop("parent", None) or {}
            obj["subscription"] = (parent.get("subscription_details") or {}).get("subscription")
            obj.setdefault("payment_intent", None)
            obj.setdefault("paid", obj.get("status") == "paid")
        if kind in ("payment_intent", "charge"):
            obj.setdefault("invoice", None)
        # https://docs.stripe.com/changelog/basil/2025-03-31/deprecate-subscription-current-period-start-and-end:
        # the period on the subscription, not its items.
        if kind == "subscription":
            for item in obj["items"]["data"]:
                obj["current_period_start"] = item.pop("current_period_start")
                obj["current_period_end"] = item.pop("current_period_end")
    if version[:10] < UNLISTED:
        if kind == "charge":
            obj["refunds"] = {"object": "list", "data": refunds or [], "has_more": False}
        if kind == "payment_intent":
            obj["charges"] = {"object": "list", "data": [], "has_more": False}
    return evt


def _dispute(charge: dict, status: str, created: int, dispute_id: str, funds: list[int]) -> dict:
    dispute = fixture("charge.dispute.created")["data"]["object"]
    dispute.update(
        id=dispute_id,
        amount=charge["amount"],
        charge=charge["id"],
        payment_intent=charge["payment_intent"],
        currency=charge["currency"],
        created=created,
        status=status,
        balance_transactions=[
            {"id": samples.stripe_id("txn"), "object": "balance_transaction", "amount": amount}
            for amount in funds
        ],
    )
    return dispute


def _payment_story(version: str, at: int) -> list[tuple[dict, str, list[str]]]:
    """A card payment: shipped, refunded in part (the refund then fails), disputed and won, warned of."""
    checkout, intent, charge = samples.payment_events(3000, created=at)
    ch = charge["data"]["object"]
    r1, dispute_id, warning_id = samples.stripe_id("re"), samples.stripe_id("du"), samples.stripe_id("issfr")
    succeeded = refund(ch, r1, 1000, "succeeded", at + 10)
    failed = refund(ch, r1, 1000, "failed", at + 20)
    refunded = shaped(
        samples.event("charge.refunded", {**ch, "amount_refunded": 1000}, at + 10), version, [succeeded]
    )
    listed, named = version[:10] < UNLISTED, version[:10] >= REFUND_EVENTS
    # How the shop hears of the refund: from the charge's list before 2022-11-15;
    # then (until acacia) by fetching the charge's refunds in the worker; from
    # acacia on, from refund.created.
    charge_jobs = ["payment.refunded"] if listed else ([] if named else ["stripe.fetch"])

    def dispute(kind: str, status: str, when: int, funds: list[int]) -> dict:
        return shaped(samples.event(kind, _dispute(ch, status, at + 30, dispute_id, funds), when), version)

    return [
        (shaped(checkout, version), "fulfilled", ["order.fulfilled"]),
        (shaped(intent, version), "already_fulfilled", []),
        (refunded, "partially_refunded", charge_jobs),
        (
            shaped(samples.event("refund.created", succeeded, at + 10), version),
            "superseded" if listed else "partially_refunded",
            [] if listed else ["payment.refunded"],
        ),
        (shaped(samples.event("refund.updated", succeeded, at + 11), version), "superseded", []),
        (
            shaped(samples.event("charge.refund.updated", failed, at + 20), version),
            "refund_failed",
            ["refund.failed"],
        ),
        (shaped(samples.event("refund.failed", failed, at + 21), version), "superseded", []),
        (
            dispute("charge.dispute.created", "needs_response", at + 30, []),
            "dispute_open",
            ["dispute.opened"],
        ),
        (dispute("charge.dispute.funds_withdrawn", "needs_response", at + 31, [-3000]), "dispute_open", []),
        (dispute("charge.dispute.updated", "under_review", at + 32, [-3000]), "dispute_open", []),
        (dispute("charge.dispute.closed", "won", at + 40, [-3000]), "dispute_won", ["dispute.closed"]),
        (dispute("charge.dispute.funds_reinstated", "won", at + 41, [-3000, 3000]), "dispute_won", []),
        (
            shaped(fraud_warning(ch, at + 50, id=warning_id), version),
            "fraud_warning_reported",
            ["payment.fraud_warning"],
        ),
        (
            shaped(
                fraud_warning(
                    ch, at + 51, "radar.early_fraud_warning.updated", id=warning_id, actionable=False
                ),
                version,
            ),
            "fraud_warning_updated",
            [],
        ),
    ]


def _checkout_story(version: str, at: int) -> list[tuple[dict, str, list[str]]]:
    """A delayed payment that succeeds, one that fails, and a PaymentIntent that fails."""
    paid_later = fixture("checkout.session.async_payment_succeeded")
    paid_later.update(id=samples.stripe_id("evt"), created=at)
    paid_later["data"]["object"].update(
        id=samples.stripe_id("cs_test", 58), payment_intent=samples.stripe_id("pi")
    )
    failed = fixture("checkout.session.async_payment_failed")
    failed.update(id=samples.stripe_id("evt"), created=at)
    failed["data"]["object"].update(
        id=samples.stripe_id("cs_test", 58), payment_intent=samples.stripe_id("pi")
    )
    intent_failed = fixture("payment_intent.payment_failed")
    intent_failed.update(id=samples.stripe_id("evt"), created=at)
    intent_failed["data"]["object"]["id"] = samples.stripe_id("pi")
    return [
        (shaped(paid_later, version), "fulfilled", ["order.fulfilled"]),
        (shaped(failed, version), "payment_failed", []),
        (shaped(intent_failed, version), "payment_failed", []),
    ]


def _subscription_story(version: str, start: int) -> list[tuple[dict, str, list[str]]]:
    """A subscription paid, renewing into a failed payment, paused, resumed, ending its trial, deleted."""
    story = Story(start)
    first, renewal = story.invoice_id(), story.invoice_id()
    paid = story.invoice("invoice.paid", first, start, start + 2)
    failed = story.invoice("invoice.payment_failed", renewal, start + MONTH, start + MONTH + 2)
    failed["data"]["object"].update(status="open", amount_paid=0)

    def sub(kind: str, when: int, status: str, **fields) -> dict:
        return shaped(story.subscription(kind, when, status, start, **fields), version)

    events = [
        (sub("created", start, "active"), "subscription_updated", ["subscription.access_changed"]),
        (shaped(paid, version), "fulfilled", []),
    ]
    if version[:10] >= INVOICE_PAYMENTS:
        events.append(
            (
                shaped(
                    samples.event("invoice_payment.paid", _invoice_payment(first, start + 2), start + 3),
                    version,
                ),
                "invoice_payment",
                [],
            )
        )
    return [
        *events,
        (shaped(failed, version), "payment_failed", []),
        (sub("updated", start + 3, "past_due"), "subscription_updated", []),
        # A paused subscription grants no access (https://docs.stripe.com/billing/subscriptions/pause-payment).
        (sub("paused", start + 4, "paused"), "subscription_updated", ["subscription.access_changed"]),
        (sub("resumed", start + 5, "active"), "subscription_updated", ["subscription.access_changed"]),
        (
            sub("trial_will_end", start + 6, "trialing", trial_end=start + 3 * DAY),
            "trial_ending",
            ["subscription.trial_ending"],
        ),
        (
            sub("deleted", start + 7, "canceled", ended_at=start + 7),
            "revoked",
            ["subscription.access_changed"],
        ),
    ]


def _invoice_payment(invoice_id: str, created: int) -> dict:
    return {
        "id": samples.stripe_id("inpay"),
        "object": "invoice_payment",
        "amount_paid": 1500,
        "amount_requested": 1500,
        "created": created,
        "currency": "usd",
        "invoice": invoice_id,
        "is_default": True,
        "livemode": False,
        "payment": {"type": "payment_intent", "payment_intent": samples.stripe_id("pi")},
        "status": "paid",
        "status_transitions": {"canceled_at": None, "paid_at": created},
    }


def _jobs_after(db, last: int) -> tuple[int, list[str]]:
    rows = db.execute(
        "SELECT id, headers->>'kind' FROM pgqueuer WHERE id > %s ORDER BY id", [last]
    ).fetchall()
    return (rows[-1][0] if rows else last), [kind for _, kind in rows]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_handled_type_at_this_version_answers_and_writes_what_it_should(client, db, version):
    now = int(time.time())
    story = [
        *_payment_story(version, now - 5 * DAY),
        *_checkout_story(version, now - 4 * DAY),
        *_subscription_story(version, now - 3 * DAY),
    ]
    got, expected, last = {}, {}, 0
    for n, (evt, outcome, kinds) in enumerate(story):
        response = post_event(client, evt)
        last, written = _jobs_after(db, last)
        key = f"{n:02} {evt['type']}"
        got[key] = (response.status_code, response.get_json().get("outcome"), written)
        expected[key] = (200, outcome, kinds)
    wrong = [f"{key}: {got[key]}, expected {expected[key]}" for key in got if got[key] != expected[key]]
    assert not wrong, "\n".join(wrong)


def test_the_matrix_delivers_every_type_a_stripe_handler_takes():
    """A new handler joins the matrix: its type must be in a story above."""
    at = int(time.time())
    story = [
        *_payment_story(VERSIONS[-1], at),
        *_checkout_story(VERSIONS[-1], at),
        *_subscription_story(VERSIONS[-1], at),
    ]
    registry = bootstrap.handlers(Settings.from_env({}))
    handled = {t for t in stripe.EVENT_TYPES if registry.handler_name(stripe.NAME, t) is not None}
    assert {evt["type"] for evt, _, _ in story} == handled
