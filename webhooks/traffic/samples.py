"""Realistic Stripe events for tests, replays and load tests.

Each payment yields the events Stripe sends for one Checkout card payment:
checkout.session.completed, payment_intent.succeeded and charge.succeeded,
sharing the payment intent id as real deliveries do.
"""

from __future__ import annotations

import json
import secrets
import string
import time
from typing import Any

API_VERSION = "2026-06-24.dahlia"
_ALPHABET = string.ascii_letters + string.digits


def stripe_id(prefix: str, length: int = 24) -> str:
    return prefix + "_" + "".join(secrets.choice(_ALPHABET) for _ in range(length))


def event(event_type: str, obj: dict[str, Any], created: int | None = None, **envelope) -> dict:
    request_id = stripe_id("req", 14)
    return {
        "id": stripe_id("evt"),
        "object": "event",
        "api_version": API_VERSION,
        "created": int(time.time()) if created is None else created,
        "data": {"object": obj},
        "livemode": obj.get("livemode", False),
        "pending_webhooks": 1,
        "request": {"id": request_id, "idempotency_key": stripe_id("ik", 16)},
        "type": event_type,
        **envelope,
    }


def payment_events(amount: int = 3000, currency: str = "usd", created: int | None = None) -> list[dict]:
    """The three events of one paid Checkout session, in Stripe's usual order."""
    created = int(time.time()) if created is None else created
    stem = "".join(secrets.choice(_ALPHABET) for _ in range(24))
    intent_id, charge_id = f"pi_{stem}", f"ch_{stem}"
    customer = stripe_id("cus", 14)
    order_ref = stripe_id("order", 8)
    session = {
        "id": stripe_id("cs_test", 58),
        "object": "checkout.session",
        "amount_subtotal": amount,
        "amount_total": amount,
        "client_reference_id": order_ref,
        "created": created - 60,
        "currency": currency,
        "customer": customer,
        "customer_details": {"email": "jenny.rosen@example.com", "name": "Jenny Rosen"},
        "livemode": False,
        "metadata": {},
        "mode": "payment",
        "payment_intent": intent_id,
        "payment_status": "paid",
        "status": "complete",
    }
    intent = {
        "id": intent_id,
        "object": "payment_intent",
        "amount": amount,
        "amount_received": amount,
        "created": created - 5,
        "currency": currency,
        "customer": customer,
        "latest_charge": charge_id,
        "livemode": False,
        # The shop's order marker (payment_intent_data.metadata at Checkout),
        # so the PaymentIntent alone is an order too, whichever event comes first.
        "metadata": {"order_id": order_ref},
        "payment_method": stripe_id("pm"),
        "status": "succeeded",
    }
    charge = {
        "id": charge_id,
        "object": "charge",
        "amount": amount,
        "amount_captured": amount,
        "amount_refunded": 0,
        "balance_transaction": f"txn_{stem}",
        "captured": True,
        "created": created - 4,
        "currency": currency,
        "customer": customer,
        "livemode": False,
        "paid": True,
        "payment_intent": intent_id,
        "refunded": False,
        "status": "succeeded",
    }
    return [
        event("checkout.session.completed", session, created),
        event("payment_intent.succeeded", intent, created),
        event("charge.succeeded", charge, created),
    ]


def encode(evt: dict) -> bytes:
    """The body bytes as Stripe sends them (pretty-printed JSON)."""
    return (json.dumps(evt, indent=2) + "\n").encode("utf-8")


def payment_stream(count: int, **payment) -> list[dict]:
    """`count` events from as many payments as it takes, each payment's events in order.

    The last payment is cut short when `count` is not a multiple of three; it
    still starts with its checkout session, so every payment in the list is one
    that the service fulfils.
    """
    events: list[dict] = []
    while len(events) < count:
        events.extend(payment_events(**payment))
    return events[:count]


def payment_id(evt: dict) -> str | None:
    """The payment intent id an event of `payment_events` belongs to."""
    obj = evt["data"]["object"]
    return obj["id"] if obj.get("object") == "payment_intent" else obj.get("payment_intent")
