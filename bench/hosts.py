"""`python -m bench.hosts`: two service hosts and two outbox workers against one PostgreSQL.

Each process runs on a host of its own (a network namespace joined by a
veth pair, tests/support/netns.py; root only), the database is a private
PostgreSQL 15 listening on the hosts' veth addresses (tests/support/pg_servers.py).
The same duplicate storm (N Checkout payments' events, K copies each) is
sent first to one service host alone, the baseline, then split over both:
every event's K copies divided between the two hosts at once. After each,
the workers drain the outbox and the history checker audits the run: each
event once, each payment fulfilled once, each shipped payment's job
delivered. Prints a markdown section for docs/benchmark.md; exits 1 if an
audit fails.
"""

from __future__ import annotations

import argparse
import os
import sys

from tests.support import hosts
from webhooks.traffic.report import markdown_table


def _rows(label: str, run: hosts.Run) -> list[list[str]]:
    rows = [
        [
            f"{label}, host {i + 1}",
            str(result.deliveries),
            f"{result.deliveries_per_s:.0f}",
            str(run.claimed(i)),
            f"{run.claimed(i) / result.elapsed_s:.0f}",
        ]
        for i, result in enumerate(run.results)
    ]
    deliveries = sum(result.deliveries for result in run.results)
    total = [f"{label}, total", str(deliveries), f"{deliveries / run.elapsed_s:.0f}"]
    return [*rows, [*total, str(run.events), f"{run.events_per_s:.0f}"]]


def _audit(label: str, run: hosts.Run) -> list[str]:
    checks = [(c.name, c.passed, c.detail) for c in run.verdict.checks()]
    checks += [(name, n == 0, f"{n} violations") for name, n in run.audit.items()]
    failed = [f"  - FAIL {name}: {detail}" for name, passed, detail in checks if not passed]
    return [
        f"- {label}: {'PASS' if not failed else 'FAIL'} ({len(checks)} checks): {run.verdict.summary()}; "
        f"every job in the outbox so far ({len(run.outbox.expected)}) delivered, the last "
        f"{run.drain_s:.1f} s after the storm",
        *failed,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.hosts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--events", "-n", type=int, default=900, help="unique events (default %(default)s)")
    parser.add_argument(
        "--duplicates", "-k", type=int, default=4, help="copies of each event, even (default %(default)s)"
    )
    parser.add_argument(
        "--concurrency", "-c", type=int, default=16, help="connections in all (default %(default)s)"
    )
    args = parser.parse_args(argv)
    if args.duplicates % 2 or args.concurrency % 2:
        parser.error("--duplicates and --concurrency are split over two hosts: give even numbers")
    reason = hosts.unavailable()
    if reason:
        print(f"bench.hosts: {reason}", file=sys.stderr)
        return 2
    with hosts.two_hosts() as (here, web):
        hosts.storm(here, web, 150, 2, args.concurrency // 2)  # warms workers, pools and caches
        alone = hosts.storm(here, web[:1], args.events, args.duplicates, args.concurrency)
        both = hosts.storm(here, web, args.events, args.duplicates // 2, args.concurrency // 2)
    print(f"$ python -m bench.hosts -n {args.events} -k {args.duplicates} -c {args.concurrency}\n")
    print(
        markdown_table(
            ["storm", "deliveries", "deliveries/s", "events claimed", "events/s"],
            [*_rows("one host", alone), *_rows("two hosts", both)],
        )
    )
    print(
        f"\nTwo hosts against one: {both.events_per_s / alone.events_per_s:.2f}x the events/s, "
        f"on {os.cpu_count()} cores shared by every process.\n"
    )
    print("\n".join([*_audit("one host", alone), *_audit("two hosts", both)]))
    return 0 if alone.passed() and both.passed() else 1


if __name__ == "__main__":
    sys.exit(main())
