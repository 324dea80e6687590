"""Stripe-Signature verification over the raw request body.

The HMAC and constant-time comparison are the stripe library's; this module
only closes the gaps measured in it: it accepts timestamps from the future,
raises TypeError on a non-ASCII signature and UnicodeDecodeError on a body
that is not UTF-8, and takes one secret where we rotate several.
"""
from __future__ import annotations

import time
from typing import Iterable

import stripe


class InvalidSignature(Exception):
    """The delivery is not provably from the provider; the reason is safe to show."""


_MAX_HEADER_CHARS = 4096


def _timestamp(header: str) -> int:
    """The header's one timestamp.

    Stripe sends exactly one `t=`. With several, the library verifies the
    first while anything else reading the header (a proxy, a later library
    version) may take another; refusing the ambiguity leaves no such gap.
    """
    stamps = [value for key, _, value in (item.partition("=") for item in header.split(","))
              if key.strip() == "t"]
    if len(stamps) != 1:
        raise InvalidSignature("Stripe-Signature must carry exactly one timestamp")
    try:
        return int(stamps[0])
    except ValueError:
        raise InvalidSignature("malformed timestamp in Stripe-Signature") from None


def verify(
    body: bytes,
    header: str | None,
    secrets: Iterable[str],
    tolerance_s: int,
    now: float | None = None,
) -> str:
    """The body as text if any secret signs it; InvalidSignature otherwise."""
    if not header:
        raise InvalidSignature("missing Stripe-Signature header")
    if len(header) > _MAX_HEADER_CHARS:
        raise InvalidSignature("Stripe-Signature header too long")
    secrets = [s for s in secrets if s]
    if not secrets:
        raise InvalidSignature("no webhook secret configured")
    timestamp = _timestamp(header)
    try:
        payload = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSignature("body is not UTF-8") from None
    if not any(_signed_by(payload, header, s, tolerance_s) for s in secrets):
        raise InvalidSignature("no valid signature for this body and timestamp")
    now = time.time() if now is None else now
    if timestamp > now + tolerance_s:
        raise InvalidSignature("timestamp is in the future")
    return payload


def _signed_by(payload: str, header: str, secret: str, tolerance_s: int) -> bool:
    try:
        return stripe.WebhookSignature.verify_header(payload, header, secret, tolerance_s)
    except (stripe.SignatureVerificationError, TypeError, ValueError):
        return False


def sign(body: bytes, secret: str, timestamp: int | None = None) -> str:
    """A Stripe-Signature header value exactly as Stripe would send it."""
    return stripe.WebhookSignature.generate_signature_header(
        body.decode("utf-8"), secret, timestamp
    )
