"""The `subscription_access` rule across Stripe's real lifecycle: renewals, dunning, pauses, trials.

The rule is asked at chosen moments through `subscription_access_at(ts)`
(the view is that function at now()), after delivering every event Stripe
would have sent by then, so "throughout" means at each probe in between.
"""

import time
from datetime import timedelta

import pytest

from tests.conftest import post_event
from tests.support.rows import count_rows
from tests.support.stories import DAY, deliver
from tests.support.subscription_stories import (
    AFTER_RETRIES,
    HOUR,
    MONTH,
    RETRIES_END,
    Story,
    access_at,
    dunning,
    jobs,
    pre_basil,
    renewal,
)
from webhooks.core import history
from webhooks.domains.stripe import access
from webhooks.domains.stripe.access import ACCESS_CHANGED
from webhooks.domains.stripe.subscriptions import TRIAL_ENDING_JOB

START = 1_780_000_000  # a fixed calendar: these tests never read the clock
MINUTE = 60


def _period(db, subscription_id: str) -> tuple:
    return db.execute(
        "SELECT current_period_start, current_period_end FROM subscriptions WHERE subscription_id = %s",
        [subscription_id],
    ).fetchone()


def walk(client, db, story: Story, events, probes) -> dict[int, tuple]:
    """Access at each probe (seconds after the story's start), events delivered as time passes."""
    pending = sorted((evt for _, evt in events), key=lambda e: e["created"])
    seen = {}
    for offset in sorted(probes):
        moment = story.start + offset
        due = [e for e in pending if e["created"] <= moment]
        pending = pending[len(due) :]
        deliver(client, due)
        seen[offset] = access_at(db, story.sub, moment)
    return seen


@pytest.mark.parametrize("feed", ["mirror", "invoices_only"])
def test_a_renewal_paid_90_minutes_after_the_period_end_keeps_access_throughout(client, db, feed):
    story = Story(START)
    events = renewal(story, paid_after=90 * MINUTE)
    if feed == "invoices_only":  # an endpoint subscribed to invoice events alone
        events = [(name, evt) for name, evt in events if evt["type"].startswith("invoice.")]
    probes = [
        10,
        MONTH - 1,
        MONTH,
        MONTH + 30 * MINUTE,
        MONTH + 60 * MINUTE,
        MONTH + 89 * MINUTE,
        MONTH + 91 * MINUTE,
        MONTH + DAY,
        2 * MONTH - 1,
    ]
    seen = walk(client, db, story, events, probes)
    assert all(has for has, _ in seen.values()), seen
    expected = "active" if feed == "mirror" else "paid_through"
    assert seen[MONTH + 89 * MINUTE] == (True, expected)


def test_without_a_paid_renewal_the_paid_through_rule_ends_after_the_margin(client, db):
    story = Story(START)
    events = renewal(story)[1:2]  # only the first invoice, paid; no renewal
    seen = walk(client, db, story, events, [MONTH + 2 * HOUR - 1, MONTH + 2 * HOUR])
    assert seen == {MONTH + 2 * HOUR - 1: (True, "paid_through"), MONTH + 2 * HOUR: (False, "period_ended")}


@pytest.mark.parametrize("after_retries", AFTER_RETRIES)
def test_failed_retries_end_access_within_grace_whatever_stripe_does_after_them(client, db, after_retries):
    story = Story(START)
    # WEBHOOK_SUBSCRIPTION_GRACE's default, from the unpaid period's start
    grace_end = MONTH + 3 * DAY
    probes = [MONTH + 2 * HOUR, MONTH + 2 * DAY, grace_end - 1, grace_end, RETRIES_END + DAY]
    seen = walk(client, db, story, dunning(story, after_retries), probes)
    assert seen[MONTH + 2 * HOUR] == (True, "past_due_grace")
    assert seen[grace_end - 1] == (True, "past_due_grace")
    assert seen[grace_end] == (False, "grace_expired")
    final = {"cancel": "canceled", "unpaid": "unpaid", "past_due": "grace_expired"}[after_retries]
    assert seen[RETRIES_END + DAY] == (False, final)


def test_marked_unpaid_after_retries_loses_access_without_a_deleted_event(client, db):
    """Done-when: the Dashboard's "mark unpaid" setting sends no customer.subscription.deleted."""
    now = int(time.time())
    story = Story(now - MONTH - DAY)  # renewed a day ago, retries ended an hour ago
    events = dunning(story, "unpaid")
    events[-1][1]["created"] = now - HOUR
    assert "customer.subscription.deleted" not in {evt["type"] for _, evt in events}
    outcomes = deliver(client, [evt for _, evt in events])
    assert outcomes[-1] == "subscription_updated"
    assert db.execute(
        "SELECT has_access, reason FROM subscription_access WHERE subscription_id = %s", [story.sub]
    ).fetchone() == (False, "unpaid")
    changes = [(j["change"], j["reason"], j["event_type"]) for j in jobs(db, ACCESS_CHANGED.name)]
    assert changes == [
        ("granted", "active", "customer.subscription.updated"),
        ("revoked", "unpaid", "customer.subscription.updated"),
    ]


@pytest.mark.parametrize("behavior", ["void", "keep_as_draft", "mark_uncollectible"])
def test_paused_collection_keeps_access_whatever_becomes_of_its_invoices(client, db, behavior):
    """Stripe, Pause payment collection (https://docs.stripe.com/billing/subscriptions/pause-payment):
    "When you pause payment collection, the subscription remains `active` and invoices continue
    to generate, but Stripe doesn't collect payment. Your customer retains access to the service
    during this time." Before, `void` revoked access, a rule of this project's own."""
    story = Story(START)
    events = renewal(story)[:3]
    pause = {"behavior": behavior, "resumes_at": START + 20 * DAY}
    events += [
        ("paused", story.subscription("updated", START + 10 * DAY, "active", START, pause_collection=pause)),
        ("resumed", story.subscription("updated", START + 20 * DAY, "active", START)),
    ]
    seen = walk(client, db, story, events, [5 * DAY, 15 * DAY, 25 * DAY])
    assert seen == {5 * DAY: (True, "active"), 15 * DAY: (True, "active"), 25 * DAY: (True, "active")}
    assert [j["change"] for j in jobs(db, ACCESS_CHANGED.name)] == ["granted"]  # never revoked


def test_a_send_invoice_subscription_keeps_access_for_the_grace_after_its_invoice_is_due(client, db):
    """The Subscription object's `status` (https://docs.stripe.com/api/subscriptions/object):
    "If subscription collection_method=send_invoice it becomes past_due when its invoice is
    not paid by the due date"; `days_until_due` is the "Number of days a customer has to pay
    invoices generated by this subscription". So the grace runs from the due date: before,
    it ran from the period's start and had ended when the subscription became past_due."""
    story = Story(START)
    b, first, renewal_invoice = START, story.invoice_id(), story.invoice_id()
    terms = dict(collection_method="send_invoice", days_until_due=30)
    due = MONTH + 30 * DAY  # after the story's start
    events = [
        ("first_paid", story.invoice("invoice.paid", first, b, b + 2)),
        ("activated", story.subscription("updated", b + 3, "active", b, latest_invoice=first, **terms)),
        (
            "renewed",
            story.subscription(
                "updated", b + MONTH, "active", b + MONTH, latest_invoice=renewal_invoice, **terms
            ),
        ),
        (
            "past_due",
            story.subscription(
                "updated", b + due + 60, "past_due", b + MONTH, latest_invoice=renewal_invoice, **terms
            ),
        ),
    ]
    grace_end = due + 3 * DAY  # WEBHOOK_SUBSCRIPTION_GRACE's default
    seen = walk(client, db, story, events, [MONTH + 29 * DAY, due - 1, due + 120, grace_end - 1, grace_end])
    assert seen == {
        MONTH + 29 * DAY: (True, "active"),
        due - 1: (True, "active"),
        due + 120: (True, "past_due_grace"),
        grace_end - 1: (True, "past_due_grace"),
        grace_end: (False, "grace_expired"),
    }


def test_a_trial_ending_without_a_payment_method_pauses_access_until_resumed(client, db):
    story = Story(START)
    trial_end = START + 14 * DAY
    trialing = {
        "trial_start": START,
        "trial_end": trial_end,
        "default_payment_method": None,
        "trial_settings": {"end_behavior": {"missing_payment_method": "pause"}},
    }
    events = [
        ("created", story.subscription("created", START, "trialing", START, **trialing)),
        (
            "trial_will_end",
            story.subscription("trial_will_end", trial_end - 3 * DAY, "trialing", START, **trialing),
        ),
        ("paused", story.subscription("paused", trial_end, "paused", trial_end, **trialing)),
        (
            "resumed",
            story.subscription("resumed", trial_end + 2 * DAY, "active", trial_end + 2 * DAY, **trialing),
        ),
    ]
    seen = walk(client, db, story, events, [DAY, 12 * DAY, 14 * DAY + 1, 15 * DAY, 17 * DAY])
    assert seen == {
        DAY: (True, "trialing"),
        12 * DAY: (True, "trialing"),
        14 * DAY + 1: (False, "paused"),
        15 * DAY: (False, "paused"),
        17 * DAY: (True, "active"),
    }
    deliver(client, [events[1][1]])  # Stripe resends the notice: replayed, no second job
    (job,) = jobs(db, TRIAL_ENDING_JOB.name)
    assert (job["subscription_id"], job["trial_end"]) == (story.sub, trial_end)
    assert job["key"] == f"{TRIAL_ENDING_JOB.name}:{story.sub}:{events[1][1]['id']}"


def test_an_upgrade_mid_period_takes_the_new_items_period_and_keeps_access(client, db):
    story = Story(START)
    events = renewal(story)[:3]
    upgrade_at = START + 10 * DAY
    upgraded = story.subscription("updated", upgrade_at, "active", upgrade_at)
    item = upgraded["data"]["object"]["items"]["data"][0]
    item.update(id="si_upgraded", price={**item["price"], "id": "price_pro", "unit_amount": 15000})
    proration = story.invoice("invoice.paid", story.invoice_id(), upgrade_at, upgrade_at + 5)
    stale = story.subscription("updated", START + 5 * DAY, "active", START)
    events += [("upgraded", upgraded), ("proration_paid", proration)]
    seen = walk(client, db, story, events, [DAY, 10 * DAY, 10 * DAY + 10, MONTH + DAY])
    assert all(has for has, _ in seen.values()), seen
    assert deliver(client, [stale]) == ["superseded"]
    period = _period(db, story.sub)
    assert [p.timestamp() for p in period] == [upgrade_at, upgrade_at + MONTH]
    assert [j["change"] for j in jobs(db, ACCESS_CHANGED.name)] == ["granted"]


def test_pre_basil_subscriptions_carry_their_period_on_the_subscription(client, db):
    story = Story(START)
    _, evt = renewal(story)[3]
    assert deliver(client, [pre_basil(evt)]) == ["subscription_updated"]
    period = _period(db, story.sub)
    assert [p.timestamp() for p in period] == [START + MONTH, START + 2 * MONTH]


def test_a_deletion_is_final_against_a_newer_update_delivered_after_it(client, db):
    story = Story(START)
    deleted = dunning(story, "cancel")[-1][1]
    later = story.subscription("updated", START + RETRIES_END + 60, "active", START)
    assert deliver(client, [deleted, later, deleted]) == ["revoked", "superseded", "revoked"]
    assert access_at(db, story.sub, START + RETRIES_END + 120) == (False, "canceled")


def test_the_grace_setting_reaches_the_view(make_app, db):
    client = make_app(WEBHOOK_SUBSCRIPTION_GRACE="1d").test_client()
    story = Story(START)
    seen = walk(client, db, story, dunning(story, "past_due"), [MONTH + DAY - 1, MONTH + DAY])
    assert seen == {
        MONTH + DAY - 1: (True, "past_due_grace"),
        MONTH + DAY: (False, "grace_expired"),
    }
    assert db.execute("SELECT grace FROM subscription_access_settings").fetchone()[0].days == 1


def test_a_status_stripe_does_not_document_is_refused_recorded_and_retried_not_guessed(client, db):
    """As an unknown refund or dispute status is (docs/contract.md): 500 unknown_value, nothing
    claimed, so Stripe retries, and the failure names the field for `events list` and /admin."""
    story = Story(START)
    evt = story.subscription("updated", START, "on_hold", START)
    for _ in range(2):
        response = post_event(client, evt)
        assert response.status_code == 500
        assert response.get_json() == {
            "error": "unknown_value",
            "detail": "data.object.status: not a subscription status the access rules here know",
        }
    assert count_rows(db, "subscriptions") == 0
    assert count_rows(db, "webhook_events") == 0
    assert db.execute("SELECT error_class, count(*) FROM webhook_failures GROUP BY 1").fetchall() == [
        ("UnknownValue", 2)
    ]
    [listed] = history.events(db, status="failed")
    assert (listed.event_id, listed.failures) == (evt["id"], 2)
    assert "data.object.status" in listed.last_error


def test_settings_not_written_when_the_database_is_down_do_not_stop_the_start():
    started = time.monotonic()
    nowhere = "postgresql://root@127.0.0.1:1/none"
    access.publish_settings(nowhere, timedelta(days=1), timedelta(hours=1))
    assert time.monotonic() - started < 5


# The Subscription object (https://docs.stripe.com/api/subscriptions/object):
# `cancel_at` is "a date in the future at which the subscription will
# automatically get canceled"; `cancel_at_period_end` says an `active`
# subscription "is scheduled to be canceled at the end of the current
# period"; `ended_at` is set only once it "has ended". Stripe's basil
# changelog (https://docs.stripe.com/changelog/basil/2025-07-30/cancel-at-enums)
# adds `cancel_at` values that resolve to an item's period end, and says
# `cancel_at_period_end` resolves to the earliest item period end. The
# subscription stays `active` until then and `customer.subscription.deleted`
# follows, which Stripe may retry for days: access ends at the date itself.
@pytest.mark.parametrize("schedule", ["cancel_at", "cancel_at_period_end"])
def test_access_ends_when_a_scheduled_cancellation_passes_without_any_event(client, db, schedule):
    story = Story(START)
    b = story.start
    ends = b + MONTH if schedule == "cancel_at_period_end" else b + 20 * DAY
    fields = {"cancel_at_period_end": True} if schedule == "cancel_at_period_end" else {"cancel_at": ends}
    scheduled = story.subscription("updated", b + DAY, "active", b, **fields)
    events = renewal(story)[:3] + [("scheduled", scheduled)]
    deliver(client, [evt for _, evt in events])
    assert access_at(db, story.sub, ends - 1) == (True, "active")
    assert access_at(db, story.sub, ends) == (False, "cancel_at")
    assert access_at(db, story.sub, ends + 4) == (False, "cancel_at")
    # Stripe's deletion, whenever it arrives, changes nothing the shop sees.
    deleted = story.subscription("deleted", ends + 2 * DAY, "canceled", b, canceled_at=ends, ended_at=ends)
    deliver(client, [deleted])
    assert access_at(db, story.sub, ends + 4) == (False, "canceled")


def test_a_cancellation_scheduled_then_withdrawn_keeps_access(client, db):
    story = Story(START)
    b = story.start
    events = renewal(story)[:3] + [
        ("scheduled", story.subscription("updated", b + DAY, "active", b, cancel_at=b + 20 * DAY)),
        ("withdrawn", story.subscription("updated", b + 2 * DAY, "active", b, cancel_at=None)),
    ]
    deliver(client, [evt for _, evt in events])
    assert access_at(db, story.sub, b + 20 * DAY + 4) == (True, "active")
