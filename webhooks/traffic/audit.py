"""After a load test: did the database end up with exactly-once effects?

Scoped to the events and payments the test sent, so it can run against a
database that holds other traffic.
"""
from __future__ import annotations

from dataclasses import dataclass

import psycopg

from . import samples
from .plugin import Traffic
from webhooks.web.app import PROVIDER
from webhooks.providers import Outgoing

_LEDGER = """
SELECT count(*) FILTER (WHERE status = 'completed'),
       count(*) - count(DISTINCT event_id)
FROM webhook_events
WHERE provider = %s AND event_id = ANY(%s)
"""

_FULFILMENTS = """
SELECT count(*), count(DISTINCT payment_id)
FROM fulfilments
WHERE payment_id = ANY(%s)
"""


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


def audit(
    conn: psycopg.Connection,
    provider: str,
    event_ids: set[str],
    payment_ids: set[str],
    first_answers: dict[str, int],
) -> list[Check]:
    """The exactly-once checks; `first_answers` counts non-replayed 200s per event id.

    A first answer can be missing (the client gave up on a 200 that committed,
    and the retry was answered from the ledger), but never doubled.
    """
    completed, duplicate_rows = conn.execute(_LEDGER, [provider, list(event_ids)]).fetchone()
    fulfilled, distinct = conn.execute(_FULFILMENTS, [list(payment_ids)]).fetchone()
    twice = _twice(first_answers)
    return [
        Check(
            "every event completed",
            completed == len(event_ids),
            f"{completed} of {len(event_ids)} events completed in the ledger",
        ),
        Check(
            "no event completed twice",
            not twice and duplicate_rows == 0,
            _answered_twice(twice) + f", {duplicate_rows} duplicate ledger rows",
        ),
        Check(
            "fulfilments == distinct payments",
            fulfilled == distinct == len(payment_ids),
            f"{fulfilled} fulfilment rows for {distinct} of {len(payment_ids)} payments",
        ),
    ]


def audit_events(url: str, events: list[dict], first_answers: dict[str, int]) -> list[Check]:
    """`audit` for Stripe events made by samples.payment_stream, on a new connection to `url`."""
    event_ids = {evt["id"] for evt in events}
    payment_ids = {samples.payment_id(evt) for evt in events}
    with psycopg.connect(url, autocommit=True) as conn:
        return audit(conn, PROVIDER, event_ids, payment_ids, first_answers)


def _twice(first_answers: dict[str, int]) -> list[str]:
    return sorted(event_id for event_id, n in first_answers.items() if n > 1)


def _answered_twice(twice: list[str]) -> str:
    return f"{len(twice)} events answered as new more than once" + (f" (e.g. {twice[0]})" if twice else "")


def audit_traffic(
    url: str, plugin: Traffic, sent: list[Outgoing], first_answers: dict[str, int]
) -> list[Check]:
    """The provider's own checks (traffic.Traffic.audit), and no event answered as new twice."""
    with psycopg.connect(url, autocommit=True) as conn:
        counts = plugin.audit(conn, sent)
    twice = _twice(first_answers)
    return [
        *(Check(name, n == 0, f"{n} violations") for name, n in counts.items()),
        Check("no event answered as new twice", not twice, _answered_twice(twice)),
    ]
