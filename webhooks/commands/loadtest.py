"""`python -m webhooks loadtest`: duplicate deliveries at load, then an audit of the database.

N realistic events of the provider (`--provider`, Stripe's by default: three
per Checkout payment) are each delivered K times over C concurrent
connections, signed as the provider signs them, by the retrying sender
(webhooks/traffic/sender.py). At the end: a summary of what was answered
and how fast, and the provider's audit of the ledger and its effects, which
fails the command unless every event took effect exactly once.
"""

from __future__ import annotations

import argparse
import sys

from webhooks.infra.config import Settings
from webhooks.infra.db import database_url
from webhooks.traffic import audit, github, report, sender, shopify, standard, stripe

from . import sending
from .errors import CommandError

# Each provider's traffic, all alike (webhooks/traffic/plugin.py).
TRAFFIC = {
    traffic.provider: traffic
    for traffic in (
        stripe.TRAFFIC,
        standard.TRAFFIC,
        github.TRAFFIC,
        shopify.TRAFFIC,
    )
}


def register(subparsers) -> None:
    parser = sending.command_parser(
        subparsers,
        "loadtest",
        __doc__,
        help="deliver N events K times each over C connections, then audit the database",
    )
    count = sending.positive_int
    parser.add_argument("--events", "-n", type=count, default=300, help="unique events (default %(default)s)")
    parser.add_argument(
        "--duplicates", "-k", type=count, default=4, help="deliveries of each event (default %(default)s)"
    )
    parser.add_argument(
        "--concurrency", "-c", type=count, default=16, help="concurrent connections (default %(default)s)"
    )
    parser.add_argument(
        "--order",
        choices=["together", "spread"],
        default="together",
        help="together: an event's copies are sent back to back and race each other "
        "(default); spread: all deliveries shuffled",
    )
    parser.add_argument(
        "--jitter-ms", type=float, default=0.0, help="random delay of up to this before each attempt"
    )
    parser.add_argument(
        "--retry-budget",
        type=count,
        default=sender.Retry.budget,
        help="attempts per delivery before giving up (default %(default)s)",
    )
    parser.add_argument(
        "--no-audit",
        action="store_true",
        help="skip the database audit (it needs the service's DATABASE_URL)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    secret = sending.secret(args, "loadtest")
    traffic = TRAFFIC.get(args.provider)
    if traffic is None:
        raise CommandError(
            f"loadtest: no traffic for provider {args.provider}: add one (webhooks/traffic/plugin.py)"
        )
    sent = traffic.events(args.events)
    result = sender.deliver(
        sending.url(args),
        secret,
        sender.plan(sent, args.duplicates, together=args.order == "together"),
        args.concurrency,
        jitter_s=args.jitter_ms / 1000,
        retry=sender.Retry(budget=args.retry_budget),
        progress=sys.stderr.isatty(),
        provider=args.provider,
    )
    print(report.latency_table(result), end="\n\n")
    print(report.throughput_table(result, args.concurrency), end="\n\n")
    if args.no_audit:
        return 0 if result.dropped == 0 else 1
    url = database_url(Settings.from_env())
    checks = audit.checks(url, traffic, [out for _, out in sent], result.answers)
    for check in checks:
        print(f"{'PASS' if check.passed else 'FAIL'}  {check.name}: {check.detail}")
    failed = [check.name for check in checks if not check.passed]
    if failed:
        print(f"loadtest: audit failed: {'; '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0
