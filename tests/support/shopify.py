"""Shopify deliveries for the tests, signed independently of the service's signer."""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import uuid

import pytest

SHOPIFY_SECRET = "shpss_test_primary_0123456789"
SHOPIFY_OTHER_SECRET = "shpss_test_rotated_9876543210"
SHOP = "tea-house.myshopify.com"
_ids = itertools.count(450789469)


def next_id() -> int:
    return next(_ids)


def hmac_header(body: bytes, secret: str = SHOPIFY_SECRET) -> str:
    """What Shopify's docs say it sends: base64 of HMAC-SHA256 over the raw body with the client secret."""
    return base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()


def headers(
    body: bytes,
    topic: str,
    event_id: str | None = None,
    *,
    shop: str = SHOP,
    secret: str = SHOPIFY_SECRET,
    webhook_id: str | None = None,
) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-Shopify-Hmac-Sha256": hmac_header(body, secret),
        "X-Shopify-Topic": topic,
        "X-Shopify-Shop-Domain": shop,
        "X-Shopify-Event-Id": event_id or str(uuid.uuid4()),
        "X-Shopify-Webhook-Id": webhook_id or str(uuid.uuid4()),
        "X-Shopify-Triggered-At": "2026-12-03T07:00:27.877041743Z",
        "X-Shopify-API-Version": "2026-01",
    }


def post(
    client,
    topic: str,
    payload: dict | bytes,
    event_id: str | None = None,
    *,
    without: tuple[str, ...] = (),
    **kwargs,
):
    """A signed delivery; `without` names headers to leave out, as some real deliveries do."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    sent = {
        name: value for name, value in headers(body, topic, event_id, **kwargs).items() if name not in without
    }
    return client.post("/webhooks/shopify", data=body, headers=sent)


def order(
    order_id: int | None = None, customer_id: int = 207119551, email: str = "bob.norman@mail.example.com"
) -> dict:
    """An orders/paid payload in the shape of Shopify's sample (the fields the handlers read, and PII)."""
    return {
        "id": order_id or next_id(),
        "name": "#1001",
        "email": email,
        "contact_email": email,
        "phone": "+13125551212",
        "currency": "USD",
        "total_price": "49.00",
        "financial_status": "paid",
        "browser_ip": "203.0.113.7",
        "customer": {"id": customer_id, "email": email, "first_name": "Bob", "last_name": "Norman"},
        "billing_address": {"first_name": "Bob", "address1": "Chestnut Street 92", "zip": "40202"},
        "shipping_address": {"first_name": "Bob", "address1": "Chestnut Street 92", "zip": "40202"},
        "line_items": [
            {"id": 466157049, "variant_id": 39072856, "sku": "TEA-1", "quantity": 2, "title": "Oolong"}
        ],
    }


def refund(order_id: int, refund_id: int | None = None) -> dict:
    return {
        "id": refund_id or next_id(),
        "order_id": order_id,
        "note": "damaged",
        "refund_line_items": [{"line_item_id": 466157049, "quantity": 1}],
    }


def cancelled(order_id: int) -> dict:
    return {
        **order(order_id),
        "cancel_reason": "customer",
        "financial_status": "refunded",
        "cancelled_at": "2026-12-03T07:10:00-05:00",
    }


@pytest.fixture
def shopify_app(make_app):
    return make_app(SHOPIFY_WEBHOOK_SECRET=f"{SHOPIFY_SECRET},{SHOPIFY_OTHER_SECRET}")


@pytest.fixture
def shopify(shopify_app):
    return shopify_app.test_client()


def jobs(db, prefix: str = "shopify.") -> list[tuple[str, str]]:
    return db.execute(
        "SELECT headers->>'kind', headers->>'idempotency-key' FROM pgqueuer "
        "WHERE headers->>'kind' LIKE %s ORDER BY id",
        [prefix + "%"],
    ).fetchall()


def job_payloads(db, kind: str) -> list[dict]:
    rows = db.execute(
        "SELECT convert_from(payload, 'UTF8') FROM pgqueuer WHERE headers->>'kind' = %s ORDER BY id",
        [kind],
    ).fetchall()
    return [json.loads(row[0]) for row in rows]


def fulfilments(db) -> list[tuple[str, int]]:
    return db.execute("SELECT shop, order_id FROM shopify_fulfilments ORDER BY id").fetchall()
