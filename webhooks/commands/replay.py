"""`python -m webhooks replay`: re-send events the way their provider does.

Events come from JSON files (Stripe's event envelope, sent byte for byte) or
from the ledger (the payload exactly as it was received, any provider), are
signed afresh with the provider's secret, and are posted with its headers
(for Stripe, those Stripe and its CLI set). `--times K` sends each one K
times, as `stripe events resend` would.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import requests

from webhooks.core import ledger
from webhooks.infra.config import Settings
from webhooks.infra.db import connect
from webhooks.providers import Outgoing
from webhooks.providers.stripe import NAME as STRIPE
from webhooks.traffic import signing

from . import durations, sending
from .errors import CommandError


@dataclass(frozen=True)
class Replayable:
    label: str
    body: bytes
    # What the provider's signer puts beside the body; a file's is read from it (Stripe's).
    outgoing: Outgoing


def register(subparsers) -> None:
    parser = sending.command_parser(
        subparsers,
        "replay",
        __doc__,
        help="re-send events (JSON files or ledger rows) signed like their provider",
    )
    parser.add_argument("files", nargs="*", type=Path, help="event JSON files to send as they are")
    ledger_args = parser.add_argument_group(
        "events from the ledger (DATABASE_URL); any of these selects from it"
    )
    ledger_args.add_argument("--id", dest="ids", action="append", help="event id (repeatable)")
    ledger_args.add_argument("--type", dest="types", action="append", help="event type (repeatable)")
    ledger_args.add_argument(
        "--since", type=durations.instant, help="received at or after: a span back (1h, 7d) or an ISO time"
    )
    ledger_args.add_argument(
        "--until", type=durations.instant, help="received before: a span back (1h, 7d) or an ISO time"
    )
    ledger_args.add_argument(
        "--limit", type=sending.positive_int, help="at most this many ledger events, oldest first"
    )
    parser.add_argument(
        "--times", type=sending.positive_int, default=1, help="send each event K times (default 1)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    secret = sending.secret(args, "replay")
    if args.files and args.provider != STRIPE:
        # Another provider's id and type travel in headers the file does not have.
        raise CommandError(
            f"replay: files are Stripe events; select {args.provider}'s from the ledger "
            "(--id, --type, --since)"
        )
    events = [_from_file(path) for path in args.files]
    if any([args.ids, args.types, args.since, args.until, args.limit]):
        events += _from_ledger(args)
    if not events:
        sys.exit("replay: nothing to send: name event files or select events from the ledger")
    ok = True
    with requests.Session() as session:
        for event in events:
            for attempt in range(1, args.times + 1):
                ok &= _send(session, args, secret, event, attempt)
    return 0 if ok else 1


def _from_file(path: Path) -> Replayable:
    body = path.read_bytes()
    try:
        label = json.loads(body).get("id") or path.name
    except (ValueError, AttributeError):
        label = path.name  # sent anyway: the service's answer says what is wrong with it
    return Replayable(label, body, Outgoing(label, ""))


def _from_ledger(args: argparse.Namespace) -> list[Replayable]:
    with connect(Settings.from_env()) as conn:
        rows = ledger.stored_events(
            conn,
            args.provider,
            ids=args.ids,
            types=args.types,
            since=args.since,
            until=args.until,
            limit=args.limit,
        )
    return [Replayable(row.event_id, row.payload.encode("utf-8"), signing.outgoing(row)) for row in rows]


def _send(session: requests.Session, args, secret: str, event: Replayable, attempt: int) -> bool:
    headers = signing.headers(args.provider, event.body, secret, event.outgoing)
    url = sending.url(args)
    try:
        response = session.post(url, data=event.body, headers=headers, timeout=30)
    except requests.ConnectionError:
        raise CommandError(
            f"replay: nothing answered at {url}: is the service running there? (./bin/serve, PORT or --url)"
        ) from None
    except requests.RequestException as exc:
        print(f"{event.label} #{attempt}: {type(exc).__name__}: {exc}")
        return False
    replayed = " (Idempotent-Replayed)" if response.headers.get("Idempotent-Replayed") else ""
    print(f"{event.label} #{attempt}: {response.status_code}{replayed} {response.text.strip()}")
    return response.ok
