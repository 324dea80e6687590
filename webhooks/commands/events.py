"""`python -m webhooks events list|show|reprocess`: the ledger for an operator."""

from __future__ import annotations

import argparse
import collections
import getpass
import sys

from webhooks import bootstrap
from webhooks.core import bulk, history
from webhooks.infra import logs
from webhooks.infra.config import Settings
from webhooks.infra.db import connect
from webhooks.providers import stripe

from . import durations, table
from .errors import CommandError


def _list(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= history.MAX_PAGE:
        raise CommandError(f"--limit: from 1 to {history.MAX_PAGE} events a page")
    try:
        after = history.Cursor.parse(args.after) if args.after else None
        with connect(Settings.from_env()) as conn:
            rows = history.events(
                conn, args.status, args.type, args.since, args.limit, args.provider, args.search, after
            )
    except history.BadSearch as exc:
        raise CommandError(str(exc)) from None
    if args.json:
        table.print_json(rows)
        return 0
    print(
        f"{'received_at':<26} {'event_id':<32} {'provider':<9} {'type':<34} {'status':<10} "
        f"{'outcome':<18} failures"
    )
    for row in rows:
        print(
            f"{row.received_at.isoformat(timespec='seconds'):<26} {row.event_id:<32} {row.provider:<9} "
            f"{row.event_type or '-':<34} {row.status:<10} {row.outcome or '-':<18} {row.failures}"
        )
    if len(rows) == args.limit:
        last = rows[-1]
        print(f"next page: --after '{history.Cursor(last.received_at, last.event_id)}'")
    return 0


def _show(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    with connect(settings) as conn:
        detail = history.event(conn, args.provider, args.event_id)
    if detail is None:
        print(
            f"no event {args.event_id} in the ledger or its failures",
            file=sys.stderr if args.json else sys.stdout,
        )
        return 1
    if args.show_personal:
        # The only way to personal data on screen: who, which event, in the log.
        logs.to_stderr().warning(
            "personal_data_shown",
            command="events show",
            provider=detail.provider,
            event_id=detail.event_id,
            user=getpass.getuser(),
        )
    else:
        detail = history.shown(detail, bootstrap.shown(settings, bootstrap.handlers(settings)))
    if args.json:
        table.print_json(detail)
        return 0
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
        if failure.raised_at:
            print(f"    raised at {failure.raised_at}")
    print("payload")
    print(history.readable(detail.payload) or "(none)")
    return 0


def _reprocess(args: argparse.Namespace) -> int:
    """One event by its id, or every failed one a filter selects (`--status failed`)."""
    if args.event_id is None:
        return _reprocess_failed(args)
    if args.status or args.since or args.type or args.dry_run or args.list:
        raise CommandError("give an event id, or --status failed (or refused) with its filters, not both")
    service = bootstrap.build(min_size=1, max_size=1)
    try:
        answer = service.reprocess(args.provider or stripe.NAME, args.event_id, args.allow_ignored)
    except bootstrap.NotReprocessed as exc:
        print(exc, file=sys.stderr if exc.refused else sys.stdout)
        return 2 if exc.refused else 1
    finally:
        service.close()
    replayed = " (already completed: stored answer)" if answer.replayed else ""
    print(f"{answer.status} {answer.body}{replayed}")
    return 0 if answer.status == 200 else 1


def _reprocess_failed(args: argparse.Namespace) -> int:
    """The failed (or refused) events the filter selects (history.to_reprocess, as /admin's), oldest first."""
    if args.status not in ("failed", "refused"):
        raise CommandError("give an event id, or --status failed (or refused) to reprocess every such event")
    service = bootstrap.build(min_size=1, max_size=1)
    try:
        with connect(service.settings) as conn:
            selected = history.to_reprocess(
                conn, args.since, args.type, args.provider, refused=args.status == "refused"
            )
        if args.dry_run or args.list:
            print(f"would reprocess {len(selected)} {args.status} event(s)")
            if args.list:
                for row in selected:
                    print(f"{row.provider} {row.event_id} {row.event_type or '-'}")
                return 0
            # A summary whatever the backlog: one line per provider and type, the most first.
            counted = collections.Counter((row.provider, row.event_type or "-") for row in selected)
            for (provider, event_type), count in counted.most_common():
                print(f"{count:>9}  {provider} {event_type}")
            return 0
        return _run_job(service, args, selected)
    finally:
        service.close()


def _run_job(service: bootstrap.Service, args: argparse.Namespace, selected: list) -> int:
    """The selection as a bulk job (core/bulk.py), as /admin starts one, run here a batch at a time.

    Stopped midway (Ctrl-C, a lost connection), the job stays running: the
    worker takes up what is left, and no finished event runs again.
    """
    selection = {"status": args.status, **_fields(args)}
    with connect(service.settings) as conn:
        job_id = bulk.start(conn, bulk.REPROCESS, selection, ((r.provider, r.event_id) for r in selected))
        log = logs.to_stderr()
        # Before the first event runs; the closing line has the counts.
        log.info(
            "admin_action",
            action="bulk_reprocess_started",
            actor=getpass.getuser(),
            job_id=job_id,
            count=len(selected),
            **selection,
        )
        while True:
            batch = service.run_bulk_batch(conn, job_id)
            for item in batch.ran:
                print(f"{item.provider} {item.event_id} {item.result}", flush=True)
            for job in batch.finished:
                bulk.audit("finished", job, log, actor=getpass.getuser())
            if not batch.ran:
                break
        ended = bulk.progress(conn, job_id)
    ran, completed = (ended.done, ended.ok) if ended else (0, 0)
    print(f"reprocessed {ran} {args.status} event(s): {completed} completed, {ran - completed} not")
    return 0 if completed == ran == len(selected) else 1


def _fields(args: argparse.Namespace) -> dict:
    """The filters given, as the job keeps them (since as a moment)."""
    found = {
        "provider": args.provider,
        "type": args.type,
        "since": args.since and args.since.isoformat(),
        "allow_ignored": args.allow_ignored or None,
    }
    return {name: value for name, value in found.items() if value}


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
    listing.add_argument("--limit", type=int, default=50, help=f"events a page (at most {history.MAX_PAGE})")
    listing.add_argument("--provider", choices=_PROVIDERS, help="only this provider's events")
    listing.add_argument(
        "--search",
        metavar="ID",
        help="an event id, or one its payload holds: payment, session, order, customer, refund, dispute",
    )
    listing.add_argument(
        "--after", metavar="CURSOR", help="the next page: the cursor the previous one printed last"
    )
    table.add_json(listing)
    listing.set_defaults(func=_list)

    show = actions.add_parser("show", help="payload, outcome, attempts and failures of one event")
    show.add_argument("event_id", metavar="EVT_ID")
    show.add_argument("--provider", default=stripe.NAME, choices=_PROVIDERS)
    show.add_argument(
        "--show-personal",
        action="store_true",
        help="show emails, phone numbers, addresses and card details in clear (logged: who, which event)",
    )
    table.add_json(show)
    show.set_defaults(func=_show)

    again = actions.add_parser(
        "reprocess",
        help="re-run an event from its stored payload through the claim (a stored refusal is judged "
        "again), or every failed or refused one selected",
    )
    again.add_argument("event_id", metavar="EVT_ID", nargs="?")
    again.add_argument(
        "--provider",
        choices=_PROVIDERS,
        help="the event's provider (default stripe); with --status, a filter",
    )
    again.add_argument(
        "--status",
        choices=("failed", "refused"),
        help="every failed event the filters select; `refused`: every stored refusal (422), judged again",
    )
    again.add_argument("--type", help="with --status: only events of this type")
    again.add_argument("--since", type=durations.instant, help="with --status: received since (1h, 7d, ISO)")
    again.add_argument(
        "--dry-run",
        action="store_true",
        help="with --status: print the count, and how many of each provider and type; run none",
    )
    again.add_argument(
        "--list", action="store_true", help="with --status: print the count and each event; run none"
    )
    again.add_argument(
        "--allow-ignored",
        action="store_true",
        help="close the event as ignored even though no handler here takes its type",
    )
    again.set_defaults(func=_reprocess)
