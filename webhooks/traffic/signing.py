"""Deliveries signed the way their provider signs them: what replay and loadtest send.

Stripe's keep the headers Stripe's servers (and its CLI) set; every other
provider's are its own signer's, from `webhooks.providers`.
"""
from __future__ import annotations

import argparse

from . import stripe as stripe_sender
from webhooks.commands.errors import CommandError
from webhooks.core import ledger
from webhooks import providers
from webhooks.infra.config import Settings
from webhooks.core.events import STRIPE
from webhooks.providers import Outgoing

JSON_HEADERS = {"Content-Type": "application/json"}


def headers(provider: str, body: bytes, secret: str, outgoing: Outgoing) -> dict[str, str]:
    """The request headers for `body`, signed now with `secret`."""
    if provider == STRIPE:
        return stripe_sender.headers(body, secret)
    return {**JSON_HEADERS, **providers.get(provider).sign(body, secret, outgoing)}


def outgoing(row: ledger.StoredEvent) -> Outgoing:
    """What the provider sent beside a stored body, as far as the ledger kept it."""
    return Outgoing(row.event_id, row.event_type, account=row.account or None)


def secret(args: argparse.Namespace, command: str) -> str:
    """--secret, else the first of the provider's configured secrets; one line if neither."""
    if args.secret:
        return args.secret
    provider = providers.get(args.provider)
    configured = provider.secrets(Settings.from_env())
    if not configured:
        raise CommandError(
            f"{command}: no signing secret: pass --secret or set {provider.secret_setting}"
        )
    return configured[0]


def url(args: argparse.Namespace) -> str:
    """--url, else the local service's URL for the provider."""
    return args.url or stripe_sender.local_url(args.provider)
