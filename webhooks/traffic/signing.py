"""Deliveries signed the way their provider signs them: what replay and loadtest send.

Every provider's signer (webhooks/providers/) writes the headers its
deliveries carry: Stripe's those Stripe's servers (and its CLI) set.
"""

from __future__ import annotations

from webhooks.bootstrap import PROVIDERS
from webhooks.core import ledger
from webhooks.providers import Outgoing

JSON_HEADERS = {"Content-Type": "application/json"}


def headers(provider: str, body: bytes, secret: str, outgoing: Outgoing) -> dict[str, str]:
    """The request headers for `body`, signed now with `secret`."""
    return {**JSON_HEADERS, **PROVIDERS[provider].sign(body, secret, outgoing)}


def outgoing(row: ledger.StoredEvent) -> Outgoing:
    """What the provider sent beside a stored body, as far as the ledger kept it."""
    return Outgoing(row.event_id, row.event_type, account=row.account or None)
