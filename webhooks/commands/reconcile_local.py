"""What reconcile reads from the local tables: every query in one place.

Rows are matched by Stripe object id alone (ids are globally unique); the
account is only read to know which Stripe-Account to ask. Read only: the
session refuses writes, so reconcile can never change what it checks.
"""

from __future__ import annotations

from datetime import datetime

import psycopg
from psycopg import sql

# kind -> (table, its Stripe object id column, when the row's state was set,
# the state that Stripe's listed objects are in). Payments, not fulfilments:
# a succeeded payment that is not an order (an invoice's, a held one) has no
# fulfilment, and is still a payment Stripe and we must agree on.
TABLES = {
    "payment": ("payments", "payment_id", "status_at", "status = 'succeeded'"),
    "refund": ("refunds", "refund_id", "updated_at", "status = 'succeeded'"),
    "dispute": ("disputes", "dispute_id", "created_at", "true"),
    "invoice": ("invoice_fulfilments", "invoice_id", "fulfilled_at", "true"),
}
# ids (of those given) that have a row in that state
_PRESENT = "SELECT {id} FROM {table} WHERE {id} = ANY(%s) AND {state}"
# (id, account) of the rows put in that state since a time
_RECENT = "SELECT {id}, account FROM {table} WHERE {at} >= %s AND {state}"


def _query(template: str, kind: str) -> sql.Composed:
    table, id_column, at, state = TABLES[kind]
    return sql.SQL(template).format(
        table=sql.Identifier(table),
        id=sql.Identifier(id_column),
        at=sql.Identifier(at),
        state=sql.SQL(state),  # a constant of this module, never input
    )


# A refund is also on record as its payment's cumulative amount_refunded:
# `charge.refunded` names the refunds only when the list is expanded.
_REFUNDED = "SELECT payment_id, amount_refunded FROM payments WHERE payment_id = ANY(%s)"


def read_only(conn: psycopg.Connection) -> None:
    conn.execute("SET default_transaction_read_only = on")


def present(conn: psycopg.Connection, kind: str, ids: list[str]) -> set[str]:
    return {row[0] for row in conn.execute(_query(_PRESENT, kind), [ids])}


def recent(conn: psycopg.Connection, kind: str, since: datetime) -> list[tuple[str, str]]:
    return conn.execute(_query(_RECENT, kind), [since]).fetchall()


def refunded(conn: psycopg.Connection, payment_ids: list[str]) -> dict[str, int]:
    return dict(conn.execute(_REFUNDED, [payment_ids]).fetchall())
