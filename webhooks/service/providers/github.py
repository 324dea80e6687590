"""GitHub webhooks: `X-Hub-Signature-256`, the delivery GUID, the event name in a header.

GitHub documents only the HMAC (HMAC-SHA256 of the raw body under the
webhook's secret, hex, prefixed `sha256=`), so it is checked here with
`hmac.compare_digest` against each configured secret. GitHub sends no
timestamp: a captured delivery can be re-sent at any time, and only the
ledger's dedupe on `X-GitHub-Delivery` stops it taking effect twice (a
redelivery from GitHub's own UI keeps its GUID, so it is answered from the
ledger). Only `application/json` deliveries are read; a webhook set to
`application/x-www-form-urlencoded` gets 400 `invalid_event`.
"""
from __future__ import annotations

import hashlib
import hmac
import re
from typing import Any, Sequence

from ..events import Event
from ..signature import InvalidSignature
from . import Headers, Outgoing, Provider, register
from .fields import TOKEN, event_type, header_id, json_object, utf8

NAME = "github"
SIGNATURE, DELIVERY, EVENT = "X-Hub-Signature-256", "X-GitHub-Delivery", "X-GitHub-Event"
_HEX = re.compile(r"sha256=([0-9a-f]{64})")


def digest(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def verify(body: bytes, headers: Headers, secrets: Sequence[str], tolerance_s: int) -> str:
    sent = headers.get(SIGNATURE) or ""
    if not _HEX.fullmatch(sent):
        raise InvalidSignature(f"missing or malformed {SIGNATURE}")
    if not any(hmac.compare_digest(digest(body, s), sent) for s in secrets if s):
        raise InvalidSignature("no valid signature for this body")
    return utf8(body)


def account(data: dict[str, Any]) -> str | None:
    """The repository (`owner/name`), else the organization, the delivery is about.

    Both are documented common properties of GitHub's payloads and lie inside
    the signed body; an App's `installation.id` names who installed the app,
    not what the event concerns. None when neither is there (an app's own
    events, a sponsor).
    """
    for key, field in (("repository", "full_name"), ("organization", "login")):
        value = data.get(key)
        name = value.get(field) if isinstance(value, dict) else None
        if isinstance(name, str) and TOKEN.fullmatch(name):
            return name
    return None


def parse(text: str, headers: Headers) -> Event:
    data = json_object(text)
    return Event(
        id=header_id(headers, DELIVERY),
        type=event_type(headers.get(EVENT), EVENT),
        # GitHub payloads have no event time of their own.
        created=None,
        livemode=None,
        account=account(data),
        raw=text,
        data=data,
    )


def sign(body: bytes, secret: str, outgoing: Outgoing) -> dict[str, str]:
    """The headers GitHub sets on a delivery (the old SHA-1 `X-Hub-Signature` left out)."""
    return {
        SIGNATURE: digest(body, secret),
        DELIVERY: outgoing.event_id,
        EVENT: outgoing.event_type,
        "User-Agent": "GitHub-Hookshot/webhooks-replay",
    }


PROVIDER = register(Provider(
    name=NAME,
    secret_setting="GITHUB_WEBHOOK_SECRET",
    secrets=lambda settings: settings.github_webhook_secrets,
    verify=verify,
    parse=parse,
    sign=sign,
))
