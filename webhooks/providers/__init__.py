"""Who may POST to `/webhooks/<name>`: each sender as data, one module per sender.

A provider is its verifier (raw body and headers to text, or
InvalidSignature), its parser (text and headers to the Event the ledger
claims, or InvalidEvent), where its secrets are set, and its signer (what
replay, loadtest and the tests send). Everything after parsing, the claim,
the 409, the replayed answer and the handlers keyed by (provider, type), is
the one path in `ingest`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from webhooks.infra.config import Settings
from webhooks.core.events import Event

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


@dataclass(frozen=True)
class Provider:
    name: str
    # The environment variable holding its comma-separated secrets (rotation).
    secret_setting: str
    secrets: Callable[[Settings], Sequence[str]]
    # (body, headers, secrets, tolerance in seconds) -> the body as text.
    verify: Callable[[bytes, Headers, Sequence[str], int], str]
    parse: Callable[[str, Headers], Event]
    # (body, secret, outgoing) -> the headers that sign and describe the delivery.
    sign: Callable[[bytes, str, Outgoing], dict[str, str]]
    # Refuses (InvalidEvent) a verified event this service must not take; None takes all.
    admit: Callable[[Event, Settings], None] | None = None
    # The status a delivery whose signature fails is refused with.
    invalid_signature_status: int = 400


_PROVIDERS: dict[str, Provider] = {}


def register(provider: Provider) -> Provider:
    _PROVIDERS[provider.name] = provider
    return provider


def get(name: str) -> Provider | None:
    return _PROVIDERS.get(name)


def all_providers() -> list[Provider]:
    return list(_PROVIDERS.values())


def names() -> list[str]:
    """Every registered provider's name, sorted: the choices of a `--provider` flag."""
    return sorted(_PROVIDERS)


def enabled(settings: Settings) -> list[str]:
    """The providers with a secret set: the ones whose deliveries can be verified."""
    return [p.name for p in _PROVIDERS.values() if any(p.secrets(settings))]


from . import (  # noqa: E402,F401  (register; each sender module registers itself)
    github,
    shopify,
    standard,
    stripe,
)
