"""`python -m webhooks subscriptions show SUB_ID | sweep`.

One subscription's mirror and access; telling the flips time alone made.
"""

from __future__ import annotations

import argparse
import sys

from webhooks.domains.stripe import access
from webhooks.infra.config import Settings
from webhooks.infra.db import connect

from . import table

_MIRROR = """
SELECT subscription_id, account, status, status_at, customer, cancel_at_period_end, cancel_at,
       canceled_at, trial_end, pause_behavior, pause_resumes_at, current_period_start,
       current_period_end, paid_through, revoked_at, revoked_reason, latest_invoice,
       (SELECT i.invoice_id || ' ' || coalesce(i.status, 'seen')
        FROM invoices i
        WHERE i.invoice_id = s.latest_invoice OR i.subscription_id = s.subscription_id
        ORDER BY i.invoice_id = s.latest_invoice DESC, i.status_at DESC NULLS LAST
        LIMIT 1) AS latest_invoice_status,
       (SELECT grace || ' grace, ' || renewal_margin || ' renewal margin'
        FROM subscription_access_settings) AS access_settings
FROM subscriptions s
WHERE subscription_id = %s
"""


def _show(args: argparse.Namespace) -> int:
    with connect(Settings.from_env()) as conn:
        cursor = conn.execute(_MIRROR, [args.subscription_id])
        row = cursor.fetchone()
        if row is None:
            print(
                f"no subscription {args.subscription_id} in the mirror",
                file=sys.stderr if args.json else sys.stdout,
            )
            return 1
        decision = access.decision(conn, args.subscription_id)
    mirror = dict(zip((c.name for c in cursor.description or ()), row, strict=True))
    if args.json:
        table.print_json({**mirror, "access": decision})
        return 0
    for column, value in mirror.items():
        print(f"{column:<22} {'-' if value in (None, '') else value}")
    verdict = "has access" if decision.has_access else "no access"
    until = f" until {decision.access_until}" if decision.access_until else ""
    print(f"{'access':<22} {verdict} ({decision.reason}){until}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    with connect(Settings.from_env()) as conn:
        told = access.sweep(conn)
    print(f"told {told} access changes")
    return 0


def register(commands) -> None:
    subscriptions = commands.add_parser(
        "subscriptions", help="the subscription mirror and its access decision"
    )
    actions = subscriptions.add_subparsers(dest="action", required=True)
    show = actions.add_parser("show", help="one subscription's mirror, latest invoice and access")
    show.add_argument("subscription_id", metavar="SUB_ID")
    table.add_json(show)
    show.set_defaults(func=_show)
    actions.add_parser(
        "sweep",
        help="enqueue subscription.access_changed for access that time alone ended or began"
        " (every outbox worker does it each WEBHOOK_ACCESS_SWEEP_SECONDS)",
    ).set_defaults(func=_sweep)
