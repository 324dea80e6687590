"""A customer's or a shop's data in stored Shopify payloads: finding it and redacting it.

Stored payloads are the ledger's (`webhook_payloads`, by the shop its ledger
row came with) and the failed attempts' (`webhook_failures.payload`,
which record no shop, so they are matched by the customer's and orders'
ids, which Shopify makes unique across shops). A payload names a customer
when its `customer` object has their id or email, its `email` or
`contact_email` is theirs, or it is about one of their orders (an order
topic's `id`, a refund's `order_id`). Redacting replaces the value of every
key in PERSONAL_FIELDS, at any depth, with "[redacted]"; order ids, line
items, amounts and the rest stay, so the ledger still says what happened.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg

from webhooks.core.events import Json
from webhooks.core.redaction import redact_value

# Where Shopify's order, refund, customer and compliance payloads carry a person.
PERSONAL_FIELDS = frozenset(
    {
        "customer",
        "email",
        "contact_email",
        "phone",
        "first_name",
        "last_name",
        "billing_address",
        "shipping_address",
        "default_address",
        "addresses",
        "address1",
        "address2",
        "zip",
        "latitude",
        "longitude",
        "browser_ip",
        "client_details",
        "note",
        "note_attributes",
        "customer_locale",
    }
)

Match = Callable[[str, Json], bool]

_SOURCES = {
    "webhook_events": """
        SELECT p.ledger_id, e.event_id, e.event_type, p.payload
        FROM webhook_events e
        JOIN webhook_payloads p ON p.ledger_id = e.id AND p.received_at = e.received_at
        WHERE e.provider = 'shopify' AND e.account = %s ORDER BY e.id FOR UPDATE OF p""",
    "webhook_failures": """
        SELECT id, event_id, event_type, payload FROM webhook_failures
        WHERE provider = 'shopify' AND payload IS NOT NULL ORDER BY id FOR UPDATE""",
}
_REWRITE = {
    "webhook_events": "UPDATE webhook_payloads SET payload = %s WHERE ledger_id = %s",
    "webhook_failures": "UPDATE webhook_failures SET payload = %s WHERE id = %s",
}


def order_of(topic: str, data: Json) -> object:
    """The order a payload is about: an order topic's `id`, any other's `order_id`."""
    return data.get("id") if topic.startswith("orders/") else data.get("order_id")


@dataclass(frozen=True)
class Customer:
    """Whom a compliance request is about."""

    id: int | None
    email: str | None
    orders: frozenset[int]

    def named_in(self, topic: str, data: Json) -> bool:
        customer = data.get("customer")
        if isinstance(customer, dict) and (
            (self.id is not None and customer.get("id") == self.id) or self._is_email(customer.get("email"))
        ):
            return True
        if self._is_email(data.get("email")) or self._is_email(data.get("contact_email")):
            return True
        return order_of(topic, data) in self.orders

    def _is_email(self, value: object) -> bool:
        if not self.email or not isinstance(value, str):
            return False
        return value.lower() == self.email.lower()


def _rows(conn: psycopg.Connection, table: str, shop: str) -> Iterator[tuple[int, str, str, Json]]:
    params = [shop] if table == "webhook_events" else []
    for row_id, event_id, topic, payload in conn.execute(_SOURCES[table], params):
        try:
            data = json.loads(payload)
        except ValueError:
            continue  # never stored for Shopify (bodies are verified JSON objects); nothing to find
        if isinstance(data, dict):
            yield row_id, event_id, topic or "", data


def naming(conn: psycopg.Connection, shop: str, match: Match) -> list[str]:
    """Ids of the shop's completed or in-flight events whose payload `match` picks."""
    return [
        event_id for _, event_id, topic, data in _rows(conn, "webhook_events", shop) if match(topic, data)
    ]


def redact(conn: psycopg.Connection, shop: str, events: Match, failures: Match) -> int:
    """Redact the shop's event payloads `events` picks and the failures' `failures` picks.

    Rows are locked (FOR UPDATE), so `prune`'s own redaction, which skips
    locked rows, cannot write back a copy read before this one.
    Returns how many payloads changed.
    """
    changed = 0
    for table, match in (("webhook_events", events), ("webhook_failures", failures)):
        updates = [
            (json.dumps(redacted), row_id)
            for row_id, _, topic, data in list(_rows(conn, table, shop))
            if match(topic, data) and (redacted := redact_value(data, PERSONAL_FIELDS)) != data
        ]
        conn.cursor().executemany(_REWRITE[table], updates)
        changed += len(updates)
    return changed
