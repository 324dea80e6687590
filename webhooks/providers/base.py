"""What a provider is: one sender's wire format, as data (each module here makes one)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from webhooks.core.events import Event
from webhooks.infra.config import Settings

# Request headers, looked up case-insensitively (werkzeug's EnvironHeaders).
Headers = Mapping[str, str]


@dataclass(frozen=True)
class Outgoing:
    """What a sender puts beside the body: everything a signer may need to set."""

    event_id: str
    event_type: str
    account: str | None = None
    # One event delivered to several subscriptions gets one id per delivery (Shopify's webhook id).
    delivery_id: str | None = None
    timestamp: int | None = None


def admits_all(event: Event, settings: Settings) -> str | None:
    return None


@dataclass(frozen=True)
class Provider:
    name: str
    # The environment variable holding its comma-separated secrets (rotation).
    secret_setting: str
    secrets: Callable[[Settings], Sequence[str]]
    # (body, headers, secrets, tolerance in seconds) -> the body as text, or InvalidSignature.
    verify: Callable[[bytes, Headers, Sequence[str], int], str]
    # (text, headers) -> the Event, or InvalidEvent.
    parse: Callable[[str, Headers], Event]
    # (body, secret, outgoing) -> the headers that sign and describe the delivery.
    sign: Callable[[bytes, str, Outgoing], dict[str, str]]
    # Its admission: what this service does with a verified event, decided
    # once before any database work. InvalidEvent refuses it, an outcome
    # word settles it (accepted, claimed completed with that word, no handler
    # run), None lets the registry's plan for its type decide.
    admit: Callable[[Event, Settings], str | None] = admits_all
    # The status a delivery whose signature fails is refused with.
    invalid_signature_status: int = 400
    # Without its secret the service is not ready (/readyz 503, an error at
    # start); without another's, only that provider's URL is refused.
    required: bool = False
