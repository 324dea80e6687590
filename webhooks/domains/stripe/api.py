"""Calls to Stripe's API, through the stripe library's own client.

Every call goes through `StripeClient.raw_request`: the library adds the key,
the pinned Stripe-Version, Stripe-Account / Stripe-Context, and retries a
409, 429, 5xx or dropped connection with its own backoff
(`max_network_retries`); we keep the JSON as plain dicts, since events go on
to `events.parse` and the ledger as text, not as StripeObjects.

No call here is ever made inside a claim's transaction: callers hold no
connection while they wait on Stripe.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import stripe

from webhooks.core.events import Json
from webhooks.infra.config import Settings

# Stripe's largest page.
PAGE_SIZE = 100


class ApiNotConfigured(RuntimeError):
    """No STRIPE_API_KEY: the one line a command prints before it refuses."""


class ApiFailed(RuntimeError):
    """A call failed after the library's retries; the message is safe to print."""


class NotFound(ApiFailed):
    """Stripe answered 404: the object does not exist (for this key and account)."""


class Unavailable(ApiFailed):
    """Stripe could not be reached, timed out, failed (5xx) or rate-limited us: try again later."""


def client(settings: Settings) -> stripe.StripeClient:
    if not settings.stripe_api_key:
        raise ApiNotConfigured("STRIPE_API_KEY is not set: this command reads Stripe's API")
    return stripe.StripeClient(
        settings.stripe_api_key,
        stripe_version=settings.stripe_api_version,
        base_addresses={"api": settings.stripe_api_base},
        max_network_retries=settings.stripe_api_retries,
        http_client=stripe.RequestsClient(timeout=settings.stripe_api_timeout_s),
    )


def get(
    api: stripe.StripeClient,
    path: str,
    *,
    account: str | None = None,
    context: str | None = None,
    **params: Any,
) -> Json:
    """GET `path` as a dict. `account` is sent as Stripe-Account (Connect, API v1);
    `context` as Stripe-Context, which is what a thin event names (API v2)."""
    options = {"stripe_account": account} if account else {}
    if context:
        options["stripe_context"] = context
    try:
        response = api.raw_request("get", path, **options, **params)
    except stripe.InvalidRequestError as exc:
        if exc.http_status == 404:
            raise NotFound(f"GET {path}: 404 {exc.user_message or ''}".strip()) from None
        raise ApiFailed(f"GET {path}: {exc.http_status} {exc.user_message or ''}".strip()) from None
    except (stripe.APIConnectionError, stripe.APIError, stripe.RateLimitError) as exc:
        raise Unavailable(failure(path, exc)) from None
    except stripe.StripeError as exc:
        raise ApiFailed(failure(path, exc)) from None
    body = json.loads(response.body)
    if not isinstance(body, dict):
        raise ApiFailed(f"GET {path}: the answer is not a JSON object")
    return body


# The library's error classes (stripe-python's _error.py; docs.stripe.com/error-handling),
# each with its cause and its fix: the library's own messages are paragraphs
# of boilerplate ("If this problem persists, let us know at support@...").
_CAUSES: tuple[tuple[type[stripe.StripeError], str], ...] = (
    (
        stripe.AuthenticationError,
        "Stripe refused STRIPE_API_KEY (401: wrong, revoked or expired): "
        "set a current secret or restricted key (Dashboard, Developers, API keys)",
    ),
    (
        stripe.PermissionError,
        "STRIPE_API_KEY may not read {path} (403): give the restricted key read access to it",
    ),
    (
        stripe.RateLimitError,
        "Stripe's rate limit (429) held through STRIPE_API_RETRIES retries: run it again in a minute",
    ),
    (
        stripe.APIConnectionError,
        "cannot reach Stripe's API{reason}: check the network, proxy or STRIPE_API_BASE, then run it again",
    ),
    (
        stripe.APIError,
        "Stripe's API failed ({status}) through the retries: run it again later (status.stripe.com)",
    ),
)
_NETWORK_REASON = re.compile(r"\((?:Network error: )?([^()]*)\)\s*$")


def failure(path: str, exc: stripe.StripeError) -> str:
    """One line for a failed call: its cause and what fixes it."""
    reason = _NETWORK_REASON.search(str(exc))
    for kind, line in _CAUSES:
        if isinstance(exc, kind):
            return line.format(
                path=path,
                status=exc.http_status or "no status",
                reason=f" ({' '.join(reason[1].split())})" if reason else "",
            )
    return f"GET {path}: {exc.http_status or type(exc).__name__} {exc.user_message or ''}".strip()


def list_all(
    api: stripe.StripeClient, path: str, *, account: str | None = None, **params: Any
) -> Iterator[Json]:
    """Every object of a list endpoint, in Stripe's order (newest first).

    Pages with `starting_after` the last id seen, which walks back in time;
    a failed page (after the library's retries) raises ApiFailed.
    """
    cursor = None
    while True:
        page_params = dict(params, limit=PAGE_SIZE)
        if cursor:
            page_params["starting_after"] = cursor
        page = get(api, path, account=account, **page_params)
        yield from page["data"]
        if not page.get("has_more") or not page["data"]:
            return
        cursor = page["data"][-1]["id"]


def accounts(settings: Settings) -> list[str | None]:
    """The platform (None) and each configured connected account."""
    return [None, *settings.stripe_connect_accounts]
