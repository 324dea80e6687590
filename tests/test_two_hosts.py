"""Two service hosts and two outbox workers, each on a host of its own, against one PostgreSQL.

Every web process is stateless, so hosts add up: a duplicate storm sent to
both service hosts at once, every event's copies racing across them, ends
with each event completed once, each payment fulfilled once and each
shipped payment's job delivered by one of the two workers (tests/support/hosts.py).
`python -m bench.hosts` runs the same at full size for docs/benchmark.md.
"""

from __future__ import annotations

import pytest

from tests.support import hosts

# Hosts of their own (ip netns, as root) and a PostgreSQL server of their own.
pytestmark = pytest.mark.system


def test_a_storm_across_two_hosts_and_two_workers_takes_effect_once_and_ships_every_payment():
    hosts.require()
    with hosts.two_hosts() as (here, web):
        run = hosts.storm(here, web, events=90, copies=2, concurrency=8)
    assert run.passed(), [*run.verdict.checks(), run.audit]
    assert all(result.dropped == 0 for result in run.results)
    # Both hosts won claims: the race really was across hosts.
    assert run.claimed(0) > 0 and run.claimed(1) > 0
    assert run.verdict.outbox_checked and run.outbox.expected
