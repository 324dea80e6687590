"""Events of one business object delivered in any order leave the same state.

Each ordering is delivered under its own Connect account, so one schema holds
all of them side by side and every comparison is between real deliveries.
"""
import itertools
import time

import pytest

from tests import stories
from tests.stories import CardPayment, business_state, deliver

NOW = int(time.time())

STORIES = {
    "card": lambda: stories.card_payment(
        CardPayment(failed_first=True, refunds=(1000, 3000), disputed=True), NOW
    ),
    "async_succeeds": lambda: stories.async_payment(True, NOW),
    "async_fails": lambda: stories.async_payment(False, NOW),
}


@pytest.mark.parametrize("story", STORIES)
def test_every_pair_of_events_of_one_object_ends_the_same_in_either_order(client, db, story):
    events = STORIES[story]()
    for n, ((first, a), (second, b)) in enumerate(itertools.combinations(events, 2)):
        in_order, reversed_ = f"acct_in_order_{n}", f"acct_reversed_{n}"
        deliver(client, [a, b], in_order)
        deliver(client, [b, a], reversed_)
        assert business_state(db, reversed_) == business_state(db, in_order), (
            f"{second} before {first}"
        )


def _named(events):
    return dict(events)


def test_refund_before_the_payment_events_is_kept_and_the_payment_still_fulfilled(client, db):
    story = _named(stories.card_payment(CardPayment(refunds=(3000,)), NOW))
    outcomes = deliver(
        client, [story["refund_3000"], story["checkout_paid"], story["intent_succeeded"]]
    )
    assert outcomes == ["refunded", "fulfilled", "already_fulfilled"]
    (payment,) = business_state(db)["payments"]
    assert payment[1] == "succeeded"
    assert payment[5:7] == (3000, True)  # amount_refunded, refunded
    assert len(business_state(db)["fulfilments"]) == 1


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


def test_dispute_before_the_payment_flags_it_and_the_flag_stays(client, db):
    story = _named(stories.card_payment(CardPayment(disputed=True), NOW))
    assert deliver(client, [story["dispute"], story["intent_succeeded"]]) == [
        "dispute_flagged",
        "fulfilled",
    ]
    (payment,) = business_state(db)["payments"]
    assert (payment[1], payment[8]) == ("succeeded", True)


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
