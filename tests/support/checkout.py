"""Checkout Sessions whole, as Stripe's API returns them, with their line items; their order jobs.

The session is the recorded `checkout.session.completed` sample's object
(tests/stripe_events) under fresh ids; its line items are shaped as in
"Retrieve a Checkout Session's line items"
(https://docs.stripe.com/api/checkout/sessions/line_items), with the price's
product expanded as `expand[]=...price.product` returns it.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from tests.support.stripe_api import StripeApi
from webhooks.traffic import samples

SAMPLE = Path(__file__).resolve().parents[1] / "stripe_events" / "checkout.session.completed.json"


def line_item(n: int, quantity: int = 2, unit_amount: int = 1099) -> dict:
    product = {
        "id": samples.stripe_id("prod", 14),
        "object": "product",
        "active": True,
        "name": f"T-shirt {n}",
        "metadata": {"sku": f"TS-{n}", "warehouse": "north"},
    }
    return {
        "id": samples.stripe_id("li"),
        "object": "item",
        "amount_discount": 0,
        "amount_subtotal": unit_amount * quantity,
        "amount_tax": 0,
        "amount_total": unit_amount * quantity,
        "currency": "usd",
        "description": f"T-shirt {n}",
        "price": {
            "id": samples.stripe_id("price"),
            "object": "price",
            "active": True,
            "billing_scheme": "per_unit",
            "currency": "usd",
            "livemode": False,
            "metadata": {"size": "M", "n": str(n)},
            "product": product,
            "type": "one_time",
            "unit_amount": unit_amount,
            "unit_amount_decimal": str(unit_amount),
        },
        "quantity": quantity,
    }


def session(items: list[dict], **fields) -> dict:
    """A completed, paid payment-mode session for `items`; `fields` override any of its own."""
    obj = json.loads(SAMPLE.read_text())["data"]["object"]
    obj.update(
        id=samples.stripe_id("cs_test", 58),
        payment_intent=samples.stripe_id("pi"),
        amount_total=sum(item["amount_total"] for item in items),
        amount_subtotal=sum(item["amount_subtotal"] for item in items),
        client_reference_id=f"order-{secrets.token_hex(4)}",
    )
    obj.update(fields)
    return obj


def put(stand_in: StripeApi, count: int = 3, account: str = "", **fields) -> tuple[dict, list[dict]]:
    """A session with `count` line items, put in the stand-in; the session as a webhook carries it."""
    items = [line_item(n) for n in range(count)]
    obj = session(items, **fields)
    stand_in.add_session(obj, items, account=account)
    return obj, items


def order_jobs(db, payment_id: str) -> list[dict]:
    """The order.fulfilled jobs written for the payment, as their payloads."""
    rows = db.execute(
        "SELECT convert_from(payload, 'UTF8') FROM pgqueuer "
        "WHERE headers->>'kind' = 'order.fulfilled' AND payload::text IS NOT NULL "
        "AND convert_from(payload, 'UTF8')::jsonb->>'payment_id' = %s ORDER BY id",
        [payment_id],
    ).fetchall()
    return [json.loads(row[0]) for row in rows]
