"""`python -m webhooks maintenance`: the monthly partitions, made ahead and, with a window, dropped.

The worker makes the coming months too (hourly); run this from cron or a
systemd timer, daily, where the months should be dropped by age rather than
by `prune` (docs/operating.md), or where no worker runs. Each month's
partition of webhook_payloads and of pgqueuer_log (the outbox's log) must
exist before its first row, and none is made by a delivery
(webhooks/core/partitions.py).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from webhooks.core import partitions
from webhooks.infra.config import Settings
from webhooks.infra.db import connect

from . import durations
from .prune import drop_months, dropped_line, too_recent

# Each month ahead is a table made now: a typo of a few zeros would make thousands.
_MOST_AHEAD = 24


def _months_ahead(text: str) -> int:
    try:
        months = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of months, not {text!r}") from None
    if not 0 <= months <= _MOST_AHEAD:
        raise argparse.ArgumentTypeError(f"from 0 to {_MOST_AHEAD} months, not {months}")
    return months


def _maintain(args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    if args.drop_older_than is not None and too_recent("--drop-older-than", args.drop_older_than, False):
        return 2
    with connect(Settings.from_env()) as conn:
        made = partitions.make(conn, now, ahead=args.months_ahead)
        print(f"made {len(made)} month(s): {' '.join(made) or 'all there'}")
        if args.drop_older_than is not None:
            print(dropped_line(drop_months(conn, now - args.drop_older_than)))
    return 0


def register(commands) -> None:
    maintenance = commands.add_parser(
        "maintenance",
        help="make the coming months' partitions (payloads, outbox log); drop those past --drop-older-than",
    )
    maintenance.add_argument(
        "--months-ahead",
        type=_months_ahead,
        default=partitions.MONTHS_AHEAD,
        help=f"months made after this one (default {partitions.MONTHS_AHEAD})",
    )
    maintenance.add_argument(
        "--drop-older-than",
        type=durations.span,
        default=None,
        help="drop the months wholly older than this, e.g. 90d (default: drop none)",
    )
    maintenance.set_defaults(func=_maintain)
