"""Shopify as a provider: an HMAC of the raw body, the event named by headers.

Shopify signs the raw body alone (`X-Shopify-Hmac-Sha256`: base64 of
HMAC-SHA256 with the app's client secret) and sends no signed timestamp.
The HMAC proves that Shopify (or whoever holds the app's secret) wrote the
body, once. It proves nothing of the headers: not when, not for which shop
(the secret is the app's, shared by every shop that installed it), not
under which topic or event id. A captured delivery replayed with new
headers verifies. So:

- the claim on `X-Shopify-Event-Id` (the duplicate signal Shopify's docs
  name) stops Shopify's own redeliveries; a replay under a new id gets past
  it, and only keys taken from the signed body stop its effects: an order
  ships once per order id, a refund is recorded once per refund id (both
  global at Shopify), a compliance request is acted on once per body;
- the topic must agree with the body (TOPIC_AGREES): a body of one topic
  sent under another is refused, 400, before anything is written;
- a compliance request must name in its body the shop its header names;
  an order's or refund's body names no shop, so the shop first seen with an
  order stays its shop (webhooks/domains/shopify/orders.py).

`X-Shopify-Webhook-Id` differs per subscription and delivery, so it is not
the key: one event sent to two subscriptions is still one event (a delivery
that comes without an event id is the exception: see WEBHOOK_ID_HEADER).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from webhooks.core.events import Event, InvalidEvent, InvalidSignature, Json

from . import fields
from .base import Headers, Outgoing, Provider

NAME = "shopify"
API_VERSION = "2026-01"
HMAC_HEADER = "X-Shopify-Hmac-Sha256"
EVENT_ID_HEADER = "X-Shopify-Event-Id"
TOPIC_HEADER = "X-Shopify-Topic"
SHOP_HEADER = "X-Shopify-Shop-Domain"
TRIGGERED_AT_HEADER = "X-Shopify-Triggered-At"
WEBHOOK_ID_HEADER = "X-Shopify-Webhook-Id"
# Deliveries were reported without X-Shopify-Event-Id (compliance ones, in
# shopify-api-ruby#1261, and others), and compliance ones without
# X-Shopify-Shop-Domain too. Refusing them has Shopify retry for ever, then
# drop the subscription; for a compliance topic it also fails the app's
# review and leaves a redaction undone. So X-Shopify-Webhook-Id, the id
# Shopify's "Verify webhook deliveries" page names for spotting a retry,
# stands in for a missing event id, and a compliance body's `shop_domain`
# for a missing shop. Should one event then come twice under two webhook
# ids, no effect doubles: every Shopify effect has its own key (an order's
# fulfilment, a refund, a data request's job), and a second redaction finds
# nothing left to redact.
COMPLIANCE_TOPICS = frozenset({"customers/data_request", "customers/redact", "shop/redact"})

_TOPIC = re.compile(r"[a-z0-9_]{1,100}(/[a-z0-9_]{1,100}){1,3}")
# The shop's permanent myshopify.com domain, never a custom one.
_SHOP = re.compile(r"[a-z0-9][a-z0-9\-]{0,99}\.myshopify\.com")
# A base64 SHA-256 digest is 44 characters; anything much longer is not one.
_MAX_HMAC_CHARS = 128


def digest(body: bytes, secret: str) -> str:
    """The `X-Shopify-Hmac-Sha256` value Shopify sends for `body`."""
    mac = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).digest()
    return base64.b64encode(mac).decode("ascii")


def _verify(body: bytes, headers: Headers, secrets: Sequence[str], tolerance_s: int) -> str:
    """The body as text if any secret signs it (no timestamp: `tolerance_s` has nothing to bound)."""
    sent = headers.get(HMAC_HEADER)
    if not sent:
        raise InvalidSignature(f"missing {HMAC_HEADER} header")
    if len(sent) > _MAX_HMAC_CHARS:
        raise InvalidSignature(f"{HMAC_HEADER} header too long")
    # Bytes, so a non-ASCII header compares unequal instead of raising TypeError.
    sent_bytes = sent.encode("utf-8", "surrogateescape")
    if not any(hmac.compare_digest(digest(body, s).encode("ascii"), sent_bytes) for s in secrets if s):
        raise InvalidSignature("no configured secret signs this body")
    return fields.utf8(body)


def _header(headers: Headers, name: str, pattern: re.Pattern[str]) -> str:
    value = headers.get(name)
    if value is None or not pattern.fullmatch(value):
        raise InvalidEvent(f"missing or invalid {name} header")
    return value


def _identity(headers: Headers, topic: str, data: Json) -> tuple[str, str]:
    """The event id and the shop, from their headers or their stand-ins (see WEBHOOK_ID_HEADER)."""
    id_header = EVENT_ID_HEADER if headers.get(EVENT_ID_HEADER) is not None else WEBHOOK_ID_HEADER
    event_id = fields.header_id(headers, id_header)
    if topic not in COMPLIANCE_TOPICS or headers.get(SHOP_HEADER) is not None:
        return event_id, _header(headers, SHOP_HEADER, _SHOP)
    shop = data.get("shop_domain")
    if not isinstance(shop, str) or not _SHOP.fullmatch(shop):
        raise InvalidEvent(f"missing or invalid {SHOP_HEADER} header and body shop_domain")
    return event_id, shop


def _text(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _names_shop(data: Json, shop: str) -> bool:
    return data.get("shop_domain") == shop and isinstance(data.get("shop_id"), int)


def _customer_request(data: Json, shop: str) -> bool:
    return _names_shop(data, shop) and isinstance(data.get("customer"), dict)


# What the signed body of each acted-on topic says, so that the unsigned
# X-Shopify-Topic is believed only when the body agrees (payloads of
# Shopify's webhooks reference, https://shopify.dev/docs/api/webhooks): a paid
# order is `financial_status: paid`; a cancelled one has `cancelled_at`; a
# refund names its `order_id` and, unlike an order, has no financial status;
# the compliance requests name the shop (`shop_domain`, `shop_id`), the
# customers' a customer, and only a data request has `data_request`.
TOPIC_AGREES: dict[str, Callable[[Json, str], bool]] = {
    "orders/paid": lambda data, shop: data.get("financial_status") == "paid",
    "orders/cancelled": lambda data, shop: _text(data.get("cancelled_at")),
    "refunds/create": lambda data, shop: "order_id" in data and "financial_status" not in data,
    "customers/data_request": lambda data, shop: (
        _customer_request(data, shop) and isinstance(data.get("data_request"), dict)
    ),
    "customers/redact": lambda data, shop: (
        _customer_request(data, shop)
        and isinstance(data.get("orders_to_redact"), list)
        and "data_request" not in data
    ),
    "shop/redact": lambda data, shop: _names_shop(data, shop) and "customer" not in data,
}


def _agrees(topic: str, data: Json, shop: str) -> None:
    agrees = TOPIC_AGREES.get(topic)
    if agrees is not None and not agrees(data, shop):
        raise InvalidEvent(f"body does not agree with its {TOPIC_HEADER} {topic}")


def _triggered_at(value: str | None) -> datetime | None:
    """Shopify's ISO time, with nanoseconds that Python cannot parse cut to microseconds."""
    if not value:
        return None
    value = re.sub(r"(\.\d{6})\d+", r"\1", value.replace("Z", "+00:00"))
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _parse(text: str, headers: Headers) -> Event:
    topic = _header(headers, TOPIC_HEADER, _TOPIC)
    data = fields.json_object(text)
    event_id, shop = _identity(headers, topic, data)
    _agrees(topic, data, shop)
    return Event(
        id=event_id,
        type=topic,
        created=_triggered_at(headers.get(TRIGGERED_AT_HEADER)),
        livemode=None,
        account=shop,
        raw=text,
        data=data,
    )


def _sign(body: bytes, secret: str, outgoing: Outgoing) -> dict[str, str]:
    """The headers Shopify sends with a delivery."""
    when = datetime.fromtimestamp(outgoing.timestamp, UTC) if outgoing.timestamp else datetime.now(UTC)
    return {
        "Content-Type": "application/json",
        HMAC_HEADER: digest(body, secret),
        TOPIC_HEADER: outgoing.event_type,
        SHOP_HEADER: outgoing.account or "",
        EVENT_ID_HEADER: outgoing.event_id,
        WEBHOOK_ID_HEADER: outgoing.delivery_id or str(uuid.uuid4()),
        TRIGGERED_AT_HEADER: when.isoformat().replace("+00:00", "Z"),
        "X-Shopify-API-Version": API_VERSION,
    }


PROVIDER = Provider(
    name=NAME,
    secret_setting="SHOPIFY_WEBHOOK_SECRET",
    secrets=lambda settings: settings.shopify_webhook_secrets,
    verify=_verify,
    parse=_parse,
    sign=_sign,
    # Shopify's app review sends compliance webhooks with a bad HMAC and
    # rejects an app that does not answer them 401 Unauthorized.
    invalid_signature_status=401,
)
