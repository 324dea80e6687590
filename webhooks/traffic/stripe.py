"""Requests shaped like Stripe's own deliveries, for replays and load tests.

The Stripe CLI (`stripe listen --forward-to`) forwards the headers Stripe's
servers set on a webhook delivery; these are the ones a handler can see.
"""
from __future__ import annotations

import argparse
import os
import random
from dataclasses import dataclass

from webhooks import providers
from webhooks.providers import signature
from webhooks.infra.config import Settings

WEBHOOK_PATH = "/webhooks/stripe"
STRIPE_HEADERS = {
    "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
    "Content-Type": "application/json; charset=utf-8",
    "Accept": "*/*; q=0.5, application/xml",
    "Cache-Control": "no-cache",
}


def headers(body: bytes, secret: str, timestamp: int | None = None) -> dict[str, str]:
    """Stripe's headers for `body`, signed now (or at `timestamp`) with `secret`."""
    return {**STRIPE_HEADERS, "Stripe-Signature": signature.sign(body, secret, timestamp)}


def local_url(provider: str = "stripe") -> str:
    """The provider's URL on the service this machine runs (port from $PORT)."""
    return f"http://127.0.0.1:{os.environ.get('PORT', '8000')}/webhooks/{provider}"


def default_secret() -> str | None:
    """The first configured secret: the one a local service verifies with."""
    secrets = Settings.from_env().webhook_secrets
    return secrets[0] if secrets else None


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def command_parser(subparsers, name: str, doc: str, help: str) -> argparse.ArgumentParser:
    """A subcommand that sends as --provider to --url with --secret, by default the local service's."""
    parser = subparsers.add_parser(
        name, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--provider",
        default="stripe",
        choices=providers.names(),
        help="sign and send as this provider does (default: %(default)s)",
    )
    parser.add_argument(
        "--url",
        help=f"endpoint (default: {local_url('PROVIDER')}, from $PORT)",
    )
    parser.add_argument(
        "--secret",
        help="signing secret (default: the first of the provider's setting, e.g. $STRIPE_WEBHOOK_SECRET)",
    )
    return parser


@dataclass(frozen=True)
class Retry:
    """Stripe's schedule (exponential backoff over days), scaled down to a test run."""

    budget: int = 8
    base_s: float = 0.05
    cap_s: float = 2.0

    def delay(self, failed_attempts: int) -> float:
        # Full jitter: duplicates that failed together do not come back together.
        return random.uniform(0, min(self.cap_s, self.base_s * 2 ** (failed_attempts - 1)))


def retryable(status: int | None) -> bool:
    """Whether Stripe would try again: no answer, 409 (in flight elsewhere) or 5xx."""
    return status is None or status == 409 or status >= 500
