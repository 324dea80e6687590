"""`python -m webhooks events list|show|reprocess`: the ledger for an operator."""

from __future__ import annotations

import argparse
import json
import sys

from webhooks import bootstrap
from webhooks.core import history, ledger
from webhooks.core.events import Event, InvalidEvent
from webhooks.core.registry import Registry
from webhooks.infra.config import Settings
from webhooks.infra.db import connect
from webhooks.providers import Providers, stripe
from webhooks.traffic import signing

from . import durations

# Reprocess reads a stored body back through its provider's parser, which
# takes the id and type from the headers the signer writes; nothing is
# verified, so any key of the signers' forms will do (this is b"reprocess").
_UNVERIFIED_KEY = "whsec_cmVwcm9jZXNz"


def _list(args: argparse.Namespace) -> int:
    with connect(Settings.from_env()) as conn:
        rows = history.events(conn, args.status, args.type, args.since, args.limit, args.provider)
    print(
        f"{'received_at':<26} {'event_id':<32} {'provider':<9} {'type':<34} {'status':<10} "
        f"{'outcome':<18} failures"
    )
    for row in rows:
        print(
            f"{row.received_at.isoformat(timespec='seconds'):<26} {row.event_id:<32} {row.provider:<9} "
            f"{row.event_type or '-':<34} {row.status:<10} {row.outcome or '-':<18} {row.failures}"
        )
    return 0


def _pretty(payload: str | None) -> str:
    if payload is None:
        return "(none)"
    try:
        return json.dumps(json.loads(payload), indent=2)
    except ValueError:
        return payload or "(none)"


def _show(args: argparse.Namespace) -> int:
    with connect(Settings.from_env()) as conn:
        detail = history.event(conn, args.provider, args.event_id)
    if detail is None:
        print(f"no event {args.event_id} in the ledger or its failures")
        return 1
    print(f"event     {detail.event_id} ({detail.provider})")
    print(f"type      {detail.event_type}")
    print(f"status    {detail.status}")
    print(f"outcome   {detail.outcome or '-'}")
    print(f"response  {detail.response_status or '-'} {detail.response_body or ''}")
    print(f"received  {detail.received_at}   completed {detail.completed_at or '-'}")
    print(
        f"attempts  {len(detail.failures) + (detail.status == 'completed')} ({len(detail.failures)} failed)"
    )
    for failure in detail.failures:
        print(f"  {failure.failed_at}  {failure.error_class}: {failure.error_message or ''}")
    print("payload")
    print(_pretty(detail.payload))
    return 0


def refusal(detail: history.EventDetail, allow_ignored: bool, registry: Registry) -> str | None:
    """Why this process must not re-run the event, or None.

    A completed event only replays its stored answer, so any handler set will
    do. Otherwise the event is closed for good by whatever this process runs:
    with no handler it would be `ignored` forever, and with another handler
    than the one that failed (a shop's replacement of a built-in one) its
    effect would never happen.
    """
    if detail.status == "completed":
        return None
    mine = registry.handler_name(detail.provider, detail.event_type) if detail.event_type else None
    theirs = next((f.handler for f in reversed(detail.failures) if f.handler), None)
    hint = "run it with the server's WEBHOOK_HANDLER_MODULES"
    if mine is None and not allow_ignored:
        ran = f" (its last attempt ran {theirs})" if theirs else ""
        return (
            f"no handler for {detail.event_type} in this process{ran}: it would be closed"
            f" as ignored for good; {hint}, or pass --allow-ignored"
        )
    if mine is not None and theirs is not None and mine != theirs:
        return f"its last attempt ran {theirs}, this process would run {mine}; {hint}"
    return None


def _reprocess(args: argparse.Namespace) -> int:
    """Admit and accept the stored body again, as a delivery of it is.

    No signature check: the body was verified when it was first received, and
    only someone with the database can run this.
    """
    service = bootstrap.build(min_size=1, max_size=1)
    with connect(service.settings) as conn:
        detail = history.event(conn, args.provider, args.event_id)
    if detail is None or detail.payload is None:
        print(f"no stored payload for {args.event_id}")
        return 1
    reason = refusal(detail, args.allow_ignored, service.registry)
    if reason:
        print(f"refused to reprocess {args.event_id}: {reason}", file=sys.stderr)
        return 2
    try:
        event = _parsed(service.providers, detail)
    except InvalidEvent as exc:
        print(f"stored payload of {args.event_id} is not an event: {exc}")
        return 1
    try:
        answer = service.admit_and_accept(args.provider, event)
    finally:
        service.close()
    replayed = " (already completed: stored answer)" if answer.replayed else ""
    print(f"{answer.status} {answer.body}{replayed}")
    return 0 if answer.status == 200 else 1


def _parsed(providers: Providers, detail: history.EventDetail) -> Event:
    """The stored body as its provider's parser reads it from a delivery."""
    provider = providers.get(detail.provider)
    if provider is None:
        raise InvalidEvent(f"no provider {detail.provider} in this process")
    if detail.payload is None:
        raise InvalidEvent("no body was stored")
    row = ledger.StoredEvent(detail.event_id, detail.event_type, detail.account, detail.payload)
    headers = provider.sign(detail.payload.encode("utf-8"), _UNVERIFIED_KEY, signing.outgoing(row))
    return provider.parse(detail.payload, headers)


_PROVIDERS = bootstrap.PROVIDERS.names()


def register(commands) -> None:
    events = commands.add_parser("events", help="read the ledger, re-run a failed event")
    actions = events.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="recent events, newest first")
    listing.add_argument("--status", choices=("completed", "failed"))
    listing.add_argument("--type", help="event type, e.g. payment_intent.succeeded")
    listing.add_argument(
        "--since", type=durations.instant, help="a span back from now (1h, 7d) or an ISO time"
    )
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--provider", choices=_PROVIDERS, help="only this provider's events")
    listing.set_defaults(func=_list)

    for name, func, help_text in (
        ("show", _show, "payload, outcome, attempts and failures of one event"),
        ("reprocess", _reprocess, "re-run an event from its stored payload through the claim"),
    ):
        action = actions.add_parser(name, help=help_text)
        action.add_argument("event_id", metavar="EVT_ID")
        action.add_argument("--provider", default=stripe.NAME, choices=_PROVIDERS)
        action.set_defaults(func=func)
    actions.choices["reprocess"].add_argument(
        "--allow-ignored",
        action="store_true",
        help="close the event as ignored even though no handler here takes its type",
    )
