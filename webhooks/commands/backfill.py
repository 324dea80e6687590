"""`python -m webhooks backfill --since 72h`: fetch the events Stripe kept and apply the missed ones.

Lists `GET /v1/events` (newest first, so paging with `starting_after` walks
back in time) for the platform and, with Stripe-Account, each configured
connected account, then admits and accepts them oldest first as a delivery
is (`Service.admit_and_accept`): an event already in the ledger is a
replay and changes nothing, so a rerun, or a backfill racing Stripe's own
retries, is safe. Stripe keeps events for 30 days; a window reaching
further is refused.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta

from webhooks import bootstrap
from webhooks.core import ingest
from webhooks.core.events import InvalidEvent
from webhooks.domains.stripe import api as stripe_api
from webhooks.infra.config import Settings
from webhooks.infra.db import connect
from webhooks.providers.stripe import NAME, parse

from . import durations, progress, table

RETENTION = timedelta(days=30)
# A live delivery of the same event holding its claim answers 409: wait for
# it to commit (or roll back, and take the event ourselves).
IN_PROGRESS_TRIES, IN_PROGRESS_WAIT_S = 10, 0.2
COLUMNS = ("seen", "new", "already had", "failed")

_KNOWN = """
SELECT event_id FROM webhook_events WHERE provider = %s AND event_id = ANY(%s)
"""


def fetch_events(
    api, settings: Settings, since: datetime, until: datetime | None, types: list[str]
) -> list[dict]:
    """Every event in the window, all accounts, oldest first."""
    window = {"gte": int(since.timestamp())}
    if until is not None:
        window["lt"] = int(until.timestamp())
    filters = {"created": window, **({"types": types} if types else {})}
    found = []
    for account in stripe_api.accounts(settings):
        listing = stripe_api.list_all(api, "/v1/events", account=account, **filters)
        shown = f"listing Stripe's events{f' of {account}' if account else ''}"
        newest_first = list(progress.bar(listing, desc=shown, unit=" events"))
        for evt in reversed(newest_first):
            if account:
                # Listed with Stripe-Account: it is that account's event, as a delivery would say.
                evt.setdefault("account", account)
            found.append(evt)
    return sorted(found, key=lambda evt: evt.get("created", 0))  # stable: page order kept


def apply(service: bootstrap.Service, evt: dict) -> tuple[str, ingest.Answer | None]:
    """One event admitted and accepted: 'new', 'already had' or 'failed'."""
    try:
        event = parse(json.dumps(evt))
    except InvalidEvent:
        return "failed", None
    for _ in range(IN_PROGRESS_TRIES):
        answer = service.admit_and_accept(NAME, event)
        if answer is not ingest.IN_PROGRESS:
            break
        time.sleep(IN_PROGRESS_WAIT_S)
    if answer.replayed:
        return "already had", answer
    return ("new" if answer.status == 200 else "failed"), answer


def summary(tally: dict[str, Counter]) -> str:
    total = sum(tally.values(), Counter())
    rows = [[event_type, *(counts[c] for c in COLUMNS)] for event_type, counts in sorted(tally.items())]
    return table.render(["type", *COLUMNS], [*rows, ["total", *(total[c] for c in COLUMNS)]])


def _known(settings: Settings, events: list[dict]) -> set[str]:
    with connect(settings) as conn:
        return {row[0] for row in conn.execute(_KNOWN, [NAME, [e["id"] for e in events]])}


def _dry_run(settings: Settings, events: list[dict]) -> int:
    known = _known(settings, events)
    tally: dict[str, Counter] = defaultdict(Counter)
    for evt in events:
        status = "already had" if evt["id"] in known else "new"
        tally[evt["type"]].update(["seen", status])
        if status == "new":
            created = datetime.fromtimestamp(evt["created"], UTC).isoformat()
            print(f"would apply  {created}  {evt['id']}  {evt['type']}  {evt.get('account') or ''}")
    print(summary(tally))
    return 0


def _apply_all(settings: Settings, events: list[dict]) -> int:
    service = bootstrap.build(settings, min_size=1, max_size=1)
    tally: dict[str, Counter] = defaultdict(Counter)
    failed: list[str] = []
    try:
        for evt in progress.bar(events, desc="applying", unit=" events"):
            status, answer = apply(service, evt)
            tally[evt.get("type", "?")].update(["seen", status])
            if status == "failed":
                failed.append(f"{evt.get('id')}: {answer.body if answer else 'not a valid event'}")
    finally:
        service.close()
    print(summary(tally))
    for line in failed:
        print(f"failed {line}", file=sys.stderr)
    return 1 if failed else 0


def _backfill(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    if args.since < datetime.now(UTC) - RETENTION:
        print("backfill: Stripe keeps events for 30 days; --since must be within them", file=sys.stderr)
        return 2
    try:
        api = stripe_api.client(settings)
        events = fetch_events(api, settings, args.since, args.until, args.types)
    except stripe_api.ApiNotConfigured as exc:
        print(f"backfill: {exc}", file=sys.stderr)
        return 2
    except stripe_api.ApiFailed as exc:
        print(f"backfill: {exc}; nothing applied", file=sys.stderr)
        return 2
    return (_dry_run if args.dry_run else _apply_all)(settings, events)


def _types(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def register(commands) -> None:
    backfill = commands.add_parser(
        "backfill", help="apply the events Stripe kept (30 days) that the ledger is missing"
    )
    backfill.add_argument(
        "--since", type=durations.instant, required=True, help="a span back from now (72h, 7d) or an ISO time"
    )
    backfill.add_argument("--until", type=durations.instant, help="end of the window (default: now)")
    backfill.add_argument(
        "--types", type=_types, default=[], help="comma-separated event types (up to 20, Stripe's limit)"
    )
    backfill.add_argument("--dry-run", action="store_true", help="list what would be new")
    backfill.set_defaults(func=_backfill)
