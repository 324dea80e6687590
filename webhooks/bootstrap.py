"""The composition root: everything a process of the service needs, built from its Settings.

The web app (`create_app`), every command that accepts events and the
outbox worker assemble themselves here and nowhere else, so an event is
judged the same whichever process takes it: the same providers, the same
handlers (every domain's, then those of WEBHOOK_HANDLER_MODULES), the same
domain settings (the order marker is bound into the handlers that ship
payments), and a pool of this process's own.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from webhooks.core import ingest
from webhooks.core.events import Event, InvalidEvent
from webhooks.core.registry import Registry
from webhooks.domains import github as github_domain
from webhooks.domains import shopify as shopify_domain
from webhooks.domains import stripe as stripe_domain
from webhooks.domains.stripe import access
from webhooks.infra.config import SettingError, Settings
from webhooks.infra.db import LazyPool, database_url
from webhooks.providers import Provider, Providers, github, shopify, standard, stripe

# Every sender this service takes deliveries from, with the domain that acts
# on its events (None: they are recorded, `ignored`). A domain is a module
# with `register(registry, settings)`. A new provider is its module in
# providers/, its domain in domains/, and one line here.
SENDERS: tuple[tuple[Provider, ModuleType | None], ...] = (
    (stripe.PROVIDER, stripe_domain),
    (standard.PROVIDER, None),
    (github.PROVIDER, github_domain),
    (shopify.PROVIDER, shopify_domain),
)
PROVIDERS = Providers(provider for provider, _ in SENDERS)


def handlers(settings: Settings) -> Registry:
    """Every domain's handlers, then the shop's (WEBHOOK_HANDLER_MODULES), which replace any of the same type.

    A shop's module is included (its `@fulfilment.handles` functions), and
    its `register(registry, settings)` runs if it has one: the way to wrap
    a built-in handler (`registry.handler(...)`) rather than replace it.
    """
    registry = Registry()
    for _, domain in SENDERS:
        if domain is not None:
            domain.register(registry, settings)
    for name in settings.handler_modules:
        try:
            module = importlib.import_module(name)
        except (ImportError, SyntaxError) as exc:
            raise SettingError(f"WEBHOOK_HANDLER_MODULES: cannot import {name}: {exc}") from None
        registry.include(module)
        if callable(getattr(module, "register", None)):
            module.register(registry, settings)
    return registry


@dataclass(frozen=True)
class Service:
    """One process's assembly: its settings, providers, handlers and pool."""

    settings: Settings
    providers: Providers
    registry: Registry
    pool: LazyPool

    def accept(self, provider: str, event: Event, settled: str | None = None) -> ingest.Answer:
        """An admitted event taken into the ledger, and its answer (core/ingest.py).

        `settled` is the outcome word its admission settled it with, if any:
        its claim is completed with that word and no handler runs.
        """
        return ingest.accept(self.pool.get(), self.registry, provider, event, settled)

    def admit_and_accept(self, provider: str, event: Event) -> ingest.Answer:
        """An event that came some other way than a delivery (reprocess, backfill), admitted as a delivery is.

        Its provider's refusal is its answer (400, nothing written).
        """
        try:
            settled = self.providers[provider].admit(event, self.settings)
        except InvalidEvent as exc:
            return ingest.invalid_event(exc)
        return self.accept(provider, event, settled)

    def publish_settings(self) -> None:
        """Write the domain settings that live in the database (the subscription grace) where SQL reads them.

        The web app does, at start: the `subscription_access` view is the
        shop's too, so it shows the serving process's settings, not those of
        whatever command ran last from a shell.
        """
        access.publish_settings(
            database_url(self.settings),
            self.settings.subscription_grace,
            self.settings.subscription_renewal_margin,
        )

    def close(self) -> None:
        self.pool.close()


def build(settings: Settings | None = None, **pool_options) -> Service:
    """This process's Service; `pool_options` size its pool (a command needs one connection)."""
    settings = settings or Settings.from_env()
    return Service(settings, PROVIDERS, handlers(settings), LazyPool(settings, **pool_options))
