"""Standard Webhooks (standardwebhooks.com): Svix and the senders that follow its spec.

`webhook-signature` carries one or more space-separated `v1,<base64>`
HMAC-SHA256 signatures of `{webhook-id}.{webhook-timestamp}.{body}` under a
`whsec_<base64>` secret; the spec library checks them. Around it, this
module closes what the library leaves open (measured on 1.1.0): its
tolerance is a fixed 5 minutes, it reads the timestamp as a float (so
`1e9` or `1700000000.9` pass, and the signed text is rebuilt from the
float rather than the header), and one signature item without exactly one
comma, or not base64, raises ValueError and so hides a valid one after it.
"""

from __future__ import annotations

import binascii
import re
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import standardwebhooks

from webhooks.core.events import Event, InvalidSignature, timestamp

from .base import Headers, Outgoing, Provider
from .fields import event_type, header_id, json_object, utf8

NAME = "standard"
ID, TIMESTAMP, SIGNATURE = "webhook-id", "webhook-timestamp", "webhook-signature"
_SECONDS = re.compile(r"\d{1,12}")
# One `version,base64` item; the spec allows several, and other versions later.
_ITEM = re.compile(r"v\d+,[A-Za-z0-9+/]+={0,2}")
_MAX_HEADER_CHARS = 4096


def _webhook(secret: str) -> standardwebhooks.Webhook | None:
    try:
        return standardwebhooks.Webhook(secret)
    except (binascii.Error, ValueError, standardwebhooks.webhooks.EmptyWebhookSecretError):
        return None  # not a whsec_<base64> secret: signs nothing


def _signed_at(headers: Headers, tolerance_s: int, now: float | None = None) -> str:
    stamp = headers.get(TIMESTAMP) or ""
    if not _SECONDS.fullmatch(stamp):
        raise InvalidSignature("missing or malformed webhook-timestamp")
    now = time.time() if now is None else now
    if int(stamp) < now - tolerance_s:
        raise InvalidSignature("webhook-timestamp is too old")
    if int(stamp) > now + tolerance_s:
        raise InvalidSignature("webhook-timestamp is in the future")
    return stamp


def verify(body: bytes, headers: Headers, secrets: Sequence[str], tolerance_s: int) -> str:
    signatures = headers.get(SIGNATURE) or ""
    if not headers.get(ID) or not signatures:
        raise InvalidSignature("missing webhook-id or webhook-signature")
    if len(signatures) > _MAX_HEADER_CHARS:
        raise InvalidSignature("webhook-signature header too long")
    # Ours first, so the setting (not the library's fixed 5 minutes) decides,
    # in both directions; the library's window still applies within it.
    stamp = _signed_at(headers, tolerance_s)
    text = utf8(body)
    # Only well-formed items reach the library, so a malformed one is skipped, not fatal.
    items = " ".join(item for item in signatures.split(" ") if _ITEM.fullmatch(item))
    sent = {ID: headers[ID], TIMESTAMP: stamp, SIGNATURE: items}
    webhooks = [webhook for webhook in map(_webhook, secrets) if webhook]
    if not webhooks:
        # Said in the delivery log's detail: the setting, not the sender, is wrong.
        raise InvalidSignature("no configured secret is a whsec_<base64> secret")
    for webhook in webhooks:
        try:
            webhook.verify(text, sent, json_parse=False)
            return text
        except (standardwebhooks.WebhookVerificationError, ValueError):
            continue
    raise InvalidSignature("no valid signature for this body, id and timestamp")


def parse(text: str, headers: Headers) -> Event:
    """The spec's payload: `type`, `timestamp` (ISO 8601) and `data`; the id is the header's."""
    data = json_object(text)
    return Event(
        id=header_id(headers, ID),
        type=event_type(data.get("type"), "type"),
        created=timestamp(data.get("timestamp")),
        livemode=None,
        account=None,
        raw=text,
        data=data,
    )


def sign(body: bytes, secret: str, outgoing: Outgoing) -> dict[str, str]:
    """The headers a Standard Webhooks sender sets, signed by the spec library."""
    at = int(time.time()) if outgoing.timestamp is None else outgoing.timestamp
    moment = datetime.fromtimestamp(at, tz=UTC)
    value = standardwebhooks.Webhook(secret).sign(outgoing.event_id, moment, body.decode("utf-8"))
    return {ID: outgoing.event_id, TIMESTAMP: str(at), SIGNATURE: value}


PROVIDER = Provider(
    name=NAME,
    secret_setting="STANDARD_WEBHOOKS_SECRET",
    secrets=lambda settings: settings.standard_webhooks_secrets,
    verify=verify,
    parse=parse,
    sign=sign,
)
