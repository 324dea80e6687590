"""The event every provider's parser makes, and the refusals any of them can raise.

A provider (webhooks/providers/) verifies a delivery and parses it into an
Event; everything after that, the claim, the handlers, the ledger, reads
only what is here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from webhooks.infra.errors import PublicError

from .outcomes import INVALID_FIELDS


class InvalidSignature(PublicError):
    """The delivery is not provably from the provider; the reason is safe to show."""


class InvalidEvent(PublicError):
    """The body is not an event we can claim; the reason is safe to show."""

    error = "invalid_event"


class InvalidFields(PublicError):
    """A signed event whose object's fields are not what its sender sends: it can never be applied.

    It is claimed and completed with a 422 naming each field and the rule it
    breaks (never its value), recorded as failed, and every redelivery gets
    that stored answer: no handler runs for it, then or later.
    """

    error = INVALID_FIELDS
    status = 422


class Unprocessable(PublicError):
    """The event is fine, but this service cannot take it now: answered 500, recorded, nothing claimed.

    The sender retries, and an operator sees the failure. `error` is the
    word the answer and the log carry.
    """

    error = "unprocessable"


# Ids are short ASCII tokens; anything else (a NUL, a megabyte) is refused
# here so it never reaches SQL.
ID_PATTERN = r"[A-Za-z0-9_\-.:]{1,255}"
_ID = re.compile(ID_PATTERN)
# A JSON object as json.loads gives it: an event's data, a payload's object, a job.
Json = dict[str, Any]


@dataclass(frozen=True)
class Event:
    id: str
    type: str
    created: datetime | None
    livemode: bool | None
    account: str | None
    raw: str
    data: dict[str, Any]
    # The version the snapshot's object was rendered in (Stripe; None otherwise).
    api_version: str | None = None

    @property
    def object(self) -> dict[str, Any]:
        """`data.object`: the object a snapshot event carries ({} for any other)."""
        return data_object(self.data) or {}

    @property
    def account_key(self) -> str:
        """The account that scopes this event's keys ('' for none).

        Stripe's Connect account, a Shopify shop.
        """
        return self.account or ""


def data_object(data: dict[str, Any]) -> dict[str, Any] | None:
    payload = data.get("data")
    obj = payload.get("object") if isinstance(payload, dict) else None
    return obj if isinstance(obj, dict) else None


def require_token(value: Any, pattern: re.Pattern[str], what: str) -> str:
    """`value` if it is a string `pattern` matches whole; InvalidEvent naming `what` otherwise."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidEvent(f"event has no valid {what}")
    return value


def require_id(value: Any, what: str) -> str:
    """`value` if it is a usable id (short ASCII); InvalidEvent naming `what` otherwise."""
    return require_token(value, _ID, what)


def id_of(value: Any) -> Any:
    """An id field that may also arrive expanded into its object."""
    return value.get("id") if isinstance(value, dict) else value


def timestamp(value: Any) -> datetime | None:
    """A sender's time: Unix seconds, or ISO-8601 text."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**37:
        return datetime.fromtimestamp(value, tz=UTC)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def require_created(event: Event) -> datetime:
    """When the sender created the event: what orders two updates of one object."""
    if event.created is None:
        raise InvalidEvent("event has no valid created time")
    return event.created
