"""Events of one business object delivered in any order leave the same state.

Each pair of events is delivered in order to one service and reversed to a
twin on its own schema (event ids are unique, so one ledger cannot take the
same event as two independent runs), under an account of its own.

One thing does depend on the order, by design: a success that arrives after
the payment's full refund, dispute or early fraud warning is held for review
instead of shipped.
"""

import itertools
import time

import pytest

from tests.support import stories
from tests.support.payment_stories import CAPTURE_SHAPES, decisions, jobs, partial_capture, payment_state
from tests.support.stories import CardPayment, business_state, deliver
from tests.support.twins import twin  # noqa: F401  (fixture)

NOW = int(time.time())

STORIES = {
    "card": lambda: stories.card_payment(
        CardPayment(failed_first=True, refunds=(1000, 3000), disputed=True, fraud_warned=True), NOW
    ),
    "async_succeeds": lambda: stories.async_payment(True, NOW),
    "async_fails": lambda: stories.async_payment(False, NOW),
    # 30.00 of 100.00 captured; before basil the rest came back as a Refund (charge_released).
    **{
        f"partial_capture_{shape}": (lambda v=version: partial_capture(NOW, v, refunds=(1000, 2000)))
        for shape, version in CAPTURE_SHAPES.items()
    },
}
SUCCESSES = {"intent_succeeded", "checkout_paid", "async_succeeded"}
# The full refund (of what was captured), the dispute, the early fraud warning.
STOPS_SHIPPING = {"refund_3000", "dispute", "fraud_warning"}


@pytest.mark.parametrize("story", STORIES)
def test_every_pair_of_events_of_one_object_ends_the_same_in_either_order(client, db, twin, story):
    size = len(STORIES[story]())
    for i, j in itertools.combinations(range(size), 2):
        events = STORIES[story]()  # fresh ids for every pair
        (first, a), (second, b) = events[i], events[j]
        account = f"acct_pair_{i}_{j}"
        deliver(client, [a, b], account)
        deliver(twin.client, [b, a], account)
        assert payment_state(twin.db, account) == payment_state(db, account), f"{second} before {first}"
        in_order, reversed_ = decisions(db, account), decisions(twin.db, account)
        if first in SUCCESSES and second in STOPS_SHIPPING:
            assert set(in_order.values()) == {"fulfilled"} and set(reversed_.values()) == {"held"}
        else:
            assert reversed_ == in_order, f"{second} before {first}"


def _named(events):
    return dict(events)


def test_full_refund_before_the_success_events_holds_the_payment_instead_of_shipping_it(client, db):
    story = _named(stories.card_payment(CardPayment(refunds=(3000,)), NOW))
    outcomes = deliver(
        client,
        [story["refund_3000"], story["checkout_paid"], story["intent_succeeded"], story["checkout_paid"]],
    )
    assert outcomes == ["refunded", "held", "held", "held"]  # the last is a replay
    (payment,) = business_state(db)["payments"]
    assert payment[1] == "succeeded"
    assert payment[5:7] == (3000, True)  # amount_refunded, refunded
    payment_id = payment[0]
    assert decisions(db) == {payment_id: "held"}
    assert jobs(db) == [("payment.review", f"payment.review:{payment_id}")]


def test_an_older_partial_refund_does_not_undo_a_newer_full_one(client, db):
    story = _named(stories.card_payment(CardPayment(refunds=(1000, 3000)), NOW))
    outcomes = deliver(client, [story["refund_3000"], story["refund_1000"]])
    assert outcomes == ["refunded", "superseded"]
    (payment,) = business_state(db)["payments"]
    assert payment[5:7] == (3000, True)


def test_partial_refund_is_tracked_without_marking_the_order_refunded(client, db):
    story = _named(stories.card_payment(CardPayment(refunds=(1000,)), NOW))
    assert deliver(client, [story["intent_succeeded"], story["refund_1000"]]) == [
        "fulfilled",
        "partially_refunded",
    ]
    (payment,) = business_state(db)["payments"]
    assert payment[5:7] == (1000, False)


def test_an_older_failed_attempt_arriving_late_does_not_unfulfil_the_payment(client, db):
    story = _named(stories.card_payment(CardPayment(failed_first=True), NOW))
    outcomes = deliver(client, [story["intent_succeeded"], story["intent_failed"]])
    assert outcomes == ["fulfilled", "superseded"]
    assert business_state(db)["payments"][0][1] == "succeeded"


def test_a_failure_arriving_before_the_older_unpaid_checkout_is_not_overwritten(client, db):
    story = _named(stories.async_payment(False, NOW))
    outcomes = deliver(client, [story["async_failed"], story["checkout_unpaid"]])
    assert outcomes == ["payment_failed", "superseded"]
    state = business_state(db)
    assert state["payments"][0][1] == "failed"
    assert state["fulfilments"] == []


def test_unpaid_checkout_is_fulfilled_once_the_async_payment_succeeds(client, db):
    story = _named(stories.async_payment(True, NOW))
    assert deliver(client, [story["checkout_unpaid"], story["async_succeeded"]]) == [
        "awaiting_payment",
        "fulfilled",
    ]
    assert business_state(db)["payments"][0][1] == "succeeded"


def test_dispute_before_the_payment_holds_it_and_the_flag_stays(client, db):
    story = _named(stories.card_payment(CardPayment(disputed=True), NOW))
    assert deliver(client, [story["dispute"], story["intent_succeeded"]]) == ["dispute_open", "held"]
    (payment,) = business_state(db)["payments"]
    assert (payment[1], payment[8]) == ("succeeded", True)
    assert list(decisions(db).values()) == ["held"]
    assert [kind for kind, _ in jobs(db)] == ["dispute.opened", "payment.review"]


def test_a_refund_after_shipping_is_reported_not_held(client, db):
    story = _named(stories.card_payment(CardPayment(refunds=(3000,)), NOW))
    assert deliver(client, [story["intent_succeeded"], story["refund_3000"], story["checkout_paid"]]) == [
        "fulfilled",
        "refunded",
        "already_fulfilled",
    ]
    assert list(decisions(db).values()) == ["fulfilled"]
    assert [kind for kind, _ in jobs(db)] == ["order.fulfilled"]


def test_revocation_is_final_even_against_invoices_paid_later(client, db):
    story = _named(stories.subscription(NOW))
    outcomes = deliver(client, [story["deleted"], story["first_paid"], story["final_paid"]])
    assert outcomes == ["revoked", "fulfilled", "fulfilled"]
    state = business_state(db)
    (subscription,) = state["subscriptions"]
    assert subscription[2] is not None and subscription[3] == "payment_failed"
    assert len(state["invoice_fulfilments"]) == 2


def test_a_late_failed_attempt_does_not_unpay_a_retried_invoice(client, db):
    story = _named(stories.subscription(NOW))
    outcomes = deliver(client, [story["renewal_paid"], story["renewal_failed"], story["renewal_paid"]])
    assert outcomes == ["fulfilled", "superseded", "fulfilled"]  # the last is a replay
    (invoice,) = business_state(db)["invoices"]
    assert invoice[2] == "paid"
    assert len(business_state(db)["invoice_fulfilments"]) == 1


def test_paid_through_only_grows_whatever_the_invoice_order(client, db):
    story = _named(stories.subscription(NOW))
    deliver(client, [story["renewal_paid"], story["first_paid"]])
    renewal_end = story["renewal_paid"]["data"]["object"]["lines"]["data"][0]["period"]["end"]
    (subscription,) = business_state(db)["subscriptions"]
    assert subscription[1].timestamp() == renewal_end
