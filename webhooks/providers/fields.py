"""What every non-Stripe provider reads the same way: a JSON object body, an id, a type.

Ids and types come from headers or bodies the sender controls the shape
of; each is checked (short ASCII) before it can reach SQL, as Stripe's are.
"""

from __future__ import annotations

import json
import re
from typing import Any

from webhooks.core.events import InvalidEvent, InvalidSignature, require_id, require_token

from .base import Headers

# A sender's event type or account name: short ASCII, slashes allowed
# (GitHub's `owner/name`, Shopify's `orders/paid`).
TOKEN = re.compile(r"[A-Za-z0-9_.\-/]{1,255}")


def json_object(text: str) -> dict[str, Any]:
    """The body as a JSON object; InvalidEvent for anything else (arrays, text, deep nesting)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise InvalidEvent("body is not JSON") from None
    if not isinstance(data, dict):
        raise InvalidEvent("body is not a JSON object")
    return data


def header_id(headers: Headers, name: str) -> str:
    """The delivery's dedupe id from header `name`, validated like a Stripe id."""
    return require_id(headers.get(name), name)


def event_type(value: Any, what: str) -> str:
    return require_token(value, TOKEN, what)


def utf8(body: bytes) -> str:
    """The raw body as the text the ledger stores; a signature check needs it as bytes first."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSignature("body is not UTF-8") from None
