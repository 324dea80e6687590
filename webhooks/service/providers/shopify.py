"""Shopify as a provider: an HMAC of the raw body, the event named by headers.

Shopify signs the raw body alone (`X-Shopify-Hmac-Sha256`: base64 of
HMAC-SHA256 with the app's client secret) and sends no signed timestamp, so
a captured delivery verifies for ever: replay protection is the ledger's
claim on `X-Shopify-Event-Id`, which Shopify's docs name as the duplicate
signal. `X-Shopify-Webhook-Id` differs per subscription and delivery, so it
is not the key: one event sent to two subscriptions is still one event
(a delivery that comes without an event id is the exception: see
WEBHOOK_ID_HEADER).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
import uuid
from datetime import datetime, timezone

from ..events import Event, InvalidEvent
from ..signature import InvalidSignature
from . import Headers, Outgoing, Provider, fields, register

SHOPIFY = "shopify"
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


def _verify(body: bytes, headers: Headers, secrets, tolerance_s: int) -> str:
    """The body as text if any secret signs it (no timestamp: `tolerance_s` has nothing to bound)."""
    sent = headers.get(HMAC_HEADER)
    if not sent:
        raise InvalidSignature(f"missing {HMAC_HEADER} header")
    if len(sent) > _MAX_HMAC_CHARS:
        raise InvalidSignature(f"{HMAC_HEADER} header too long")
    # Bytes, so a non-ASCII header compares unequal instead of raising TypeError.
    sent_bytes = sent.encode("utf-8", "surrogateescape")
    if not any(hmac.compare_digest(digest(body, s).encode("ascii"), sent_bytes)
               for s in secrets if s):
        raise InvalidSignature("no configured secret signs this body")
    return fields.utf8(body)


def _header(headers: Headers, name: str, pattern: re.Pattern) -> str:
    value = headers.get(name)
    if value is None or not pattern.fullmatch(value):
        raise InvalidEvent(f"missing or invalid {name} header")
    return value


def _identity(headers: Headers, topic: str, data: dict) -> tuple[str, str]:
    """The event id and the shop, from their headers or their stand-ins (see WEBHOOK_ID_HEADER)."""
    id_header = EVENT_ID_HEADER if headers.get(EVENT_ID_HEADER) is not None else WEBHOOK_ID_HEADER
    event_id = fields.header_id(headers, id_header)
    if topic not in COMPLIANCE_TOPICS or headers.get(SHOP_HEADER) is not None:
        return event_id, _header(headers, SHOP_HEADER, _SHOP)
    shop = data.get("shop_domain")
    if not isinstance(shop, str) or not _SHOP.fullmatch(shop):
        raise InvalidEvent(f"missing or invalid {SHOP_HEADER} header and body shop_domain")
    return event_id, shop


def _triggered_at(value: str | None) -> datetime | None:
    """Shopify's ISO time, with nanoseconds that Python cannot parse cut to microseconds."""
    if not value:
        return None
    value = re.sub(r"(\.\d{6})\d+", r"\1", value.replace("Z", "+00:00"))
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _parse(text: str, headers: Headers) -> Event:
    topic = _header(headers, TOPIC_HEADER, _TOPIC)
    data = fields.json_object(text)
    event_id, shop = _identity(headers, topic, data)
    return Event(
        id=event_id, type=topic, created=_triggered_at(headers.get(TRIGGERED_AT_HEADER)),
        livemode=None, account=shop, raw=text, data=data,
    )


def _sign(body: bytes, secret: str, outgoing: Outgoing) -> dict[str, str]:
    """The headers Shopify sends with a delivery."""
    when = datetime.fromtimestamp(outgoing.timestamp, timezone.utc) if outgoing.timestamp \
        else datetime.now(timezone.utc)
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


PROVIDER = register(Provider(
    name=SHOPIFY,
    secret_setting="SHOPIFY_WEBHOOK_SECRET",
    secrets=lambda settings: settings.shopify_webhook_secrets,
    verify=_verify,
    parse=_parse,
    sign=_sign,
    # Shopify's app review sends compliance webhooks with a bad HMAC and
    # rejects an app that does not answer them 401 Unauthorized.
    invalid_signature_status=401,
))
