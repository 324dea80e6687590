"""What an order bought: a Checkout Session's line items, read from Stripe's API and stored once.

A `checkout.session.completed` event does not carry them: The Checkout
Session object (https://docs.stripe.com/api/checkout/sessions/object) makes
`line_items` an includable field, and "Retrieve a Checkout Session's line
items" (https://docs.stripe.com/api/checkout/sessions/line_items) says the
expanded one holds "the first handful" of them, the rest at that list's URL,
paged with `starting_after` (https://docs.stripe.com/api/pagination).
Stripe's "Fulfill orders" guide (https://docs.stripe.com/checkout/fulfillment)
retrieves the session with `line_items` expanded for this reason.

Two paths read them, both outside any claim's transaction: the customer's
return (returns.py), which has the session in hand, and the outbox worker,
which completes an `order.fulfilled` job before POSTing it (`complete`).
Whichever reads them first stores them (checkout_line_items), so Stripe is
asked once per session; the job carries them as `line_items`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Annotated, Any

import psycopg
import stripe
from pydantic import Field

from webhooks.core import jobs
from webhooks.core.events import Json
from webhooks.infra import db
from webhooks.infra.config import Settings

from . import api as stripe_api

SESSIONS = "/v1/checkout/sessions/"
# The product's name and metadata are on the price's product, expanded too,
# within the depth Stripe expands to (https://docs.stripe.com/expand).
SESSION_EXPAND = ["line_items.data.price.product"]
PAGE_EXPAND = ["data.price.product"]
# A Checkout Session's line items take a page or two; a list that goes on past
# this many is not one to ship from.
MAX_PAGES = 10

_STORED = "SELECT items FROM checkout_line_items WHERE session_id = %(session)s AND account = %(account)s"
_STORE = """
INSERT INTO checkout_line_items (session_id, account, items)
VALUES (%(session)s, %(account)s, %(items)s::jsonb)
ON CONFLICT (session_id, account) DO NOTHING
"""


class LineItem(jobs.Fields):
    """One line of what an order bought, as `order.fulfilled` carries it."""

    id: str
    """the line item (`li_...`)"""
    price_id: str | None
    """the Price (`price_...`)"""
    product_id: str | None
    """the Product (`prod_...`)"""
    product_name: str | None
    """the product's name (the line's description when the product has none)"""
    quantity: Annotated[int, Field(ge=0)] | None
    """how many"""
    unit_amount: int | None
    """the price's unit amount, in the currency's smallest unit; null for a price without one (tiered,
    customer-chosen)"""
    amount_total: jobs.Amount
    """the line's total after discounts and taxes, in the currency's smallest unit"""
    currency: jobs.Currency
    """ISO currency code, lower case"""
    price_metadata: dict[str, str]
    """the price's metadata"""
    product_metadata: dict[str, str]
    """the product's metadata"""


class TooManyLineItems(stripe_api.ApiFailed):
    """The session's line items run past MAX_PAGES pages."""


def item(line: Json) -> dict[str, Any]:
    """One line item as `order.fulfilled` carries it (docs/schemas/order.fulfilled.json)."""
    price: Json = _expanded(line.get("price"))
    product: Json = _expanded(price.get("product"))
    return {
        "id": line.get("id"),
        "price_id": price.get("id"),
        "product_id": product.get("id"),
        "product_name": product.get("name") or line.get("description"),
        "quantity": line.get("quantity"),
        "unit_amount": price.get("unit_amount"),
        "amount_total": line.get("amount_total"),
        "currency": line.get("currency") or price.get("currency"),
        "price_metadata": price.get("metadata") or {},
        "product_metadata": product.get("metadata") or {},
    }


def _expanded(field: Any) -> Json:
    """An expandable field as an object: itself when expanded, else its id alone."""
    return field if isinstance(field, dict) else {"id": field}


def read_all(
    api: stripe.StripeClient, session_id: str, first: Json | None, account: str | None
) -> list[Json]:
    """Every line item: the expanded first page `first` (None: not read yet), then the rest by page."""
    return [item(line) for line in _lines(api, session_id, first, account)]


def _lines(
    api: stripe.StripeClient, session_id: str, page: Json | None, account: str | None
) -> Iterator[Json]:
    path = f"{SESSIONS}{session_id}/line_items"
    after = None
    for _ in range(MAX_PAGES):
        if page is None:
            params: dict[str, Any] = {"limit": stripe_api.PAGE_SIZE, "expand": PAGE_EXPAND}
            if after:
                params["starting_after"] = after
            page = stripe_api.get(api, path, account=account, **params)
        data = page.get("data") or []
        yield from data
        if not page.get("has_more") or not data:
            return
        after, page = data[-1]["id"], None
    raise TooManyLineItems(f"GET {path}: more than {MAX_PAGES} pages of line items")


def stored(conn: psycopg.Connection, session_id: str, account: str | None) -> list[Json] | None:
    row = conn.execute(_STORED, {"session": session_id, "account": account or ""}).fetchone()
    return None if row is None else list(row[0])


def store(conn: psycopg.Connection, session_id: str, account: str | None, items: list[Json]) -> None:
    """Keep `items` for the session; the first store wins (Stripe's line items of a session do not change)."""
    params = {"session": session_id, "account": account or "", "items": json.dumps(db.storable(items))}
    conn.execute(_STORE, params)


@functools.lru_cache(maxsize=1)
def _client(settings: Settings) -> stripe.StripeClient:
    return stripe_api.client(settings)


def complete(service: jobs.Service, payload: bytes) -> bytes:
    """An `order.fulfilled` job with its session's line items, read once from Stripe and stored.

    Run by the worker before it POSTs the job, outside any transaction. A job
    without a session (an order by the PaymentIntent's marker), one that has
    them, or any job while STRIPE_API_KEY is unset, goes out as it is. A
    failed read raises JobFailed: the job is retried with the outbox's backoff.
    """
    job = json.loads(payload)
    session_id, account = job.get("session_id"), job.get("account")
    if not session_id or "line_items" in job or not service.settings.stripe_api_key:
        return payload
    pool = service.pool.get()
    with db.connection(pool) as conn:
        items = stored(conn, session_id, account)
    if items is None:
        try:
            items = read_all(_client(service.settings), session_id, None, account)
        except stripe_api.ApiFailed as exc:
            raise jobs.JobFailed(f"line items of {session_id}: {exc}") from exc
        with db.connection(pool) as conn:
            store(conn, session_id, account, items)
            items = stored(conn, session_id, account)
    return json.dumps({**job, "line_items": items}, separators=(",", ":")).encode()
