"""Shopify's compliance topics: recorded, answered 200, and the customer's data gone from stored payloads."""

import json

from tests.support.rows import LEDGER_WITH_PAYLOADS, count_rows
from tests.support.shopify import (  # noqa: F401  (fixtures)
    SHOP,
    job_payloads,
    order,
    post,
    refund,
    shopify,
    shopify_app,
)

BOB, ALICE = 207119551, 115310627
BOB_EMAIL, ALICE_EMAIL = "bob.norman@mail.example.com", "alice@mail.example.com"


def _payloads(db, table: str = "webhook_events") -> dict[str, str]:
    source = LEDGER_WITH_PAYLOADS if table == "webhook_events" else table
    return dict(db.execute(f"SELECT event_id, payload FROM {source}").fetchall())


def _redact_request(orders_to_redact: list[int], customer_id=BOB, email=BOB_EMAIL) -> dict:
    return {
        "shop_id": 954889,
        "shop_domain": SHOP,
        "orders_to_redact": orders_to_redact,
        "customer": {"id": customer_id, "email": email, "phone": "+13125551212"},
    }


def _shop_story(shopify):
    bob, alice = order(customer_id=BOB, email=BOB_EMAIL), order(customer_id=ALICE, email=ALICE_EMAIL)
    post(shopify, "orders/paid", bob, event_id="bob-paid")
    post(shopify, "orders/paid", alice, event_id="alice-paid")
    post(shopify, "refunds/create", refund(bob["id"]), event_id="bob-refund")
    return bob, alice


def test_customers_redact_removes_that_customer_from_stored_payloads_and_keeps_others(shopify, db):
    bob, alice = _shop_story(shopify)
    before = _payloads(db)
    response = post(shopify, "customers/redact", _redact_request([bob["id"]]), event_id="redact-bob")
    assert response.status_code == 200 and response.get_json()["outcome"] == "redacted"
    after = _payloads(db)
    for event_id in ("bob-paid", "bob-refund", "redact-bob"):
        assert BOB_EMAIL not in after[event_id] and "Chestnut" not in after[event_id], event_id
    assert "+13125551212" not in after["redact-bob"] and "Norman" not in after["bob-paid"]
    kept = json.loads(after["bob-paid"])
    assert (kept["id"], kept["customer"], kept["line_items"][0]["quantity"]) == (bob["id"], "[redacted]", 2)
    assert after["alice-paid"] == before["alice-paid"] and ALICE_EMAIL in after["alice-paid"]
    assert db.execute("SELECT order_id FROM shopify_orders WHERE customer_id IS NOT NULL").fetchall() == [
        (alice["id"],)
    ]
    assert db.execute("SELECT outcome FROM webhook_events WHERE event_id = 'redact-bob'").fetchone() == (
        "redacted",
    )


def test_customers_redact_finds_the_customers_orders_it_stored_even_when_not_listed(shopify, db):
    bob, _ = _shop_story(shopify)
    post(shopify, "customers/redact", _redact_request([], email=None), event_id="redact-bob")
    assert BOB_EMAIL not in _payloads(db)["bob-paid"]
    assert "damaged" not in _payloads(db)["bob-refund"]  # the refund's note, found through its order


def test_customers_redact_reaches_failed_attempts_too(shopify, db):
    bob, _ = _shop_story(shopify)
    db.execute(
        "INSERT INTO webhook_failures (provider, event_id, event_type, error_class, payload) "
        "VALUES ('shopify', 'bob-failed', 'orders/paid', 'RuntimeError', %s), "
        "('shopify', 'alice-failed', 'orders/paid', 'RuntimeError', %s)",
        [json.dumps(bob), json.dumps(order(customer_id=ALICE, email=ALICE_EMAIL))],
    )
    post(shopify, "customers/redact", _redact_request([bob["id"]]), event_id="redact-bob")
    failures = _payloads(db, "webhook_failures")
    assert BOB_EMAIL not in failures["bob-failed"] and ALICE_EMAIL in failures["alice-failed"]


def test_customers_redact_leaves_another_shops_payloads_alone(shopify, db):
    bob = order(customer_id=BOB, email=BOB_EMAIL)
    post(shopify, "orders/paid", bob, event_id="other-shop-paid", shop="other.myshopify.com")
    post(shopify, "customers/redact", _redact_request([bob["id"]]), event_id="redact-bob")
    assert BOB_EMAIL in _payloads(db)["other-shop-paid"]


def test_shop_redact_removes_personal_data_from_every_payload_of_the_shop(shopify, db):
    _shop_story(shopify)
    post(shopify, "orders/paid", order(), event_id="other-shop", shop="other.myshopify.com")
    response = post(shopify, "shop/redact", {"shop_id": 954889, "shop_domain": SHOP}, event_id="bye")
    assert response.get_json()["outcome"] == "redacted"
    payloads = _payloads(db)
    for event_id in ("bob-paid", "alice-paid", "bob-refund"):
        assert "@mail.example.com" not in payloads[event_id]
    assert BOB_EMAIL in payloads["other-shop"]
    assert count_rows(db, "shopify_orders", "shop = %s AND customer_id IS NOT NULL", [SHOP]) == 0
    assert count_rows(db, "shopify_fulfilments") == 3  # the backstop stays


def test_customers_data_request_queues_a_job_naming_what_is_stored(shopify, db):
    bob, _ = _shop_story(shopify)
    request = {
        "shop_id": 954889,
        "shop_domain": SHOP,
        "orders_requested": [bob["id"]],
        "customer": {"id": BOB, "email": BOB_EMAIL, "phone": "+13125551212"},
        "data_request": {"id": 9999},
    }
    response = post(shopify, "customers/data_request", request, event_id="ask-bob")
    assert response.status_code == 200 and response.get_json()["outcome"] == "data_request_queued"
    [job] = job_payloads(db, "shopify.customer.data_request")
    assert (job["shop"], job["data_request_id"], job["customer_id"], job["orders"]) == (
        SHOP,
        9999,
        BOB,
        [bob["id"]],
    )
    assert sorted(job["stored_events"]) == ["ask-bob", "bob-paid", "bob-refund"]
    # Answered once: the same request redelivered is a replay and queues nothing more.
    again = post(shopify, "customers/data_request", request, event_id="ask-bob")
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert len(job_payloads(db, "shopify.customer.data_request")) == 1


# A compliance delivery as shopify-api-ruby#1261 shows one: no shop header, no event id.
AS_REPORTED_IN_2024 = ("X-Shopify-Shop-Domain", "X-Shopify-Event-Id")


def test_a_compliance_request_without_shop_and_event_id_headers_is_done_for_the_shop_its_body_names(
    shopify, db
):
    bob, alice = _shop_story(shopify)
    request = _redact_request([bob["id"]])
    response = post(
        shopify, "customers/redact", request, webhook_id="wh-redact-bob", without=AS_REPORTED_IN_2024
    )
    assert response.status_code == 200 and response.get_json()["outcome"] == "redacted"
    assert BOB_EMAIL not in _payloads(db)["bob-paid"] and ALICE_EMAIL in _payloads(db)["alice-paid"]
    assert db.execute("SELECT account FROM webhook_events WHERE event_id = 'wh-redact-bob'").fetchone() == (
        SHOP,
    )
    # Shopify's retry carries the same X-Shopify-Webhook-Id: answered from the ledger.
    again = post(
        shopify, "customers/redact", request, webhook_id="wh-redact-bob", without=AS_REPORTED_IN_2024
    )
    assert again.headers.get("Idempotent-Replayed") == "true"


def test_a_compliance_request_naming_no_valid_shop_anywhere_is_refused_and_writes_nothing(shopify, db):
    for shop in (None, "tea.example.com"):
        response = post(
            shopify, "shop/redact", {"shop_id": 954889, "shop_domain": shop}, without=AS_REPORTED_IN_2024
        )
        assert response.status_code == 400 and response.get_json()["error"] == "invalid_event"
    assert count_rows(db, "webhook_events") == 0


def test_an_order_delivery_still_needs_its_shop_header(shopify, db):
    response = post(shopify, "orders/paid", {**order(), "shop_domain": SHOP}, without=AS_REPORTED_IN_2024)
    assert response.status_code == 400
    assert count_rows(db, "webhook_events") == 0
