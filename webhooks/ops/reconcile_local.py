"""What reconcile reads from the local tables: every query in one place.

Rows are matched by Stripe object id alone (ids are globally unique); the
account is only read to know which Stripe-Account to ask. Read only: the
session refuses writes, so reconcile can never change what it checks.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg


@dataclass(frozen=True)
class Local:
    # ids (of those given) that have a row
    present: str
    # (id, account) of rows recorded since a time
    recent: str


TABLES = {
    "fulfilment": Local(
        present="SELECT payment_id FROM fulfilments WHERE payment_id = ANY(%s)",
        recent="SELECT payment_id, account FROM fulfilments WHERE fulfilled_at >= %s",
    ),
    "refund": Local(
        present="SELECT refund_id FROM refunds WHERE refund_id = ANY(%s)",
        recent="SELECT refund_id, account FROM refunds WHERE created_at >= %s",
    ),
    "dispute": Local(
        present="SELECT dispute_id FROM disputes WHERE dispute_id = ANY(%s)",
        recent="SELECT dispute_id, account FROM disputes WHERE created_at >= %s",
    ),
    "invoice": Local(
        present="SELECT invoice_id FROM invoice_fulfilments WHERE invoice_id = ANY(%s)",
        recent="SELECT invoice_id, account FROM invoice_fulfilments WHERE fulfilled_at >= %s",
    ),
}

# A refund is also on record as its payment's cumulative amount_refunded:
# `charge.refunded` names the refunds only when the list is expanded.
_REFUNDED = "SELECT payment_id, amount_refunded FROM payments WHERE payment_id = ANY(%s)"


def read_only(conn: psycopg.Connection) -> None:
    conn.execute("SET default_transaction_read_only = on")


def present(conn: psycopg.Connection, kind: str, ids: list[str]) -> set[str]:
    return {row[0] for row in conn.execute(TABLES[kind].present, [ids])}


def recent(conn: psycopg.Connection, kind: str, since: datetime) -> list[tuple[str, str]]:
    return conn.execute(TABLES[kind].recent, [since]).fetchall()


def refunded(conn: psycopg.Connection, payment_ids: list[str]) -> dict[str, int]:
    return dict(conn.execute(_REFUNDED, [payment_ids]).fetchall())
