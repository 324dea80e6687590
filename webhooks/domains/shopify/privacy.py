"""Shopify's mandatory compliance topics: recorded, acted on, answered 200.

The ledger row is the record of each request. `customers/redact` and
`shop/redact` redact the stored payloads in the same transaction as the
claim, the request's own payload included (see payloads.py), and clear the
customer ids `shopify_orders` keeps; `customers/data_request` enqueues a job
for the shop to answer the request (Shopify gives it 30 days), naming the
stored events that concern the customer.

Each request is acted on once. Shopify signs the body alone, so a captured
request replayed under a new X-Shopify-Event-Id verifies; the requests carry
no id of their own (but a data request's), so a body already acted on is
known by its SHA-256 (`shopify_compliance_requests`, migrations/0030) and
answered `already_done`: no second job, no second redaction of what was
stored since. A replayed redaction request's own stored copy is redacted.
"""

from __future__ import annotations

import hashlib
from typing import Literal

import psycopg
import structlog
from pydantic import ConfigDict

from webhooks.core import jobs
from webhooks.core.events import Event, Json
from webhooks.core.parts import Parts
from webhooks.core.redaction import redact
from webhooks.core.registry import handles

from . import orders, payloads

log = structlog.get_logger(__name__)


class ShopifyCustomerDataRequestJob(jobs.Job):
    """Shopify asks for an answer within 30 days. Key:
    `shopify.customer.data_request:<shop>:<data_request_id>`."""

    model_config = ConfigDict(title="A customer's data request for the shop to answer")

    kind: Literal["shopify.customer.data_request"]
    shop: str
    """the shop the order was first seen with (`*.myshopify.com`)"""
    event_id: str
    """the delivery's `X-Shopify-Event-Id`"""
    data_request_id: int | None
    """the request's `data_request.id`"""
    customer_id: int | None
    """Shopify's customer id"""
    orders: list[int]
    """the orders requested and those stored for the customer"""
    stored_events: list[str]
    """ids of the stored events that name the customer"""


DATA_REQUEST_JOB = jobs.documented(ShopifyCustomerDataRequestJob)
DATA_REQUEST_QUEUED = "data_request_queued"
REDACTED = "redacted"
ALREADY_DONE = "already_done"  # this signed request was acted on before, under another event id
PARTS = Parts(
    outcomes=(DATA_REQUEST_QUEUED, REDACTED, ALREADY_DONE),
    jobs=(DATA_REQUEST_JOB,),
    personal=payloads.PERSONAL_FIELDS,
)

_FIRST_TIME = """
INSERT INTO shopify_compliance_requests (body_sha256, topic, shop, event_id) VALUES (%s, %s, %s, %s)
ON CONFLICT (body_sha256) DO NOTHING
RETURNING 1
"""
_REDACT_OWN_COPY = """
UPDATE webhook_payloads p SET payload = %s
FROM webhook_events e
WHERE e.provider = 'shopify' AND e.event_id = %s AND p.ledger_id = e.id AND p.received_at = e.received_at
"""

_CUSTOMER_ORDERS = "SELECT order_id FROM shopify_orders WHERE shop = %s AND customer_id = %s"
_SHOP_ORDERS = "SELECT order_id FROM shopify_orders WHERE shop = %s"
_FORGET_CUSTOMER = """
UPDATE shopify_orders SET customer_id = NULL, updated_at = now()
WHERE shop = %s AND (customer_id = %s OR order_id = ANY(%s))
"""
_FORGET_CUSTOMERS = "UPDATE shopify_orders SET customer_id = NULL, updated_at = now() WHERE shop = %s"


def _ids(values: object) -> list[int]:
    return [
        v
        for v in (values if isinstance(values, list) else [])
        if isinstance(v, int) and not isinstance(v, bool)
    ]


def _customer(conn: psycopg.Connection, event: Event, orders_key: str) -> payloads.Customer:
    """The request's customer, with their orders: those it lists and those we stored for them."""
    customer_id = orders.customer_id(event.data)
    customer = event.data.get("customer")
    email = customer.get("email") if isinstance(customer, dict) else None
    email = email if isinstance(email, str) else None
    known = (
        []
        if customer_id is None
        else [row[0] for row in conn.execute(_CUSTOMER_ORDERS, [event.account, customer_id])]
    )
    return payloads.Customer(customer_id, email, frozenset(_ids(event.data.get(orders_key)) + known))


def _replayed(conn: psycopg.Connection, event: Event) -> bool:
    """True when this signed body was acted on before; else records it, in the claim's transaction."""
    digest = hashlib.sha256(event.raw.encode("utf-8")).hexdigest()
    first = conn.execute(_FIRST_TIME, [digest, event.type, event.account, event.id]).fetchone()
    if first is None:
        log.warning("shopify_request_replayed", shop=event.account, event_id=event.id, topic=event.type)
    return first is None


def _forget_replay(conn: psycopg.Connection, event: Event) -> str:
    """A replayed redaction request: its own stored copy is redacted, nothing else is touched."""
    conn.execute(_REDACT_OWN_COPY, [redact(event.raw, payloads.PERSONAL_FIELDS), event.id])
    return ALREADY_DONE


@handles("customers/data_request")
def data_request(conn: psycopg.Connection, event: Event) -> str:
    if _replayed(conn, event):
        return ALREADY_DONE
    customer = _customer(conn, event, "orders_requested")
    request = event.data.get("data_request")
    request_id = request.get("id") if isinstance(request, dict) else None
    orders.enqueue(
        conn,
        DATA_REQUEST_JOB,
        event,
        orders.shop_of(event),
        request_id if isinstance(request_id, int) else event.id,
        data_request_id=request_id,
        customer_id=customer.id,
        orders=sorted(customer.orders),
        stored_events=payloads.naming(conn, orders.shop_of(event), customer.named_in),
    )
    return DATA_REQUEST_QUEUED


@handles("customers/redact")
def customer_redact(conn: psycopg.Connection, event: Event) -> str:
    if _replayed(conn, event):
        return _forget_replay(conn, event)
    customer = _customer(conn, event, "orders_to_redact")
    changed = payloads.redact(conn, orders.shop_of(event), customer.named_in, customer.named_in)
    conn.execute(_FORGET_CUSTOMER, [event.account, customer.id, list(customer.orders)])
    log.info("shopify_customer_redacted", shop=event.account, event_id=event.id, payloads=changed)
    return REDACTED


@handles("shop/redact")
def shop_redact(conn: psycopg.Connection, event: Event) -> str:
    if _replayed(conn, event):
        return _forget_replay(conn, event)
    shop_orders = {row[0] for row in conn.execute(_SHOP_ORDERS, [event.account])}

    def shop_failure(topic: str, data: Json) -> bool:
        return payloads.order_of(topic, data) in shop_orders or data.get("shop_domain") == event.account

    changed = payloads.redact(conn, orders.shop_of(event), lambda topic, data: True, shop_failure)
    conn.execute(_FORGET_CUSTOMERS, [event.account])
    log.info("shopify_shop_redacted", shop=event.account, event_id=event.id, payloads=changed)
    return REDACTED
