"""Every payload the providers publish, delivered twice: no 5xx, every redelivery is the stored
answer, and no money moves (no order shipped, no invoice fulfilled, no access granted) unless the
object the event carries is paid.

Stripe: one event for each type the installed `stripe` package lists, carrying
Stripe's own fixture of its object (tests/corpus/README.md), at the version
the service's endpoints are pinned to by default (STRIPE_API_VERSION), at the
newest version the installed library pins (`stripe.api_version`), and at a
pre-basil version. GitHub: @octokit/webhooks-examples. Shopify: Shopify's
order and refund samples and its compliance payloads. Deliveries go through
the app's test client, not the served stack, to keep this quick.
"""

from __future__ import annotations

import gzip
import json
import time
import uuid
from functools import partial
from pathlib import Path

import pytest
import stripe as stripe_library

from tests.conftest import post_event
from tests.corpus import stripe_resource, stripe_types
from tests.support import shopify
from tests.support.rows import count_rows
from tests.support.senders import GITHUB
from webhooks.infra.config import Settings
from webhooks.providers import Outgoing

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
PRE_BASIL = "2024-12-18.acacia"
NOW = int(time.time())


def _gz(name: str):
    return json.loads(gzip.decompress((CORPUS / name).read_bytes()))


def _stripe_events(api_version: str) -> list[dict]:
    resources = _gz("stripe_fixtures3.json.gz")
    events = []
    for n, event_type in enumerate(stripe_types()):
        name = stripe_resource(event_type, resources)
        # The few types fixtures3.json has no object for carry an id and their object's name.
        prefix = event_type.rsplit(".", 1)[0]
        obj = resources[name] if name else {"id": f"{prefix}_corpus", "object": prefix}
        events.append(
            {
                "id": f"evt_corpus{n:04d}{uuid.uuid4().hex[:8]}",
                "object": "event",
                "api_version": api_version,
                "created": NOW,
                "data": {"object": obj},
                "livemode": False,
                "pending_webhooks": 1,
                "request": {"id": None, "idempotency_key": None},
                "type": event_type,
            }
        )
    return events


def _answered_alike_twice(send) -> int:
    """Deliver twice; the first answer's status, after checking the second is the same answer."""
    first, again = send(), send()
    assert first.status_code < 500, first.get_json()
    assert (again.status_code, again.data) == (first.status_code, first.data)
    if first.status_code == 200:
        assert again.headers.get("Idempotent-Replayed") == "true"
    return first.status_code


def _paid(obj: dict) -> bool:
    """What the object itself says: Stripe's "Fulfill orders" page and API object pages (docs/events.md)."""
    match obj.get("object"):
        case "checkout.session":
            return obj.get("payment_status") in ("paid", "no_payment_required")
        case "payment_intent":
            return obj.get("status") == "succeeded"
        case "invoice":
            return obj.get("status") == "paid"
        case "subscription":
            cancel_at = obj.get("cancel_at")
            return obj.get("status") in ("active", "trialing") and not (
                cancel_at and cancel_at <= time.time()
            )
    return False


_MONEY = """
SELECT 'fulfilment', event_id FROM fulfilments
UNION ALL SELECT 'invoice fulfilment', event_id FROM invoice_fulfilments
UNION ALL SELECT headers->>'kind', convert_from(payload, 'UTF8')::jsonb->>'event_id' FROM pgqueuer
WHERE headers->>'kind' IN ('order.fulfilled', 'payment.review')
   OR (headers->>'kind' = 'subscription.access_changed'
       AND convert_from(payload, 'UTF8')::jsonb->>'change' = 'granted')
"""


@pytest.mark.parametrize(
    "api_version",
    [Settings().stripe_api_version, stripe_library.api_version, PRE_BASIL],
    ids=["default", "library", "pre_basil"],
)
def test_every_stripe_event_type_with_stripes_own_fixture_is_answered_once_and_moves_no_unpaid_money(
    app, db, api_version
):
    client, registry = app.test_client(), app.extensions["webhooks.service"].registry
    events = _stripe_events(api_version)
    assert len(events) > 250  # the package's list, not a handful
    for evt in events:
        status = _answered_alike_twice(partial(post_event, client, evt))
        # A handled type may refuse a fixture's placeholder values with a stored 4xx;
        # a type nothing handles is recorded as it is.
        handled = registry.handler_name("stripe", evt["type"]) is not None
        assert status == 200 or (handled and status < 500), (evt["type"], status)
    sent = {evt["id"]: evt for evt in events}
    moved = db.execute(_MONEY).fetchall()
    unpaid = [
        (what, sent[event_id]["type"])
        for what, event_id in moved
        if not _paid(sent[event_id]["data"]["object"])
    ]
    assert unpaid == []
    access = count_rows(db, "subscription_access", "has_access")
    assert access == 0  # Stripe's subscription fixture's cancel_at passed long ago


def test_every_github_example_is_answered_once(make_app):
    client = make_app(**{GITHUB.setting: GITHUB.secret}).test_client()
    examples = [
        (entry["name"], example) for entry in _gz("github_examples.json.gz") for example in entry["examples"]
    ]
    assert len(examples) > 300
    for name, example in examples:
        body = json.dumps(example).encode()
        outgoing = Outgoing(str(uuid.uuid4()), name)
        status = _answered_alike_twice(partial(GITHUB.post, client, body, outgoing))
        assert status == 200, (name, status)


def _shopify_deliveries() -> list[tuple[str, dict]]:
    samples = json.loads((CORPUS / "shopify_samples.json").read_text())
    orders = [samples["order"], *samples["orders"]]
    customer = {"id": 191167, "email": "john@example.com", "phone": "555-625-1199"}
    shop = {"shop_id": 954889, "shop_domain": shopify.SHOP}
    return [
        *[(topic, order) for order in orders for topic in ("orders/paid", "orders/cancelled")],
        ("refunds/create", samples["refund"]),
        (
            "customers/data_request",
            {
                **shop,
                "orders_requested": [299938, 280263, 220458],
                "customer": customer,
                "data_request": {"id": 9999},
            },
        ),
        ("customers/redact", {**shop, "customer": customer, "orders_to_redact": [299938, 280263, 220458]}),
        ("shop/redact", shop),
    ]


def test_every_shopify_sample_is_answered_once_and_only_a_paid_order_ships(make_app, db):
    client = make_app(SHOPIFY_WEBHOOK_SECRET=shopify.SHOPIFY_SECRET).test_client()
    for topic, payload in _shopify_deliveries():
        body, event_id = json.dumps(payload).encode(), str(uuid.uuid4())
        _answered_alike_twice(partial(shopify.post, client, topic, body, event_id))
    shipped = db.execute("SELECT order_id FROM shopify_fulfilments").fetchall()
    paid = {o["id"] for _, o in _shopify_deliveries() if o.get("financial_status") == "paid"}
    assert {order_id for (order_id,) in shipped} <= paid
