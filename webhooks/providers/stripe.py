"""Stripe as a provider: its wire format, from the signed bytes to the Event, and its mode.

`Stripe-Signature` is checked with the stripe library's HMAC and
constant-time comparison; this module only closes the gaps measured in it:
it accepts timestamps from the future, raises TypeError on a non-ASCII
signature and UnicodeDecodeError on a body that is not UTF-8, and takes one
secret where we rotate several.

The body is read with plain `json.loads` rather than
`stripe.Webhook.construct_event`: we need a dict for fulfilment and the raw
text for the ledger, not StripeObjects, and that function refuses thin
(API v2) events, which we still have to claim. Thin events are checked with
the library's own notification parser.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import stripe

from webhooks.core.events import (
    Event,
    InvalidEvent,
    InvalidSignature,
    Unprocessable,
    data_object,
    require_id,
    require_token,
    timestamp,
)
from webhooks.infra.config import Settings

from .base import Headers, Outgoing, Provider

NAME = "stripe"  # in URLs, the ledger and the registry
# Every event type Stripe's spec lists, snapshot and thin (.ci/stripe-event-types writes it).
EVENT_TYPES = frozenset(
    line
    for line in (Path(__file__).with_name("stripe_event_types.txt")).read_text().splitlines()
    if line and not line.startswith("#")
)
# The outcome of a connected account's event of the other Stripe mode (mode_outcome).
IGNORED_OTHER_MODE = "ignored_other_mode"
SIGNATURE = "Stripe-Signature"
# The headers Stripe's servers (and the Stripe CLI's `listen --forward-to`)
# set on a delivery, besides its signature: the ones a handler can see.
HEADERS = {
    "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
    "Content-Type": "application/json; charset=utf-8",
    "Accept": "*/*; q=0.5, application/xml",
    "Cache-Control": "no-cache",
}
_MAX_HEADER_CHARS = 4096
_TYPE = re.compile(r"[A-Za-z0-9_.\-]{1,255}")
THIN = "v2.core.event"
_EVENT_OBJECTS = ("event", THIN)
# Only builds notification objects; never used to call the API, so no key.
_NOTIFICATIONS = stripe.StripeClient("")


class LivemodeMismatch(InvalidEvent):
    """A live event at a test-mode service, or the reverse."""

    error = "livemode_mismatch"


class UnsupportedApiVersion(Unprocessable):
    """A snapshot rendered in an API version whose shapes the handlers do not know.

    Not an InvalidEvent: the event is fine, this service is not ready for it,
    so it is answered 500 (Stripe retries) rather than 400.
    """

    error = "unsupported_api_version"


# --- Stripe-Signature -------------------------------------------------------


def _values(header: str, key: str) -> list[str]:
    return [
        value for name, _, value in (item.partition("=") for item in header.split(",")) if name.strip() == key
    ]


def _timestamp(header: str) -> int:
    """The header's one timestamp.

    Stripe sends exactly one `t=`. With several, the library verifies the
    first while anything else reading the header (a proxy, a later library
    version) may take another; refusing the ambiguity leaves no such gap.
    """
    stamps = _values(header, "t")
    if len(stamps) != 1:
        raise InvalidSignature("Stripe-Signature must carry exactly one timestamp")
    try:
        return int(stamps[0])
    except ValueError:
        raise InvalidSignature("malformed timestamp in Stripe-Signature") from None


def verify(
    body: bytes,
    header: str | None,
    secrets: Iterable[str],
    tolerance_s: int,
    now: float | None = None,
) -> str:
    """The body as text if any secret signs it; InvalidSignature otherwise.

    The sender is told only `invalid_signature`; the reason, logged, says which
    check failed: a malformed header, no signature from a configured secret
    (another endpoint's secret, a key pasted for one), or a stale timestamp
    (a replay, a clock that is off). The library folds the last two together,
    so the signature is checked without its tolerance and the age after.
    """
    if not header:
        raise InvalidSignature("missing Stripe-Signature header")
    if len(header) > _MAX_HEADER_CHARS:
        raise InvalidSignature("Stripe-Signature header too long")
    secrets = [s for s in secrets if s]
    if not secrets:
        raise InvalidSignature("no webhook secret configured")
    timestamp = _timestamp(header)
    if not _values(header, stripe.WebhookSignature.EXPECTED_SCHEME):
        raise InvalidSignature("Stripe-Signature has no v1 signature")
    try:
        payload = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSignature("body is not UTF-8") from None
    if not any(_signed_by(payload, header, s) for s in secrets):
        raise InvalidSignature("no v1 signature in Stripe-Signature is from a configured secret")
    now = time.time() if now is None else now
    if timestamp < now - tolerance_s:
        raise InvalidSignature(f"signed more than {tolerance_s} s ago: a replay, or a clock that is off")
    if timestamp > now + tolerance_s:
        raise InvalidSignature("timestamp is in the future")
    return payload


def _signed_by(payload: str, header: str, secret: str) -> bool:
    """The HMAC alone (the library's constant-time comparison); the age is checked apart."""
    try:
        return bool(stripe.WebhookSignature.verify_header(payload, header, secret, tolerance=None))
    except (stripe.SignatureVerificationError, TypeError, ValueError):
        return False


def sign(body: bytes, secret: str, timestamp: int | None = None) -> str:
    """A Stripe-Signature header value exactly as Stripe would send it."""
    return str(stripe.WebhookSignature.generate_signature_header(body.decode("utf-8"), secret, timestamp))


# --- the event --------------------------------------------------------------


def parse(raw: str) -> Event:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise InvalidEvent("body is not JSON") from None
    if not isinstance(data, dict) or data.get("object") not in _EVENT_OBJECTS:
        raise InvalidEvent("body is not a Stripe event object")
    if data["object"] == "event" and data_object(data) is None:
        # Every snapshot event carries its object; a handler must not crash on one that does not.
        raise InvalidEvent("event has no data.object")
    event_id = require_id(data.get("id"), "id")
    event_type = require_token(data.get("type"), _TYPE, "type")
    # Connect: snapshot events name the connected account in "account", thin ones in "context".
    account = data.get("account") or data.get("context")
    if account is not None:
        account = require_id(account, "account")
    if data["object"] == THIN:
        _require_notification(raw)
    livemode = data.get("livemode")
    return Event(
        id=event_id,
        type=event_type,
        created=timestamp(data.get("created")),
        livemode=livemode if isinstance(livemode, bool) else None,
        account=account,
        raw=raw,
        data=data,
        api_version=data.get("api_version") if isinstance(data.get("api_version"), str) else None,
    )


def _require_notification(raw: str) -> None:
    """The stripe library can read this thin event (the shape its users rely on)."""
    try:
        _NOTIFICATIONS.parse_event_notification_without_verification(raw)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise InvalidEvent("thin event is missing fields a notification needs") from None


def thin(event: Event) -> bool:
    """An API v2 notification: ids only, the object itself is not in the body."""
    return event.data.get("object") == THIN


def mode_outcome(event: Event, mode: str) -> str | None:
    """None for an event of the service's mode; the outcome word for one to skip.

    Stripe sends the test events of accounts connected in live mode to the
    live Connect endpoint, and says to check `livemode`: a connected
    account's event of the other mode is claimed and skipped (a 400 would be
    retried for days and get the endpoint disabled). The platform's own
    event of the other mode means a misconfigured secret or URL: refused.
    """
    if event.livemode is (mode == "live"):
        return None
    if event.account is not None and event.livemode is not None:
        return IGNORED_OTHER_MODE
    stated = "missing" if event.livemode is None else str(event.livemode).lower()
    raise LivemodeMismatch(f"event livemode is {stated}, service runs in {mode} mode")


def require_api_version(event: Event, supported: tuple[str, str]) -> None:
    """The snapshot's API version lies in the inclusive date range `supported`.

    Versions are compared by their date ("2025-03-31.basil" -> 2025-03-31),
    which is how Stripe orders them.
    """
    if thin(event):
        return
    version = event.api_version
    if version is None or not supported[0] <= version[:10] <= supported[1]:
        raise UnsupportedApiVersion(
            f"api_version {version or 'missing'} is outside {supported[0]}..{supported[1]}"
        )


# --- the provider -----------------------------------------------------------


def _verify(body: bytes, headers: Headers, secrets: Sequence[str], tolerance_s: int) -> str:
    return verify(body, headers.get(SIGNATURE), secrets, tolerance_s)


def _sign(body: bytes, secret: str, outgoing: Outgoing) -> dict[str, str]:
    return {**HEADERS, SIGNATURE: sign(body, secret, outgoing.timestamp)}


def _admit(event: Event, settings: Settings) -> str | None:
    # Checked once, at admission: a mode mismatch is refused before any
    # database work, and a connected account's event of the other mode is
    # settled without running a handler.
    return mode_outcome(event, settings.stripe_mode)


PROVIDER = Provider(
    name=NAME,
    secret_setting="STRIPE_WEBHOOK_SECRET",
    secrets=lambda settings: settings.webhook_secrets,
    verify=_verify,
    parse=lambda text, headers: parse(text),
    sign=_sign,
    admit=_admit,
    # The service exists for Stripe's payments.
    required=True,
)
