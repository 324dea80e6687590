"""Every event type the service handles, with the exact sample bodies (re-signed).

tests/stripe_events/README.md says how their ids relate: one card payment (A)
that is later refunded, two SEPA payments (B paid, C failed), a declined
card (D), a disputed payment (E), a subscription whose renewal fails and
which is then deleted, a Connect account update and a thin event.
"""

import pytest

from tests.conftest import post_event
from tests.support.stories import business_state, fixture, fixture_bytes

OUTCOMES = {
    "checkout.session.completed": "fulfilled",
    # Payment A's PaymentIntent: no order marker, and on its own no session names it.
    "payment_intent.succeeded": "not_an_order",
    "charge.succeeded": "ignored",
    "charge.refunded": "refunded",
    "checkout.session.async_payment_succeeded": "fulfilled",
    "checkout.session.async_payment_failed": "payment_failed",
    "payment_intent.payment_failed": "payment_failed",
    "charge.dispute.created": "dispute_open",
    "invoice.paid": "fulfilled",
    "invoice.payment_failed": "payment_failed",
    "customer.subscription.deleted": "revoked",
    "account.updated": "ignored",
    "v1.billing.meter.error_report_triggered": "notified",
}


def _created(event_type: str):
    created = fixture(event_type)["created"]
    return created if isinstance(created, int) else 0  # the thin event's ISO time sorts first


TIMELINE = sorted(OUTCOMES, key=_created)


def _obj(event_type: str) -> dict:
    return fixture(event_type)["data"]["object"]


@pytest.mark.parametrize("event_type", OUTCOMES)
def test_each_sample_event_on_its_own_has_its_documented_outcome(client, db, event_type):
    response = post_event(client, fixture_bytes(event_type))
    assert response.status_code == 200
    assert response.get_json() == {"event_id": fixture(event_type)["id"], "outcome": OUTCOMES[event_type]}


@pytest.mark.parametrize("order", ["timeline", "reversed"])
def test_all_samples_leave_the_same_payment_state_in_either_order_and_hold_the_refunded_one(
    client, db, order
):
    for event_type in TIMELINE if order == "timeline" else reversed(TIMELINE):
        assert post_event(client, fixture_bytes(event_type)).status_code == 200
    state = business_state(db)
    payments = {row[0]: row for row in state["payments"]}

    card = _obj("charge.refunded")  # payment A: paid, then fully refunded
    a = payments[card["payment_intent"]]
    assert (a[1], a[3], a[5], a[6]) == ("succeeded", card["amount"], card["amount_refunded"], True)
    sepa_paid, sepa_failed = (
        _obj("checkout.session.async_payment_succeeded"),
        _obj("checkout.session.async_payment_failed"),
    )
    assert payments[sepa_paid["payment_intent"]][1] == "succeeded"
    assert payments[sepa_failed["payment_intent"]][1] == "failed"
    assert payments[_obj("payment_intent.payment_failed")["id"]][1] == "failed"
    disputed = payments[_obj("charge.dispute.created")["payment_intent"]]
    assert (disputed[1], disputed[8]) == (None, True)  # no payment event of E in the samples

    # Reversed, A's refund arrives before its success: held for review, not shipped.
    shipped = [sepa_paid["payment_intent"]] + ([card["payment_intent"]] if order == "timeline" else [])
    assert sorted(row[0] for row in state["fulfilments"]) == sorted(shipped)
    held = db.execute("SELECT payment_id FROM payments WHERE held_at IS NOT NULL").fetchall()
    assert held == ([] if order == "timeline" else [(card["payment_intent"],)])

    paid, failed = _obj("invoice.paid"), _obj("invoice.payment_failed")
    assert [row[0] for row in state["invoice_fulfilments"]] == [paid["id"]]
    assert {row[0]: row[2] for row in state["invoices"]} == {
        paid["id"]: "paid",
        failed["id"]: "payment_failed",
    }
    (subscription,) = state["subscriptions"]
    assert subscription[0] == _obj("customer.subscription.deleted")["id"]
    assert subscription[1].timestamp() == paid["lines"]["data"][0]["period"]["end"]
    assert subscription[3] == "payment_failed"


def test_the_connected_accounts_event_is_recorded_under_its_account(client, db):
    post_event(client, fixture_bytes("account.updated"))
    account = db.execute("SELECT account FROM webhook_events").fetchone()[0]
    assert account == fixture("account.updated")["account"]
