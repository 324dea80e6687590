"""Shopify's door: X-Shopify-Hmac-Sha256 over the raw body, the event named by its headers."""

import json

import pytest

from tests.conftest import table_counts
from tests.support.rows import count_rows
from tests.support.shopify import (  # noqa: F401  (fixtures)
    SHOP,
    SHOPIFY_OTHER_SECRET,
    SHOPIFY_SECRET,
    headers,
    hmac_header,
    order,
    post,
    shopify,
    shopify_app,
)
from webhooks.bootstrap import PROVIDERS
from webhooks.providers import Outgoing

NOTHING = {"webhook_events": 0, "webhook_failures": 0, "fulfilments": 0}


def _shopify_rows(db) -> int:
    return count_rows(db, "shopify_orders")


def test_the_hmac_is_base64_of_hmac_sha256_of_the_raw_body():
    # Computed independently (openssl, not Python):
    # `printf '{"id":1}' | openssl dgst -sha256 -hmac hush -binary | base64`.
    assert hmac_header(b'{"id":1}', "hush") == "VnKUjZsLuN5iZWjn5EntcBVCF9kMN43LglzCE1/GSeY="


def test_the_service_signer_produces_the_headers_shopify_sends():
    body = json.dumps(order()).encode()
    out = Outgoing("evt-1", "orders/paid", SHOP, delivery_id="wh-1", timestamp=1764745200)
    signed = PROVIDERS["shopify"].sign(body, SHOPIFY_SECRET, out)
    assert signed["X-Shopify-Hmac-Sha256"] == hmac_header(body)
    assert (
        signed["X-Shopify-Event-Id"],
        signed["X-Shopify-Webhook-Id"],
        signed["X-Shopify-Topic"],
        signed["X-Shopify-Shop-Domain"],
    ) == ("evt-1", "wh-1", "orders/paid", SHOP)
    assert signed["X-Shopify-Triggered-At"] == "2025-12-03T07:00:00Z"
    assert signed["X-Shopify-API-Version"]


def test_a_signed_delivery_is_claimed_under_the_shopify_provider_with_its_shop(shopify, db):
    response = post(shopify, "orders/paid", order(), event_id="b54557e4-bdd9-4b37-8a5f-bf7d70bcd043")
    assert response.status_code == 200
    assert response.get_json()["outcome"] == "fulfilled"
    row = db.execute(
        "SELECT provider, event_id, event_type, account, event_created::text FROM webhook_events"
    ).fetchone()
    assert row == (
        "shopify",
        "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
        "orders/paid",
        SHOP,
        "2026-12-03 07:00:27.877041+00",
    )


def test_a_topic_with_no_handler_is_recorded_and_ignored(shopify, db):
    response = post(shopify, "products/update", {"id": 632910392, "title": "Oolong"})
    assert response.get_json()["outcome"] == "ignored"


def test_the_rotated_secret_is_accepted_too(shopify, db):
    response = post(shopify, "orders/paid", order(), secret=SHOPIFY_OTHER_SECRET)
    assert response.status_code == 200


def test_the_same_event_id_under_stripe_and_shopify_is_two_events(shopify, db):
    from tests.conftest import post_event
    from webhooks.traffic import samples

    evt = samples.event("test.other", {"id": "obj_1"})
    assert post_event(shopify, evt).status_code == 200
    assert post(shopify, "products/update", {"id": 1}, event_id=evt["id"]).status_code == 200
    assert count_rows(db, "webhook_events", "event_id = %s", [evt["id"]]) == 2


def _hostile(name: str):
    body = json.dumps(order()).encode()
    good = headers(body, "orders/paid")
    cases = {
        "wrong_secret": (body, {**good, "X-Shopify-Hmac-Sha256": hmac_header(body, "shpss_other")}),
        "tampered_body": (body.replace(b"49.00", b"0.01"), good),
        "no_hmac": (body, {k: v for k, v in good.items() if k != "X-Shopify-Hmac-Sha256"}),
        "hex_hmac": (body, {**good, "X-Shopify-Hmac-Sha256": "ab" * 32}),
        "non_ascii_hmac": (body, {**good, "X-Shopify-Hmac-Sha256": "é" * 44}),
        "huge_hmac": (body, {**good, "X-Shopify-Hmac-Sha256": "A" * 10_000}),
        "no_event_id": (
            body,
            {k: v for k, v in good.items() if k not in ("X-Shopify-Event-Id", "X-Shopify-Webhook-Id")},
        ),
        "bad_event_id": (body, {**good, "X-Shopify-Event-Id": "evt 1; DROP"}),
        "long_event_id": (body, {**good, "X-Shopify-Event-Id": "e" * 256}),
        "no_topic": (body, {k: v for k, v in good.items() if k != "X-Shopify-Topic"}),
        "bad_topic": (body, {**good, "X-Shopify-Topic": "orders paid"}),
        "no_shop": (body, {k: v for k, v in good.items() if k != "X-Shopify-Shop-Domain"}),
        "custom_domain_shop": (body, {**good, "X-Shopify-Shop-Domain": "tea.example.com"}),
        "not_json": (b"not json", headers(b"not json", "orders/paid")),
        "json_array": (b"[1]", headers(b"[1]", "orders/paid")),
        "deep_json": (
            b"[" * 100_000 + b"]" * 100_000,
            headers(b"[" * 100_000 + b"]" * 100_000, "orders/paid"),
        ),
        "order_without_id": (b'{"name":"#1"}', headers(b'{"name":"#1"}', "orders/paid")),
        "order_id_not_a_number": (b'{"id":"1"}', headers(b'{"id":"1"}', "orders/paid")),
    }
    return cases[name]


@pytest.mark.parametrize(
    "name, error",
    [
        ("wrong_secret", "invalid_signature"),
        ("tampered_body", "invalid_signature"),
        ("no_hmac", "invalid_signature"),
        ("hex_hmac", "invalid_signature"),
        ("non_ascii_hmac", "invalid_signature"),
        ("huge_hmac", "invalid_signature"),
        ("no_event_id", "invalid_event"),
        ("bad_event_id", "invalid_event"),
        ("long_event_id", "invalid_event"),
        ("no_topic", "invalid_event"),
        ("bad_topic", "invalid_event"),
        ("no_shop", "invalid_event"),
        ("custom_domain_shop", "invalid_event"),
        ("not_json", "invalid_event"),
        ("json_array", "invalid_event"),
        ("deep_json", "invalid_event"),
        ("order_without_id", "invalid_event"),
        ("order_id_not_a_number", "invalid_event"),
    ],
)
def test_a_hostile_shopify_delivery_is_refused_and_writes_nothing(shopify, db, name, error):
    body, hdrs = _hostile(name)
    response = shopify.post("/webhooks/shopify", data=body, headers=hdrs)
    # Shopify's app review requires 401 for a bad HMAC; the rest are 400 as for every provider.
    assert response.status_code == (401 if error == "invalid_signature" else 400)
    assert response.get_json()["error"] == error
    assert table_counts(db) == NOTHING and _shopify_rows(db) == 0


def test_a_body_over_the_limit_is_refused_with_413(make_app, db):
    client = make_app(SHOPIFY_WEBHOOK_SECRET=SHOPIFY_SECRET, WEBHOOK_MAX_BODY_BYTES=1000).test_client()
    big = {**order(), "note": "x" * 2000}
    assert post(client, "orders/paid", big).status_code == 413
    assert table_counts(db) == NOTHING


def test_without_a_shopify_secret_the_url_answers_503(client, db):
    response = post(client, "orders/paid", order())
    assert response.status_code == 503
    assert response.get_json()["error"] == "webhook_secret_missing"
