"""After a load test: did the database end up with exactly-once effects?

Scoped to the events the test sent, so it can run against a database that
holds other traffic.
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg

from webhooks.providers import Outgoing

from .checker import Answer, Check, check
from .plugin import Traffic


def checks(url: str, traffic: Traffic, sent: list[Outgoing], answers: Iterable[Answer]) -> list[Check]:
    """The provider's own checks (Traffic.audit), and the history checker's verdict on the answers.

    A first answer can be missing (the client gave up on a 200 that
    committed, and the retry was answered from the ledger), but never doubled.
    """
    with psycopg.connect(url, autocommit=True) as conn:
        counts = traffic.audit(conn, sent)
        verdict = check(conn, answers)
    return [
        *(Check(name, n == 0, f"{n} violations") for name, n in counts.items()),
        *verdict.checks(),
    ]
