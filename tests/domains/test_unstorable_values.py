"""One value in a signed payload never stops a paid order (issue 24).

JSON can carry what PostgreSQL cannot store: `\\u0000` (no NUL in text or
jsonb), a lone surrogate such as `\\ud800` (not encodable as UTF-8), and
Python's json reads `NaN` and `Infinity` too. A paid Checkout session whose
metadata held one failed its `::jsonb` cast on every retry, so the order
never shipped. The ledger stores the payload as signed; what the rules copy
out of it (metadata, client_reference_id, an order's name) is made storable.
"""

import json
import time

import pytest

from tests.conftest import post_event
from tests.domains.stripe.test_orders import _payloads
from tests.support.rows import LEDGER_WITH_PAYLOADS, count_rows
from tests.support.shopify import job_payloads as shopify_jobs
from tests.support.shopify import order, post, shopify, shopify_app  # noqa: F401  (fixtures)
from tests.support.stories import async_payment
from webhooks.traffic import samples

NOW = int(time.time())
UNSTORABLE = {
    "nul": ("gift\u0000wrap", "gift\ufffdwrap"),
    "lone_surrogate": ("caf\ud800", "caf\ufffd"),
    "nan": (float("nan"), "NaN"),
    "infinity": (float("inf"), "Infinity"),
}


def _stored_as_signed(db, evt: dict) -> None:
    (payload,) = db.execute(
        f"SELECT payload FROM {LEDGER_WITH_PAYLOADS} WHERE event_id = %s", [evt["id"]]
    ).fetchone()
    assert payload == samples.encode(evt).decode()


@pytest.mark.parametrize("value", UNSTORABLE)
def test_a_paid_session_whose_metadata_postgres_cannot_store_still_ships_once(client, db, value):
    sent, kept = UNSTORABLE[value]
    checkout, intent, _ = samples.payment_events()
    session = checkout["data"]["object"]
    session["metadata"] = {"note": sent, "sku": "tea"}
    if isinstance(sent, str):
        session["client_reference_id"] = sent
    response = post_event(client, checkout)
    assert response.status_code == 200 and response.get_json()["outcome"] == "fulfilled"
    assert post_event(client, intent).get_json()["outcome"] == "already_fulfilled"
    _stored_as_signed(db, checkout)
    [job] = _payloads(db, "order.fulfilled")
    assert job["metadata"]["note"] == kept and job["metadata"]["sku"] == "tea"
    assert count_rows(db, "webhook_failures") == 0


@pytest.mark.parametrize("value", UNSTORABLE)
def test_an_unpaid_session_paid_later_and_a_marked_intent_with_unstorable_metadata_ship(client, db, value):
    sent, kept = UNSTORABLE[value]
    story = dict(async_payment(True, NOW))
    for evt in (story["checkout_unpaid"], story["async_succeeded"]):
        evt["data"]["object"]["metadata"] = {"note": sent}
    outcomes = [
        post_event(client, e).get_json()["outcome"]
        for e in (story["checkout_unpaid"], story["async_succeeded"])
    ]
    assert outcomes == ["awaiting_payment", "fulfilled"]
    intent = samples.payment_events()[1]
    intent["data"]["object"]["metadata"]["gift"] = sent  # beside the order marker
    assert post_event(client, intent).get_json()["outcome"] == "fulfilled"
    _stored_as_signed(db, intent)
    assert sorted(
        job["metadata"].get("note", job["metadata"].get("gift")) for job in _payloads(db, "order.fulfilled")
    ) == [kept, kept]


def test_a_shopify_order_whose_name_and_items_postgres_cannot_store_still_ships_once(shopify, db):
    paid = order()
    paid["name"] = "#1001\u0000"
    paid["line_items"][0]["sku"] = "TEA\ud800"
    body = json.dumps(paid).encode()
    response = post(shopify, "orders/paid", body)
    assert response.status_code == 200 and response.get_json()["outcome"] == "fulfilled"
    (payload,) = db.execute(f"SELECT payload FROM {LEDGER_WITH_PAYLOADS}").fetchone()
    assert payload == body.decode()
    [job] = shopify_jobs(db, "shopify.order.fulfilled")
    assert (job["name"], job["line_items"][0]["sku"]) == ("#1001\ufffd", "TEA\ufffd")


@pytest.mark.parametrize("field", ["id", "quantity"])
@pytest.mark.parametrize("value", ["nan", "infinity"])
def test_a_shopify_order_whose_line_item_number_is_not_whole_gets_a_stored_422(shopify, db, field, value):
    """Like Stripe's poison values: refused for good, recorded, replayed; never a 500 retried until
    Shopify removes the subscription."""
    paid = order()
    paid["line_items"][0][field] = UNSTORABLE[value][0]
    body = json.dumps(paid).encode()
    first = post(shopify, "orders/paid", body, event_id="poison-1")
    assert first.status_code == 422
    assert first.get_json()["error"] == "invalid_fields"
    assert first.get_json()["detail"] == f"line_items[0].{field}: not a whole number"
    again = post(shopify, "orders/paid", body, event_id="poison-1")
    assert (again.status_code, again.headers["Idempotent-Replayed"]) == (422, "true")
    assert count_rows(db, "shopify_fulfilments") == 0 and count_rows(db, "shopify_orders") == 0
    assert shopify_jobs(db, "shopify.order.fulfilled") == []
    assert db.execute("SELECT error_class FROM webhook_failures").fetchall() == [("InvalidFields",)]
