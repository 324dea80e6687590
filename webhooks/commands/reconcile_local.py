"""What reconcile reads from the local tables: every query in one place.

Rows are matched by Stripe object id alone (ids are globally unique); the
account is only read to know which Stripe-Account to ask. Which table and
columns hold a kind of row is the Stripe object's (lookups.Rows). Read only:
the session refuses writes, so reconcile can never change what it checks.
"""

from __future__ import annotations

from datetime import datetime

import psycopg
from psycopg import sql

from webhooks.domains.stripe.lookups import Rows

# ids (of those given) that have a row in that state
_PRESENT = "SELECT {id} FROM {table} WHERE {id} = ANY(%s) AND {state}"
# (id, account) of the rows put in that state since a time
_RECENT = "SELECT {id}, account FROM {table} WHERE {at} >= %s AND {state}"


def _query(template: str, rows: Rows) -> sql.Composed:
    return sql.SQL(template).format(
        table=sql.Identifier(rows.table),
        id=sql.Identifier(rows.id_column),
        at=sql.Identifier(rows.at),
        state=sql.SQL(rows.state),  # a constant of the object's module, never input
    )


# A refund is also on record as its payment's cumulative amount_refunded:
# `charge.refunded` names the refunds only when the list is expanded.
_REFUNDED = "SELECT payment_id, amount_refunded FROM payments WHERE payment_id = ANY(%s)"


def read_only(conn: psycopg.Connection) -> None:
    conn.execute("SET default_transaction_read_only = on")


def present(conn: psycopg.Connection, rows: Rows, ids: list[str]) -> set[str]:
    return {row[0] for row in conn.execute(_query(_PRESENT, rows), [ids])}


def recent(conn: psycopg.Connection, rows: Rows, since: datetime) -> list[tuple[str, str]]:
    return conn.execute(_query(_RECENT, rows), [since]).fetchall()


def refunded(conn: psycopg.Connection, payment_ids: list[str]) -> dict[str, int]:
    return dict(conn.execute(_REFUNDED, [payment_ids]).fetchall())
