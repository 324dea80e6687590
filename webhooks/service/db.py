"""Connections: where the database is, how a pool is opened, what an outage looks like."""
from __future__ import annotations

import os

import psycopg
from psycopg import errors
from psycopg_pool import ConnectionPool, PoolTimeout

from . import embedded
from .config import Settings


def database_url(settings: Settings) -> str:
    """The configured URL, or an embedded server's so a first run needs no set-up."""
    if settings.database_url:
        return settings.database_url
    return embedded.url(embedded.pgdata(settings.data_dir))


def connect(settings: Settings) -> psycopg.Connection:
    """One autocommit connection for a command: no pool, no session limits."""
    return psycopg.connect(database_url(settings), autocommit=True)


def session_settings(settings: Settings) -> dict[str, str]:
    return {
        "lock_timeout": f"{settings.lock_timeout_ms}ms",
        "statement_timeout": f"{settings.statement_timeout_ms}ms",
        "idle_in_transaction_session_timeout": f"{settings.idle_in_transaction_timeout_ms}ms",
        # A killed client's claim is otherwise held until the statement ends.
        "client_connection_check_interval": "1000ms",
    }


# `SET x = %s` is not valid with server-side parameters; set_config is, and
# taking names as parameters too keeps this statement free of built-up SQL.
_CONFIGURE = """
SELECT set_config(name, value, false)
FROM unnest(%s::text[], %s::text[]) AS setting (name, value)
"""


def _configure(values: dict[str, str]):
    def configure(conn: psycopg.Connection) -> None:
        conn.execute(_CONFIGURE, [list(values), list(values.values())])

    return configure


def open_pool(settings: Settings, url: str | None = None, **overrides) -> ConnectionPool:
    options = dict(
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
        timeout=settings.pool_timeout_s,
        # Without a check, a connection killed by the server is handed out
        # and the request fails; measured: 4 of 8 after pg_terminate_backend.
        check=ConnectionPool.check_connection,
        # While the server is down psycopg_pool doubles its reconnect delay
        # (1, 2, 4, 8 s...), so an outage of D seconds kept us down up to 2D.
        # Giving up after one pool wait lets the next request try at once.
        reconnect_timeout=settings.pool_timeout_s,
        configure=_configure(session_settings(settings)),
        kwargs={"autocommit": True},
        name=f"webhooks-{os.getpid()}",
    )
    options.update(overrides)
    pool = ConnectionPool(url or database_url(settings), open=False, **options)
    pool.open(wait=False)
    return pool


_UNAVAILABLE = (
    # connection refused or lost, admin shutdown, 57014 statement timeout,
    # 53xxx disk full / out of resources
    psycopg.OperationalError,
    errors.IdleInTransactionSessionTimeout,  # 25P03
    PoolTimeout,
)


def is_unavailable(exc: BaseException) -> bool:
    """True when the database, not the event, is why a delivery failed."""
    if isinstance(exc, errors.LockNotAvailable):
        return False
    return isinstance(exc, _UNAVAILABLE)
