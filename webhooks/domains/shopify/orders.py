"""Shopify orders: shipping each paid order once, holding one refunded or cancelled first.

Every event of an order locks its `shopify_orders` row first (`note`), so an
order's events apply one at a time and in one lock order, whatever order
Shopify delivers them in. Its facts (paid, refunded, cancelled, held) are
only ever set, so its state only moves forward. An `orders/paid` ships the
order once: `shopify_fulfilments` is unique per order id, so a second
`orders/paid` under another event id answers `already_fulfilled`. If a
refund or cancellation arrived first (say orders/paid failed and was retried
after it), the order is held instead: one `shopify.order.review` job, never
shipped, as the Stripe domain holds a payment refunded before its success.

Shopify signs the body alone, and its order and refund ids are global, so
rows are keyed by those ids; the shop (an unsigned header) is the one first
seen with the order, kept on its row and named by its jobs. A delivery of
the order under another shop is recorded in `scope_conflicts` and changes
nothing the order's own events would not (migrations/0030).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg
import structlog
from psycopg.rows import class_row
from pydantic import ConfigDict

from webhooks.core import jobs, outbox, scope
from webhooks.core.events import Event, InvalidEvent, InvalidFields, Json
from webhooks.core.outcomes import ALREADY_FULFILLED, FULFILLED, HELD
from webhooks.core.parts import Parts
from webhooks.core.registry import handles
from webhooks.infra.db import one, storable

log = structlog.get_logger(__name__)


class LineItem(jobs.Fields):
    id: int | None
    variant_id: int | None
    sku: str | None
    quantity: int | None


class _ShopifyOrder(jobs.Job):
    """What a Shopify order's job says of it, shipped or held."""

    shop: str
    """the shop the order was first seen with (`*.myshopify.com`)"""
    event_id: str
    """the delivery's `X-Shopify-Event-Id`"""
    order_id: int
    """Shopify's order id"""
    name: str | None
    """the order's name (`#1001`)"""
    currency: str | None
    """the order's currency"""
    total_price: str | None
    """the order's total, as Shopify writes it (a decimal string)"""
    line_items: list[LineItem]
    """the order's line items, without titles or prices"""


class ShopifyOrderFulfilledJob(_ShopifyOrder):
    """Enqueued once per order id by `orders/paid`. Key: `shopify.order.fulfilled:<shop>:<order_id>`."""

    model_config = ConfigDict(title="A Shopify order to ship")

    kind: Literal["shopify.order.fulfilled"]


class ShopifyOrderReviewJob(_ShopifyOrder):
    """`orders/paid` after a refund or cancellation of the order. Key:
    `shopify.order.review:<shop>:<order_id>`."""

    model_config = ConfigDict(title="A Shopify order held")

    kind: Literal["shopify.order.review"]
    reason: Literal["refunded", "cancelled"]
    """what arrived before the payment"""


class ShopifyOrderCancelledJob(jobs.Job):
    """Key: `shopify.order.cancelled:<shop>:<order_id>`."""

    model_config = ConfigDict(title="A shipped Shopify order cancelled")

    kind: Literal["shopify.order.cancelled"]
    shop: str
    """the shop the order was first seen with (`*.myshopify.com`)"""
    event_id: str
    """the delivery's `X-Shopify-Event-Id`"""
    order_id: int
    """Shopify's order id"""
    name: str | None
    """the order's name"""
    cancel_reason: str | None
    """Shopify's `cancel_reason`"""


ORDER_FULFILLED = jobs.documented(ShopifyOrderFulfilledJob)
ORDER_REVIEW = jobs.documented(ShopifyOrderReviewJob)
ORDER_CANCELLED = jobs.documented(ShopifyOrderCancelledJob)
CANCELLED = "cancelled"  # a shipped order was cancelled: the shop hears of it
CANCEL_RECORDED = "cancel_recorded"  # not shipped: its orders/paid will be held
ALREADY_CANCELLED = "already_cancelled"
PARTS = Parts(
    outcomes=(CANCELLED, CANCEL_RECORDED, ALREADY_CANCELLED),
    jobs=(ORDER_FULFILLED, ORDER_REVIEW, ORDER_CANCELLED),
)


@dataclass(frozen=True)
class Order:
    # The shop first seen with the order: the one its jobs name.
    shop: str
    held_at: datetime | None
    refunded_at: datetime | None
    cancelled_at: datetime | None


_NOTE = """
INSERT INTO shopify_orders AS o (shop, order_id, name, customer_id)
VALUES (%(shop)s, %(order_id)s, %(name)s, %(customer_id)s)
ON CONFLICT (order_id) DO UPDATE
SET name = coalesce(o.name, EXCLUDED.name),
    customer_id = coalesce(o.customer_id, EXCLUDED.customer_id),
    updated_at = now()
RETURNING shop, held_at, refunded_at, cancelled_at
"""

# One statement per fact, so each says whether this event was the one that set it.
_MARK = {
    fact: f"""UPDATE shopify_orders SET {fact} = now(), updated_at = now()
              WHERE order_id = %s AND {fact} IS NULL RETURNING 1"""
    for fact in ("paid_at", "refunded_at", "cancelled_at")
}

# A statement of its own (not a subquery of _NOTE), so it sees a fulfilment
# committed by the transaction whose row lock _NOTE waited for.
_SHIPPED = "SELECT 1 FROM shopify_fulfilments WHERE order_id = %s"

_FULFIL = """
INSERT INTO shopify_fulfilments (shop, order_id, event_id) VALUES (%s, %s, %s)
ON CONFLICT (order_id) DO NOTHING
RETURNING id
"""

_HOLD = """
UPDATE shopify_orders SET held_at = now(), updated_at = now()
WHERE order_id = %(order_id)s AND held_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM shopify_fulfilments f WHERE f.order_id = %(order_id)s)
RETURNING 1
"""


def require_id(value: Any, what: str) -> int:
    """A Shopify numeric id (REST payloads carry them as JSON integers)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        raise InvalidEvent(f"payload has no valid {what}")
    return value


def customer_id(order: Json) -> int | None:
    customer = order.get("customer")
    value = customer.get("id") if isinstance(customer, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def note(conn: psycopg.Connection, event: Event, order_id: int, order: Json | None = None) -> Order:
    """Lock the order's row (creating it) and add what `order`, if given, says of it.

    The delivery's shop header is checked against the order's shop: a
    disagreement is recorded and logged, and the stored shop stays.
    """
    order = order or {}
    name = storable(order.get("name")) if isinstance(order.get("name"), str) else None
    params = dict(shop=event.account, order_id=order_id, name=name, customer_id=customer_id(order))
    with conn.cursor(row_factory=class_row(Order)) as cur:
        noted = one(cur.execute(_NOTE, params))
    check_shop(conn, event, "shopify_order", order_id, noted.shop)
    return noted


def shop_of(event: Event) -> str:
    """The shop a Shopify event is from: its provider refuses one that names none."""
    if event.account is None:
        raise InvalidEvent("the event names no shop")
    return event.account


def check_shop(conn: psycopg.Connection, event: Event, object_type: str, object_id: int, shop: str) -> None:
    """Record (in the event's transaction) and log a shop header that is not the object's shop."""
    if shop == event.account:
        return
    scope.record(conn, event, object_type, str(object_id), shop)
    log.warning(
        "shop_conflict",
        object_type=object_type,
        object_id=object_id,
        stored_shop=shop,
        event_shop=event.account,
        event_id=event.id,
    )


def mark(conn: psycopg.Connection, order_id: int, fact: str) -> bool:
    """Set `fact` (paid_at, refunded_at, cancelled_at) unless set; True if this event set it."""
    return conn.execute(_MARK[fact], [order_id]).fetchone() is not None


def shipped(conn: psycopg.Connection, order_id: int) -> bool:
    return conn.execute(_SHIPPED, [order_id]).fetchone() is not None


def enqueue(
    conn: psycopg.Connection, kind: jobs.JobKind, event: Event, shop: str, key: int | str, **payload: Any
) -> None:
    """The shop's job, keyed by what it is about; names no customer."""
    outbox.enqueue(
        conn,
        kind,
        {"shop": shop, "event_id": event.id, **payload},
        idempotency_key=f"{kind.name}:{shop}:{key}",
    )


# The line item fields the jobs carry that Shopify sends as whole numbers
# (REST Order resource: line_items[].id, variant_id, quantity).
_WHOLE = ("id", "variant_id", "quantity")


def _line_items(order: Json) -> list[Json]:
    """The order's line items as its jobs carry them.

    A number there that is not whole (Python's json reads `NaN` and
    `Infinity`) is not what Shopify sends and would fail the job's schema on
    every retry: it is refused for good (InvalidFields, a stored 422 naming
    the field, never its value), as Stripe's are.
    """
    items = order.get("line_items")
    lines = []
    for n, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        for field in _WHOLE:
            value = item.get(field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidFields(f"line_items[{n}].{field}: not a whole number")
        lines.append({k: item.get(k) for k in ("id", "variant_id", "sku", "quantity")})
    return lines


def _enqueue_order(
    conn: psycopg.Connection, kind: jobs.JobKind, event: Event, shop: str, order_id: int, **extra: Any
) -> None:
    order = event.data
    enqueue(
        conn,
        kind,
        event,
        shop,
        order_id,
        order_id=order_id,
        name=order.get("name"),
        currency=order.get("currency"),
        total_price=order.get("total_price"),
        line_items=_line_items(order),
        **extra,
    )


@handles("orders/paid")
def order_paid(conn: psycopg.Connection, event: Event) -> str:
    order_id = require_id(event.data.get("id"), "order id")
    _line_items(event.data)  # refused before any row is touched
    order = note(conn, event, order_id, event.data)
    mark(conn, order_id, "paid_at")
    if order.held_at is not None:
        return HELD
    if order.refunded_at is not None or order.cancelled_at is not None:
        if conn.execute(_HOLD, {"order_id": order_id}).fetchone() is None:
            return ALREADY_FULFILLED  # shipped before the refund or cancellation arrived
        reason = "cancelled" if order.cancelled_at is not None else "refunded"
        _enqueue_order(conn, ORDER_REVIEW, event, order.shop, order_id, reason=reason)
        return HELD
    if conn.execute(_FULFIL, [order.shop, order_id, event.id]).fetchone() is None:
        return ALREADY_FULFILLED
    _enqueue_order(conn, ORDER_FULFILLED, event, order.shop, order_id)
    return FULFILLED


@handles("orders/cancelled")
def order_cancelled(conn: psycopg.Connection, event: Event) -> str:
    order_id = require_id(event.data.get("id"), "order id")
    order = note(conn, event, order_id, event.data)
    if not mark(conn, order_id, "cancelled_at"):
        return ALREADY_CANCELLED
    if not shipped(conn, order_id):
        return CANCEL_RECORDED
    enqueue(
        conn,
        ORDER_CANCELLED,
        event,
        order.shop,
        order_id,
        order_id=order_id,
        name=event.data.get("name"),
        cancel_reason=event.data.get("cancel_reason"),
    )
    return CANCELLED
