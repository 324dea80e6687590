"""How many rows a table holds, where a condition holds: the count most assertions make."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from webhooks.core import partitions


def count_rows(conn, table: str, where: str = "TRUE", params: Sequence[object] = ()) -> int:
    """`SELECT count(*) FROM table WHERE where`, with `params` bound to the condition's placeholders.

    `table` and `where` are the test's own SQL text, never data: values go in `params`.
    """
    return conn.execute(f"SELECT count(*) FROM {table} WHERE {where}", params).fetchone()[0]


# The ledger's rows joined to their payloads (webhook_payloads, by month since
# migrations/0044): `SELECT event_id, payload FROM {LEDGER_WITH_PAYLOADS}`.
LEDGER_WITH_PAYLOADS = (
    "webhook_events e JOIN webhook_payloads p ON p.ledger_id = e.id AND p.received_at = e.received_at"
)


def month_holding(conn, table: str, at: datetime) -> partitions.Month:
    """The month of `table` (one of partitions.TABLES) whose partition holds `at`."""
    [month] = [m for m in partitions.months(conn) if m.table == table and m.first <= at < m.end]
    return month
