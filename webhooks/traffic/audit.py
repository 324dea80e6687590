"""After a load test: did the database end up with exactly-once effects?

Scoped to the events the test sent, so it can run against a database that
holds other traffic.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from webhooks.providers import Outgoing

from .plugin import Traffic


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


def checks(url: str, traffic: Traffic, sent: list[Outgoing], first_answers: dict[str, int]) -> list[Check]:
    """The provider's own checks (Traffic.audit), and no event answered as new twice.

    `first_answers` counts non-replayed 200s per event id. A first answer can
    be missing (the client gave up on a 200 that committed, and the retry was
    answered from the ledger), but never doubled.
    """
    with psycopg.connect(url, autocommit=True) as conn:
        counts = traffic.audit(conn, sent)
    twice = sorted(event_id for event_id, n in first_answers.items() if n > 1)
    said = f"{len(twice)} events answered as new more than once" + (f" (e.g. {twice[0]})" if twice else "")
    return [
        *(Check(name, n == 0, f"{n} violations") for name, n in counts.items()),
        Check("no event answered as new twice", not twice, said),
    ]
