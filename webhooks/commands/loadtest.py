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

from webhooks.bootstrap import PROVIDERS
from webhooks.infra.config import Settings
from webhooks.infra.db import database_url
from webhooks.traffic import audit, github, plugin, report, sender, shopify, standard, stripe
from webhooks.web import startup

from . import progress, sending
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
    # Marked as test traffic: a worker running beside the service sends none of their jobs.
    sent = plugin.marked(traffic.events(args.events))
    url = sending.url(args)
    result = sender.deliver(
        url,
        secret,
        sender.plan(sent, args.duplicates, together=args.order == "together"),
        args.concurrency,
        jitter_s=args.jitter_ms / 1000,
        retry=sender.Retry(budget=args.retry_budget),
        progress=progress.watched(),
        provider=args.provider,
    )
    if not result.accepted:
        # Not a load test at all: no table to show, and the audit would only blame the database.
        raise CommandError(f"loadtest: no delivery to {url} was accepted: {_cause(result, args.provider)}")
    print(report.latency_table(result), end="\n\n")
    print(report.throughput_table(result, args.concurrency), end="\n\n")
    failed = [] if args.no_audit else _audit(traffic, sent, result)
    if result.dropped:
        print(
            f"loadtest: {result.dropped} of {result.deliveries} deliveries were never accepted: "
            f"{_cause(result, args.provider)}",
            file=sys.stderr,
        )
    elif failed:
        print(f"loadtest: audit failed: {'; '.join(failed)}", file=sys.stderr)
    return 1 if failed or result.dropped else 0


def _audit(traffic, sent, result: sender.Result) -> list[str]:
    """The audit's checks printed; the names of those that failed."""
    checks = audit.checks(
        database_url(Settings.from_env()), traffic, [out for _, out in sent], result.answers
    )
    for check in checks:
        print(f"{'PASS' if check.passed else 'FAIL'}  {check.name}: {check.detail}")
    return [check.name for check in checks if not check.passed]


def _cause(result: sender.Result, provider: str) -> str:
    """The commonest failed answer, and what usually causes it."""
    [(answer, count)] = result.failures.most_common(1)
    setting = PROVIDERS[provider].secret_setting
    hints = {
        f"503 {startup.SECRET_MISSING}": f"the service has no {setting}: set it where the service runs",
        "400 invalid_signature": f"the service's {setting} is not the one signed with (--secret, {setting})",
        f"503 {startup.SCHEMA_NOT_CURRENT}": "the service's database is not migrated: run `webhooks migrate`",
    }
    hint = (
        "is the service running there? (./bin/serve, PORT or --url)" if answer.startswith("no answer") else ""
    )
    hint = hints.get(answer, hint)
    return f"{answer} ({count} times){'; ' + hint if hint else ''}"
