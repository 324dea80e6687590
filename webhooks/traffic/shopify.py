"""`loadtest --provider shopify`: orders/paid deliveries as Shopify makes them, and their audit.

n unique events, one `orders/paid` per order, except that every fifth
order also gets a second `orders/paid` under another event id (Shopify can
emit one twice). On top of those, every seventh event is sent once more
under a new `X-Shopify-Webhook-Id` (one event reaching several
subscriptions): same event id, so the same event. The audit reads what the
database holds for exactly those events.
"""

from __future__ import annotations

import json
import random
import time
import uuid

import psycopg

from webhooks.infra.db import one
from webhooks.providers import Outgoing
from webhooks.providers.shopify import NAME

from . import plugin

TOPIC = "orders/paid"
FULFILLED_JOB = "shopify.order.fulfilled"
_SHOPS = ("loadtest-tea.myshopify.com", "loadtest-coffee.myshopify.com")


def _order(order_id: int) -> dict:
    return {
        "id": order_id,
        "name": f"#{order_id % 100000}",
        "currency": "EUR",
        "total_price": "19.00",
        "financial_status": "paid",
        "email": f"buyer{order_id}@loadtest.example",
        "customer": {"id": order_id + 7},
        "line_items": [{"id": order_id * 10 + 1, "variant_id": 4242, "sku": "LT-1", "quantity": 1}],
    }


def events(n: int) -> list[tuple[bytes, Outgoing]]:
    """n unique orders/paid events (some orders twice), then some again under a new webhook id."""
    base = random.randrange(10**12, 10**14)
    now = int(time.time())
    unique: list[tuple[bytes, Outgoing]] = []
    order_id = base
    while len(unique) < n:
        order_id += 1
        shop = _SHOPS[order_id % len(_SHOPS)]
        body = json.dumps(_order(order_id)).encode()
        for _ in range(2 if order_id % 5 == 0 else 1):
            unique.append((body, Outgoing(str(uuid.uuid4()), TOPIC, shop, str(uuid.uuid4()), now)))
    unique = unique[:n]
    again = [
        (body, Outgoing(out.event_id, TOPIC, out.account, str(uuid.uuid4()), now))
        for body, out in unique[6::7]
    ]
    return unique + again


_ORDERS = """
SELECT DISTINCT e.account, (p.payload::jsonb ->> 'id')::bigint
FROM webhook_events e
JOIN webhook_payloads p ON p.ledger_id = e.id AND p.received_at = e.received_at
WHERE e.provider = 'shopify' AND e.event_id = ANY(%s)
"""

_FULFILMENTS = """
SELECT count(*) FILTER (WHERE n <> 1) FROM (
    SELECT count(f.id) AS n
    FROM unnest(%s::text[], %s::bigint[]) AS o(shop, order_id)
    LEFT JOIN shopify_fulfilments f ON f.shop = o.shop AND f.order_id = o.order_id
    GROUP BY o.shop, o.order_id
) per_order
"""

_JOBS = """
SELECT count(*) FILTER (WHERE n <> 1) FROM (
    SELECT count(j.id) AS n
    FROM unnest(%s::text[]) AS k(key)
    LEFT JOIN pgqueuer j ON j.headers->>'idempotency-key' = k.key
    GROUP BY k.key
) per_order
"""


def audit(conn: psycopg.Connection, sent: list[Outgoing]) -> dict[str, int]:
    """Violations per check, for the events in `sent`.

    The job check counts jobs still in the outbox: run it before a worker
    drains them (a delivered job leaves pgqueuer's table). Orders are read
    from the ledger's payloads: an order none of whose events completed is
    counted by the ledger check.
    """
    event_ids = sorted({out.event_id for out in sent})
    orders = conn.execute(_ORDERS, [event_ids]).fetchall()
    shops, order_ids = [shop for shop, _ in orders], [order_id for _, order_id in orders]
    keys = [f"{FULFILLED_JOB}:{shop}:{order_id}" for shop, order_id in orders]
    return {
        **plugin.completed_once(conn, NAME, sent),
        "each order fulfilled once": one(conn.execute(_FULFILMENTS, [shops, order_ids]))[0],
        "one fulfilment job per order": one(conn.execute(_JOBS, [keys]))[0],
    }


TRAFFIC = plugin.Traffic(NAME, events, audit)
