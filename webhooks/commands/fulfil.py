"""`python -m webhooks fulfil cs_... [--account acct_...]`: the return call, from a shell.

What `POST /stripe/checkout/sessions/<session_id>/fulfil` does (docs/checkout-return.md):
the session read from Stripe's API, then fulfilled through the claim, once
whichever of it and the webhook comes first. The answer's JSON is printed on
stdout; a refusal is one line on stderr (its error word and why) and exit 1.
It needs STRIPE_API_KEY, not WEBHOOK_FULFIL_TOKEN: whoever runs it holds the
service's settings already.
"""

from __future__ import annotations

import argparse
import sys

from webhooks import bootstrap
from webhooks.infra.config import Settings

from . import table
from .errors import CommandError


def _fulfil(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    if not settings.stripe_api_key:
        raise CommandError("STRIPE_API_KEY is not set: fulfil reads the session from Stripe")
    service = bootstrap.build(settings, min_size=1, max_size=1)
    try:
        answer = service.fulfil_checkout(args.session_id, args.account)
    finally:
        service.close()
    if answer.status != 200:
        detail = answer.body.get("detail")
        retry = f" (try again in {answer.retry_after}s)" if answer.retry_after else ""
        print(
            f"fulfil: {answer.status} {answer.body.get('error')}{': ' + detail if detail else ''}{retry}",
            file=sys.stderr,
        )
        return 1
    table.print_json(answer.body)
    return 0


def register(commands) -> None:
    fulfil = commands.add_parser(
        "fulfil", help="fulfil a Checkout Session as the customer's return does: once, with its line items"
    )
    fulfil.add_argument("session_id", help="the Checkout Session id (cs_...)")
    fulfil.add_argument("--account", help="the connected account (acct_...) it belongs to, if any")
    fulfil.set_defaults(func=_fulfil)
