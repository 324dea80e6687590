"""Who may POST to `/webhooks/<name>`: each sender as data, one module per sender.

A provider is its verifier (raw body and headers to text, or
InvalidSignature), its parser (text and headers to the Event the ledger
claims, or InvalidEvent), its admission (Stripe's mode), where its secrets
are set, and its signer (what replay, loadtest and the tests send).
Everything after admission, the claim, the 409, the replayed answer and the
handlers keyed by (provider, type), is the one path in `core.ingest`. The
providers a process takes are listed once, in `webhooks.bootstrap`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from webhooks.infra.config import Settings

from .base import Headers, Outgoing, Provider

__all__ = ["Headers", "Outgoing", "Provider", "Providers"]


class Providers:
    """The providers a process takes deliveries from, by name (and in name order)."""

    def __init__(self, providers: Iterable[Provider]):
        self._by_name = {provider.name: provider for provider in sorted(providers, key=lambda p: p.name)}

    def get(self, name: str) -> Provider | None:
        return self._by_name.get(name)

    def __getitem__(self, name: str) -> Provider:
        return self._by_name[name]

    def __iter__(self) -> Iterator[Provider]:
        return iter(self._by_name.values())

    def names(self) -> list[str]:
        """Every provider's name, sorted: the choices of a `--provider` flag."""
        return list(self._by_name)

    def enabled(self, settings: Settings) -> list[str]:
        """The providers with a secret set: the ones whose deliveries can be verified."""
        return [p.name for p in self if any(p.secrets(settings))]
