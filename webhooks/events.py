"""Turning a verified raw body into the few fields the ledger needs.

Plain `json.loads` rather than `stripe.Webhook.construct_event`: we need a
dict for fulfilment and the raw text for the ledger, not StripeObjects, and
the library refuses thin (API v2) events that we still have to claim.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any


class InvalidEvent(Exception):
    """The body is not a Stripe event we can claim; the reason is safe to show."""

    error = "invalid_event"


class LivemodeMismatch(InvalidEvent):
    """A live event at a test-mode service, or the reverse."""

    error = "livemode_mismatch"


# Stripe ids are short ASCII tokens; anything else (a NUL, a megabyte) is
# refused here so it never reaches SQL.
_ID = re.compile(r"[A-Za-z0-9_\-.:]{1,255}")
_TYPE = re.compile(r"[A-Za-z0-9_.\-]{1,255}")
_EVENT_OBJECTS = ("event", "v2.core.event")


@dataclass(frozen=True)
class Event:
    id: str
    type: str
    created: datetime | None
    livemode: bool | None
    account: str | None
    raw: str
    data: dict[str, Any]

    @property
    def object(self) -> dict[str, Any]:
        """`data.object` of a snapshot event ({} for a thin event)."""
        obj = (self.data.get("data") or {}).get("object")
        return obj if isinstance(obj, dict) else {}

    @property
    def account_key(self) -> str:
        """The Connect account that scopes this event's keys; '' for the platform."""
        return self.account or ""


def require_id(value: Any, what: str) -> str:
    """`value` if it is a usable Stripe id; InvalidEvent naming `what` otherwise."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidEvent(f"event has no valid {what}")
    return value


def parse(raw: str) -> Event:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise InvalidEvent("body is not JSON") from None
    if not isinstance(data, dict) or data.get("object") not in _EVENT_OBJECTS:
        raise InvalidEvent("body is not a Stripe event object")
    event_id = require_id(data.get("id"), "id")
    event_type = data.get("type")
    if not isinstance(event_type, str) or not _TYPE.fullmatch(event_type):
        raise InvalidEvent("event has no valid type")
    # Connect: snapshot events name the connected account in "account", thin ones in "context".
    account = data.get("account") or data.get("context")
    if account is not None:
        account = require_id(account, "account")
    livemode = data.get("livemode")
    return Event(
        id=event_id,
        type=event_type,
        created=_created(data.get("created")),
        livemode=livemode if isinstance(livemode, bool) else None,
        account=account,
        raw=raw,
        data=data,
    )


def _created(value: Any) -> datetime | None:
    """Snapshot events carry Unix seconds, thin events ISO-8601."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**37:
        return datetime.fromtimestamp(value, tz=timezone.utc)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def require_mode(event: Event, mode: str) -> None:
    """Refuse an event from the other Stripe mode (or one that does not say)."""
    if event.livemode is not (mode == "live"):
        stated = "missing" if event.livemode is None else str(event.livemode).lower()
        raise LivemodeMismatch(f"event livemode is {stated}, service runs in {mode} mode")
