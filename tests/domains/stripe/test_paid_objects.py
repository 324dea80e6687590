"""The object decides money, not the event's type: nothing ships and no access is granted
unless the object the event carries says it is paid.

Stripe's "Fulfill orders" page (https://docs.stripe.com/checkout/fulfillment):
fulfil a Checkout Session only when its `payment_status` is not `unpaid`
(`paid`, or `no_payment_required` for a free order); The Checkout Session
object (https://docs.stripe.com/api/checkout/sessions/object) lists those
three values. The Invoice object (https://docs.stripe.com/api/invoices/object)
says an invoice is paid when its `status` is `paid`; The PaymentIntent object
(https://docs.stripe.com/api/payment_intents/object), when its `status` is
`succeeded`. An event whose object says otherwise is answered 200 `not_paid`,
recorded, and moves nothing; a redelivery gets that stored answer.
"""

import copy
import json

import pytest

from tests.conftest import post_event
from tests.support.payment_stories import dispute_lifecycle
from tests.support.rows import count_rows
from tests.support.stories import deliver, fixture
from tests.support.subscription_stories import MONTH, Story, access_at
from webhooks.traffic import samples


def _state(db) -> dict:
    return {
        "fulfilments": count_rows(db, "fulfilments"),
        "invoice_fulfilments": count_rows(db, "invoice_fulfilments"),
        "jobs": db.execute("SELECT headers->>'kind' FROM pgqueuer ORDER BY id").fetchall(),
    }


NOTHING_MOVED = {"fulfilments": 0, "invoice_fulfilments": 0, "jobs": []}


def _answered_twice(client, evt: dict) -> dict:
    """The answer to `evt`, checked to be replayed byte for byte on its redelivery."""
    first = post_event(client, evt)
    again = post_event(client, evt)
    assert first.status_code == 200, first.get_json()
    assert (again.status_code, again.data) == (200, first.data)
    assert again.headers.get("Idempotent-Replayed") == "true"
    return first.get_json()


def _session(event_type: str, **fields) -> dict:
    evt = fixture("checkout.session.completed")
    evt.update(id=samples.stripe_id("evt"), type=event_type)
    evt["data"]["object"].update(payment_intent=samples.stripe_id("pi"), **fields)
    return evt


@pytest.mark.parametrize("payment_status", ["unpaid", "processing"])
def test_an_async_payment_succeeded_whose_session_is_not_paid_ships_nothing(client, db, payment_status):
    evt = _session("checkout.session.async_payment_succeeded", payment_status=payment_status)
    assert _answered_twice(client, evt)["outcome"] == "not_paid"
    assert _state(db) == NOTHING_MOVED


@pytest.mark.parametrize("payment_status", ["processing"])
def test_a_completed_session_whose_payment_status_is_neither_paid_nor_free_ships_nothing(
    client, db, payment_status
):
    evt = _session("checkout.session.completed", payment_status=payment_status)
    assert _answered_twice(client, evt)["outcome"] == "awaiting_payment"
    assert _state(db) == NOTHING_MOVED


@pytest.mark.parametrize(
    ("event_type", "payment_status", "outcome"),
    [
        ("checkout.session.completed", "paid", "fulfilled"),
        ("checkout.session.completed", "no_payment_required", "fulfilled"),
        ("checkout.session.async_payment_succeeded", "paid", "fulfilled"),
    ],
)
def test_a_paid_or_free_session_ships(client, db, event_type, payment_status, outcome):
    amount = 0 if payment_status == "no_payment_required" else 3000
    evt = _session(event_type, payment_status=payment_status, amount_total=amount)
    assert _answered_twice(client, evt)["outcome"] == outcome
    assert _state(db)["jobs"] == [("order.fulfilled",)]


@pytest.mark.parametrize("status", ["processing", "requires_capture", "requires_payment_method"])
def test_a_payment_intent_succeeded_whose_intent_has_not_succeeded_ships_nothing(client, db, status):
    _, intent, _ = samples.payment_events()
    intent["data"]["object"].update(status=status, metadata={"order_id": "ord_1"})
    assert _answered_twice(client, intent)["outcome"] == "not_paid"
    assert _state(db) == NOTHING_MOVED


def test_a_marked_payment_intent_that_succeeded_ships(client, db):
    _, intent, _ = samples.payment_events()
    intent["data"]["object"]["metadata"] = {"order_id": "ord_1"}
    assert _answered_twice(client, intent)["outcome"] == "fulfilled"


@pytest.mark.parametrize("status", ["draft", "open", "void", "uncollectible", None])
def test_invoice_paid_on_an_invoice_that_is_not_paid_grants_no_access(client, db, status):
    story = Story(1_780_000_000)
    evt = story.invoice("invoice.paid", story.invoice_id(), story.start, story.start + 2)
    evt["data"]["object"].update(status=status, amount_paid=0)
    assert _answered_twice(client, evt)["outcome"] == "not_paid"
    assert _state(db) == NOTHING_MOVED
    assert access_at(db, story.sub, story.start + MONTH // 2) in (None, (False, "period_ended"))
    assert count_rows(db, "invoices") == 0


def test_invoice_paid_on_a_paid_invoice_grants_access_for_its_period(client, db):
    story = Story(1_780_000_000)
    evt = story.invoice("invoice.paid", story.invoice_id(), story.start, story.start + 2)
    assert _answered_twice(client, evt)["outcome"] == "fulfilled"
    assert access_at(db, story.sub, story.start + MONTH // 2) == (True, "paid_through")


def _order_jobs(db) -> list[dict]:
    rows = db.execute("SELECT convert_from(payload, 'UTF8') FROM pgqueuer").fetchall()
    return [json.loads(payload) for (payload,) in rows]


def _null_status(which: str) -> dict:
    checkout, intent, _ = samples.payment_events()
    if which == "checkout.session.completed":
        checkout["data"]["object"]["payment_status"] = None
        return checkout
    if which == "checkout.session.async_payment_succeeded":
        return _session(which, payment_status=None)
    intent["data"]["object"].update(status=None, metadata={"order_id": "ord_1"})
    return intent


@pytest.mark.parametrize(
    "event_type",
    ["checkout.session.completed", "checkout.session.async_payment_succeeded", "payment_intent.succeeded"],
)
def test_an_object_whose_status_is_null_is_refused_for_good_and_ships_nothing(client, db, event_type):
    """Stripe never sends a null `payment_status` or PaymentIntent `status` (the objects' pages list
    their values): the declared input refuses it with a stored 422 (docs/events.md, "Declared input")."""
    evt = _null_status(event_type)
    first, again = post_event(client, evt), post_event(client, evt)
    assert first.status_code == 422, first.get_json()
    assert first.get_json()["error"] == "invalid_fields"
    assert (again.status_code, again.data) == (422, first.data)
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert _state(db) == NOTHING_MOVED


def test_a_paid_session_without_an_amount_fails_the_delivery_instead_of_enqueuing_a_job(client, db):
    """The job would break its model (orders.OrderFulfilledJob, docs/schemas/order.fulfilled.json): the
    transaction fails, 500, recorded for an operator, and Stripe retries; no fulfilment, no job. (The
    Checkout Session object documents `amount_total` and `currency` as nullable, so the declared input
    lets them through.)"""
    evt, _, _ = samples.payment_events()
    evt["data"]["object"].update(amount_total=None, currency=None)
    response = post_event(client, evt)
    assert response.status_code == 500, response.get_json()
    assert _state(db) == NOTHING_MOVED
    assert count_rows(db, "webhook_events") == 0
    failures = db.execute("SELECT error_class, error_message FROM webhook_failures").fetchall()
    broken = "order.fulfilled job: field amount breaks its model: Input should be a valid integer"
    assert failures == [("InvalidJob", broken)]


def _funds(db) -> tuple:
    return db.execute("SELECT funds_withdrawn, funds_reinstated FROM disputes").fetchone()


def test_a_disputes_funds_are_what_its_balance_transactions_say_not_its_events_type(client, db):
    """The Dispute object (https://docs.stripe.com/api/disputes/object): `balance_transactions` are
    "zero, one, or two balance transactions that show funds withdrawn and reinstated"."""
    story = dict(dispute_lifecycle(1_780_000_000))
    created, withdrawn = story["dispute_created"], story["funds_withdrawn"]
    empty = copy.deepcopy(withdrawn)
    empty["id"] = samples.stripe_id("evt")
    empty["data"]["object"]["balance_transactions"] = []
    assert deliver(client, [story["intent_succeeded"], created, empty]) == [
        "fulfilled",
        "dispute_open",
        "superseded",
    ]
    assert _funds(db) == (False, False)
    # An update that lists the withdrawal records it, whatever its type.
    listed = copy.deepcopy(withdrawn)
    listed.update(id=samples.stripe_id("evt"), type="charge.dispute.updated")
    assert deliver(client, [listed]) == ["dispute_open"]
    assert _funds(db) == (True, False)


def test_a_free_session_without_a_currency_ships_with_a_null_currency(client, db):
    """A session with nothing to pay can carry `currency: null` (Stripe's Checkout Session
    object: `currency` is nullable, https://docs.stripe.com/api/checkout/sessions/object)."""
    evt = _session(
        "checkout.session.completed",
        payment_status="no_payment_required",
        amount_total=0,
        amount_subtotal=0,
        currency=None,
    )
    evt["data"]["object"]["payment_intent"] = None  # nothing to pay, no PaymentIntent
    assert _answered_twice(client, evt)["outcome"] == "fulfilled"
    [payload] = db.execute("SELECT convert_from(payload, 'UTF8')::jsonb FROM pgqueuer").fetchone()
    assert (payload["kind"], payload["amount"], payload["currency"]) == ("order.fulfilled", 0, None)
