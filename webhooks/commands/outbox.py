"""`python -m webhooks outbox list|requeue|purge`: the outbox's jobs and dead letters for an operator.

On the service's own database (DATABASE_URL, else the embedded one), the
way every command here connects, rather than pgqueuer's `pgq`, which reads
its own settings and knows nothing of the embedded server. requeue and
purge act on dead letters only (status `failed`: the worker gave up after
WEBHOOK_OUTBOX_MAX_ATTEMPTS tries), selected by id, kind, last error or age; /admin's
requeue button runs the same function (core/outbox.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import psycopg

from webhooks.core import outbox
from webhooks.infra.config import Settings
from webhooks.infra.db import connect

from . import durations, table
from .errors import CommandError

_STATUSES = ("queued", "picked", outbox.DEAD)


def _list(args: argparse.Namespace) -> int:
    which = outbox.Jobs(status=args.status, kind=args.kind)
    with connect(Settings.from_env()) as conn:
        jobs = outbox.pending(conn, args.limit, which)
    if args.json:
        table.print_json(jobs)
        return 0
    rows = [
        [
            job.id,
            job.status,
            job.kind,
            job.attempts,
            job.created.isoformat(timespec="seconds"),
            job.idempotency_key,
        ]
        for job in jobs
    ]
    print(table.render(["id", "status", "kind", "attempts", "created", "idempotency key"], rows))
    return 0


def _dead_letters(args: argparse.Namespace) -> outbox.Jobs:
    """The dead letters the arguments name; none named at all is refused unless --all says every one."""
    if not (args.ids or args.kind or args.error is not None or args.older_than or args.all):
        raise CommandError(
            f"name the dead letters to {args.action}: job ids, --kind, --error, --older-than, or --all"
        )
    return outbox.Jobs(
        status=outbox.DEAD, kind=args.kind, ids=args.ids or None, before=args.older_than, error=args.error
    )


def _ids(ids: list[int]) -> str:
    return f": {' '.join(map(str, ids))}" if ids else ""


def _requeue(conn: psycopg.Connection, which: outbox.Jobs) -> tuple[list[int], str]:
    ids = outbox.requeue(conn, which)
    # A dead letter whose key is pending again (enqueued anew since) stays dead.
    left = [job.id for job in outbox.pending(conn, None, which)]
    return ids, f"; {len(left)} left dead, their keys pending again{_ids(left)}" if left else ""


def _purge(conn: psycopg.Connection, which: outbox.Jobs) -> tuple[list[int], str]:
    return outbox.purge(conn, which), ""


Action = Callable[[psycopg.Connection, outbox.Jobs], tuple[list[int], str]]


def _on_dead_letters(verb: str, done: str, act: Action, deletes: bool = False):
    """A command that does `act` to the dead letters named, or says which it would (--dry-run).

    One that `deletes` wants --yes. It exits 1 when `act` has a note (something left undone).
    """

    def command(args: argparse.Namespace) -> int:
        which = _dead_letters(args)
        if deletes and not (args.yes or args.dry_run):
            raise CommandError(f"{verb} deletes dead letters for good: pass --yes, or --dry-run to see which")
        with connect(Settings.from_env()) as conn:
            if args.dry_run:
                ids = [job.id for job in outbox.pending(conn, None, which)]
                print(f"would {verb} {len(ids)} dead letter(s){_ids(ids)}")
                return 0
            ids, note = act(conn, which)
        print(f"{done} {len(ids)} dead letter(s){_ids(ids)}{note}")
        return 1 if note else 0

    return command


def register(commands) -> None:
    jobs = commands.add_parser("outbox", help="list the outbox's jobs; requeue or purge its dead letters")
    actions = jobs.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="jobs not yet delivered, dead letters first")
    listing.add_argument(
        "--status", choices=_STATUSES, help=f"only jobs of this status ({outbox.DEAD}: dead letters)"
    )
    listing.add_argument("--kind", help="only jobs of this kind, e.g. order.fulfilled")
    listing.add_argument("--limit", type=int, default=50)
    table.add_json(listing)
    listing.set_defaults(func=_list)

    for name, func, help_text in (
        (
            "requeue",
            _on_dead_letters("requeue", "requeued", _requeue),
            "move dead letters back to queued, to try again",
        ),
        (
            "purge",
            _on_dead_letters("purge", "purged", _purge, deletes=True),
            "delete dead letters for good",
        ),
    ):
        action = actions.add_parser(name, help=help_text)
        action.add_argument("ids", metavar="JOB_ID", type=int, nargs="*", help="these dead letters")
        action.add_argument("--kind", help="dead letters of this kind")
        action.add_argument(
            "--error",
            metavar="TEXT",
            help="dead letters whose last failure said exactly this (as `outbox list` shows it)",
        )
        action.add_argument(
            "--older-than",
            metavar="SPAN",
            type=durations.instant,
            help="dead letters created before this (7d, or ISO)",
        )
        action.add_argument("--all", action="store_true", help="every dead letter")
        action.add_argument("--dry-run", action="store_true", help="print what would be done, do nothing")
        action.set_defaults(func=func)
    actions.choices["purge"].add_argument("--yes", action="store_true", help="really delete them")
