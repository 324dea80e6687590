"""Stripe as a provider: `Stripe-Signature` over the raw body, the event id in the body."""
from __future__ import annotations

from . import signature
from webhooks.core.events import STRIPE, mode_outcome, parse
from . import Headers, Outgoing, Provider, register


def _verify(body: bytes, headers: Headers, secrets, tolerance_s: int) -> str:
    return signature.verify(body, headers.get("Stripe-Signature"), secrets, tolerance_s)


def _sign(body: bytes, secret: str, outgoing: Outgoing) -> dict[str, str]:
    return {"Stripe-Signature": signature.sign(body, secret, outgoing.timestamp)}


PROVIDER = register(Provider(
    name=STRIPE,
    secret_setting="STRIPE_WEBHOOK_SECRET",
    secrets=lambda settings: settings.webhook_secrets,
    verify=_verify,
    parse=lambda text, headers: parse(text),
    sign=_sign,
    # A mode mismatch is refused before any database work, with its reason logged.
    admit=lambda event, settings: mode_outcome(event, settings.stripe_mode),
))
