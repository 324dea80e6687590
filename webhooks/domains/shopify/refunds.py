"""Shopify refunds (`refunds/create`): each refund recorded once, by its id.

A refund locks its order's row first (orders.note), like every event of the
order. A refund of a shipped order is told to the shop (one
`shopify.order.refunded` job per refund); a refund that arrives before the
order's `orders/paid` marks the order refunded, so that `orders/paid` holds
it for review instead of shipping it.
"""

from __future__ import annotations

from typing import Literal

import psycopg
from pydantic import ConfigDict

from webhooks.core import jobs
from webhooks.core.events import Event, Json
from webhooks.core.outcomes import REFUNDED
from webhooks.core.parts import Parts
from webhooks.core.registry import handles

from . import orders


class RefundLineItem(jobs.Fields):
    line_item_id: int | None
    quantity: int | None


class ShopifyOrderRefundedJob(jobs.Job):
    """Key: `shopify.order.refunded:<shop>:<refund_id>`."""

    model_config = ConfigDict(title="A refund of a shipped Shopify order")

    kind: Literal["shopify.order.refunded"]
    shop: str
    """the shop the order was first seen with (`*.myshopify.com`)"""
    event_id: str
    """the delivery's `X-Shopify-Event-Id`"""
    order_id: int
    """Shopify's order id"""
    refund_id: int
    """Shopify's refund id"""
    refund_line_items: list[RefundLineItem]
    """the refunded line items and quantities"""


ORDER_REFUNDED = jobs.documented(ShopifyOrderRefundedJob)
REFUND_RECORDED = "refund_recorded"  # not shipped: its orders/paid will be held
ALREADY_RECORDED = "already_recorded"
PARTS = Parts(outcomes=(REFUNDED, REFUND_RECORDED, ALREADY_RECORDED), jobs=(ORDER_REFUNDED,))

# Refund ids are global, like order ids: one row per refund, whatever shop header came with it.
_RECORD = """
INSERT INTO shopify_refunds (shop, refund_id, order_id, event_id) VALUES (%s, %s, %s, %s)
ON CONFLICT (refund_id) DO NOTHING
RETURNING 1
"""


def _refund_line_items(refund: Json) -> list[Json]:
    items = refund.get("refund_line_items")
    return [
        {"line_item_id": item.get("line_item_id"), "quantity": item.get("quantity")}
        for item in (items if isinstance(items, list) else [])
        if isinstance(item, dict)
    ]


@handles("refunds/create")
def refund_created(conn: psycopg.Connection, event: Event) -> str:
    refund = event.data
    refund_id = orders.require_id(refund.get("id"), "refund id")
    order_id = orders.require_id(refund.get("order_id"), "order id")
    order = orders.note(conn, event, order_id)
    if conn.execute(_RECORD, [order.shop, refund_id, order_id, event.id]).fetchone() is None:
        return ALREADY_RECORDED
    orders.mark(conn, order_id, "refunded_at")
    if not orders.shipped(conn, order_id):
        return REFUND_RECORDED
    orders.enqueue(
        conn,
        ORDER_REFUNDED,
        event,
        order.shop,
        refund_id,
        order_id=order_id,
        refund_id=refund_id,
        refund_line_items=_refund_line_items(refund),
    )
    return REFUNDED
