"""Which succeeded payments ship: payment-mode Checkout, the order marker, never an invoice,
and never a payment already fully refunded or disputed (held for review instead)."""

import itertools
import json
import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.conftest import post_event
from tests.support.payment_stories import PRE_BASIL, decisions, invoice_payment, jobs, subscription_payments
from tests.support.properties import scaled
from tests.support.rows import count_rows
from tests.support.stories import CardPayment, card_payment, deliver, fixture
from tests.support.storm import release_together
from webhooks.traffic import samples

NOW = int(time.time())


def _payloads(db, kind: str) -> list[dict]:
    rows = db.execute(
        "SELECT convert_from(payload, 'UTF8') FROM pgqueuer WHERE headers->>'kind' = %s", [kind]
    ).fetchall()
    return [json.loads(row[0]) for row in rows]


@pytest.mark.parametrize("first", ["session", "intent"])
def test_a_checkout_payment_ships_once_with_its_session_id_and_metadata(client, db, first):
    session, intent = fixture("checkout.session.completed"), fixture("payment_intent.succeeded")
    order = [session, intent] if first == "session" else [intent, session]
    outcomes = deliver(client, order)
    # The sample PaymentIntent has no order marker: alone it is not an order yet.
    assert outcomes == (
        ["fulfilled", "already_fulfilled"] if first == "session" else ["not_an_order", "fulfilled"]
    )
    s = session["data"]["object"]
    [job] = _payloads(db, "order.fulfilled")
    assert job["payment_id"] == s["payment_intent"]
    assert (job["session_id"], job["client_reference_id"], job["metadata"], job["customer"]) == (
        s["id"],
        s["client_reference_id"],
        s["metadata"],
        s["customer"],
    )
    assert (job["amount"], job["currency"]) == (s["amount_total"], s["currency"])
    assert jobs(db) == [("order.fulfilled", f"order.fulfilled:{s['payment_intent']}")]


def test_both_success_events_contribute_to_the_order_and_the_session_metadata_wins(client, db):
    checkout, intent, _ = samples.payment_events()
    intent["data"]["object"]["metadata"].update(sku="tea", gift="no")
    checkout["data"]["object"]["metadata"] = {"gift": "yes"}
    assert deliver(client, [checkout, intent]) == ["fulfilled", "already_fulfilled"]
    [job] = _payloads(db, "order.fulfilled")
    assert job["metadata"] == {"gift": "yes"}  # only the session was known when it shipped
    [row] = db.execute("SELECT session_metadata, intent_metadata FROM payments").fetchall()
    assert row == ({"gift": "yes"}, intent["data"]["object"]["metadata"])


def test_a_payment_intent_the_shop_did_not_create_is_recorded_but_not_shipped(client, db):
    intent = fixture("payment_intent.succeeded")  # Dashboard, Terminal, another app: no marker
    assert deliver(client, [intent]) == ["not_an_order"]
    assert db.execute("SELECT status FROM payments").fetchall() == [("succeeded",)]
    assert jobs(db) == [] and decisions(db) == {}


def test_the_order_marker_key_is_a_setting(make_app, db):
    client = make_app(WEBHOOK_ORDER_MARKER_KEY="shop_order").test_client()
    marked, unmarked = samples.payment_events()[1], samples.payment_events()[1]
    marked["data"]["object"]["metadata"] = {"shop_order": "A-17"}
    assert deliver(client, [marked, unmarked]) == ["fulfilled", "not_an_order"]  # order_id is not it


@pytest.mark.parametrize(
    "mode, outcome", [("subscription", "subscription_checkout"), ("setup", "setup_checkout")]
)
def test_a_checkout_session_that_takes_no_one_off_payment_is_not_an_order(client, db, mode, outcome):
    session = fixture("checkout.session.completed")
    session["data"]["object"].update(mode=mode, payment_intent=None)
    assert deliver(client, [session]) == [outcome]
    assert count_rows(db, "payments") == 0


def test_a_paid_session_of_no_known_mode_is_recorded_as_paid_not_awaiting_payment(client, db):
    session = fixture("checkout.session.completed")
    # A mode Stripe may add later (null is not what Stripe sends: refused,
    # tests/domains/stripe/test_declared_input.py).
    session["data"]["object"].update(mode="installments", payment_status="paid")
    assert deliver(client, [session]) == ["not_an_order"]
    assert db.execute("SELECT status FROM payments").fetchall() == [("succeeded",)]


def _no_order_shipped(db) -> None:
    assert count_rows(db, "fulfilments") == 0
    assert [kind for kind, _ in jobs(db) if kind in ("order.fulfilled", "payment.review")] == []


@pytest.mark.parametrize("shape", ["pre_basil", "basil"])
@pytest.mark.parametrize("order", ["stripe", "reversed"])
def test_subscription_payments_never_ship_as_orders(client, db, shape, order):
    story = subscription_payments(shape, NOW)
    events = [evt for _, evt in story]
    outcomes = deliver(client, events if order == "stripe" else events[::-1])
    _no_order_shipped(db)
    invoice_paid = count_rows(db, "invoice_fulfilments")
    assert invoice_paid == 4  # the billing side still grants each period
    if shape == "pre_basil":  # the PaymentIntent names its invoice: known in every order
        intents = [
            o
            for (name, _), o in zip(story if order == "stripe" else story[::-1], outcomes, strict=True)
            if name.startswith("intent")
        ]
        assert set(intents) == {"invoice_payment"}
    linked = count_rows(db, "payments", "invoice_id IS NOT NULL")
    assert linked == 4


@settings(
    max_examples=scaled(15),
    deadline=None,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(shape=st.sampled_from(["pre_basil", "basil"]), data=st.data())
def test_subscription_payments_never_ship_in_any_order(client, db, shape, data):
    events = [evt for _, evt in subscription_payments(shape, NOW)]
    for evt in data.draw(st.permutations(events)):
        assert post_event(client, evt).status_code == 200
    _no_order_shipped(db)


STOPS = {
    "charge_refunded": lambda story: story["refund_3000"],
    "refund_created": lambda story: _refund_created(story["charge_succeeded"]),
    "dispute_created": lambda story: story["dispute"],
}


def _refund_created(charge_event: dict) -> dict:
    """refund.created alone, before any event that states the payment's amount."""
    charge = charge_event["data"]["object"]
    refund = {
        "id": samples.stripe_id("re"),
        "object": "refund",
        "amount": charge["amount"],
        "charge": charge["id"],
        "currency": charge["currency"],
        "status": "succeeded",
        "payment_intent": charge["payment_intent"],
        "created": NOW,
    }
    return samples.event("refund.created", refund, NOW + 60)


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("trial", range(2))
def test_a_payment_refunded_or_disputed_before_its_success_is_held_once_never_shipped(app, db, stop, trial):
    story = dict(card_payment(CardPayment(refunds=(3000,), disputed=True), NOW))
    assert post_event(app.test_client(), STOPS[stop](story)).status_code == 200
    successes = [story["checkout_paid"], story["intent_succeeded"]] * 4  # both, duplicated
    clients = [app.test_client() for _ in successes]
    results = release_together(
        [lambda c=c, e=e: post_event(c, e) for c, e in zip(clients, successes, strict=True)]
    )
    assert {r.status for r in results} <= {200, 409}
    for evt in successes:  # Stripe retries the 409s
        assert post_event(app.test_client(), evt).get_json()["outcome"] == "held"
    payment_id = story["intent_succeeded"]["data"]["object"]["id"]
    assert decisions(db) == {payment_id: "held"}
    shipping = [key for kind, key in jobs(db) if kind in ("order.fulfilled", "payment.review")]
    assert shipping == [f"payment.review:{payment_id}"]
    [review] = _payloads(db, "payment.review")
    assert review["reason"] == ("disputed" if stop == "dispute_created" else "refunded")


def _post_purchase_invoice(shape: str) -> list[dict]:
    """A payment-mode Checkout Session with `invoice_creation`, its PaymentIntent (no order
    marker: the session alone makes it an order) and its post-purchase invoice's event(s).

    Stripe: "invoice_creation: Generate a post-purchase Invoice for one-time payments" and the
    session's `invoice`, "ID of the invoice created by the Checkout Session, if it exists"
    (The Checkout Session object, https://docs.stripe.com/api/checkout/sessions/object); the
    invoice is paid by the session's payment (Receipts and paid invoices,
    https://docs.stripe.com/receipts#paid-invoice-receipts).
    """
    session_evt, intent_evt = fixture("checkout.session.completed"), fixture("payment_intent.succeeded")
    intent_id, invoice_id = samples.stripe_id("pi"), samples.stripe_id("in", 24)
    for evt in (session_evt, intent_evt):
        evt["id"] = samples.stripe_id("evt")
    session = session_evt["data"]["object"]
    session.update(
        id=samples.stripe_id("cs_test", 58),
        payment_intent=intent_id,
        invoice=invoice_id,
        invoice_creation={**session["invoice_creation"], "enabled": True},
    )
    intent_evt["data"]["object"].update(id=intent_id, metadata={})
    paid = fixture("invoice.paid")
    paid["id"] = samples.stripe_id("evt")
    invoice = paid["data"]["object"]
    invoice.update(id=invoice_id, billing_reason="manual", parent=None)
    if shape == "pre_basil":
        paid["api_version"] = PRE_BASIL
        invoice.update(payment_intent=intent_id, subscription=None)
        return [session_evt, intent_evt, paid]
    link = invoice_payment(invoice_id, intent_id, 3000, NOW, paid_at=NOW)
    return [session_evt, intent_evt, paid, samples.event("invoice_payment.paid", link, NOW)]


@pytest.mark.parametrize("shape", ["pre_basil", "basil"])
def test_a_checkout_post_purchase_invoice_naming_the_sessions_payment_intent_leaves_it_an_order(
    client, db, shape
):
    for order in itertools.permutations(range(len(_post_purchase_invoice(shape)))):
        events = _post_purchase_invoice(shape)
        outcomes = deliver(client, [events[i] for i in order])
        intent_id = events[1]["data"]["object"]["id"]
        assert decisions(db).get(intent_id) == "fulfilled", (order, outcomes)
        assert [key for kind, key in jobs(db) if key.endswith(intent_id)] == [
            f"order.fulfilled:{intent_id}"
        ], order
