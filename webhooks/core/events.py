"""Turning a verified raw body into the few fields the ledger needs.

Plain `json.loads` rather than `stripe.Webhook.construct_event`: we need a
dict for fulfilment and the raw text for the ledger, not StripeObjects, and
that function refuses thin (API v2) events, which we still have to claim.
Thin events are checked with the library's own notification parser.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import stripe

from .outcomes import IGNORED_OTHER_MODE


class InvalidEvent(Exception):
    """The body is not a Stripe event we can claim; the reason is safe to show."""

    error = "invalid_event"


class LivemodeMismatch(InvalidEvent):
    """A live event at a test-mode service, or the reverse."""

    error = "livemode_mismatch"


class UnsupportedApiVersion(Exception):
    """A snapshot rendered in an API version whose shapes the handlers do not know.

    Not an InvalidEvent: the event is fine, this service is not ready for it,
    so it is answered 500 (Stripe retries) rather than 400.
    """

    error = "unsupported_api_version"


# Stripe ids are short ASCII tokens; anything else (a NUL, a megabyte) is
# refused here so it never reaches SQL.
STRIPE = "stripe"  # the provider name in URLs, the ledger and the registry
_ID = re.compile(r"[A-Za-z0-9_\-.:]{1,255}")
_TYPE = re.compile(r"[A-Za-z0-9_.\-]{1,255}")
THIN = "v2.core.event"
_EVENT_OBJECTS = ("event", THIN)
# Only builds notification objects; never used to call the API, so no key.
_NOTIFICATIONS = stripe.StripeClient("")


@dataclass(frozen=True)
class Event:
    id: str
    type: str
    created: datetime | None
    livemode: bool | None
    account: str | None
    raw: str
    data: dict[str, Any]
    # The version the snapshot's object was rendered in (None for thin events).
    api_version: str | None = None

    @property
    def object(self) -> dict[str, Any]:
        """`data.object` of a snapshot event ({} for a thin event)."""
        return _data_object(self.data) or {}

    @property
    def account_key(self) -> str:
        """The Connect account that scopes this event's keys; '' for the platform."""
        return self.account or ""

    @property
    def thin(self) -> bool:
        """An API v2 notification: ids only, the object itself is not in the body."""
        return self.data.get("object") == THIN


def require_token(value: Any, pattern: re.Pattern, what: str) -> str:
    """`value` if it is a string `pattern` matches whole; InvalidEvent naming `what` otherwise."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidEvent(f"event has no valid {what}")
    return value


def require_id(value: Any, what: str) -> str:
    """`value` if it is a usable Stripe id; InvalidEvent naming `what` otherwise."""
    return require_token(value, _ID, what)


def id_of(value: Any) -> Any:
    """An id field that may also arrive expanded into its object."""
    return value.get("id") if isinstance(value, dict) else value


def parse(raw: str) -> Event:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise InvalidEvent("body is not JSON") from None
    if not isinstance(data, dict) or data.get("object") not in _EVENT_OBJECTS:
        raise InvalidEvent("body is not a Stripe event object")
    if data["object"] == "event" and _data_object(data) is None:
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


def _data_object(data: dict[str, Any]) -> dict[str, Any] | None:
    payload = data.get("data")
    obj = payload.get("object") if isinstance(payload, dict) else None
    return obj if isinstance(obj, dict) else None


def timestamp(value: Any) -> datetime | None:
    """A Stripe time: Unix seconds in snapshot events and objects, ISO-8601 in thin events."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**37:
        return datetime.fromtimestamp(value, tz=timezone.utc)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def _require_notification(raw: str) -> None:
    """The stripe library can read this thin event (the shape its users rely on)."""
    try:
        _NOTIFICATIONS.parse_event_notification_without_verification(raw)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise InvalidEvent("thin event is missing fields a notification needs") from None


def require_created(event: Event) -> datetime:
    """When Stripe created the event: what orders two updates of one object."""
    if event.created is None:
        raise InvalidEvent("event has no valid created time")
    return event.created


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
    if event.thin:
        return
    version = event.api_version
    if version is None or not supported[0] <= version[:10] <= supported[1]:
        raise UnsupportedApiVersion(
            f"api_version {version or 'missing'} is outside {supported[0]}..{supported[1]}"
        )
