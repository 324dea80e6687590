"""The Shopify domain: one module per Shopify object, each with its handlers.

Handlers are keyed by (provider "shopify", topic) and run inside the claim's
transaction, like the Stripe domain's; they build on the delivery core only.
`register` is how a process takes it in.
"""

from __future__ import annotations

from webhooks.core.registry import Registry
from webhooks.infra.config import Settings
from webhooks.providers.shopify import NAME

from . import orders, privacy, refunds


def register(registry: Registry, settings: Settings) -> None:
    registry.include(orders, privacy, refunds, provider=NAME)
