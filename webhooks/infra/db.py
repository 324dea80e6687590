"""Connections: where the database is, how a pool is opened, what an outage looks like."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import select
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
from psycopg import conninfo, errors
from psycopg.abc import Params, QueryNoTemplate
from psycopg.rows import Row, TupleRow, class_row
from psycopg_pool import ConnectionPool, PoolTimeout

from . import embedded
from .config import Settings
from .errors import PublicError

T = TypeVar("T")


class Connection(psycopg.Connection[TupleRow]):
    """The service's connections: each keeps one cursor (`cursor`), and a pooled one when it went idle."""

    reused: psycopg.Cursor[TupleRow] | None = None
    idle_since: float | None = None


Pool = ConnectionPool[Connection]


def database_url(settings: Settings) -> str:
    """The configured URL, or an embedded server's so a first run needs no set-up,
    with the network options it does not set itself."""
    url = settings.database_url or embedded.url(embedded.pgdata(settings.data_dir))
    return with_network_options(url, settings)


def network_options(settings: Settings) -> dict[str, str]:
    """libpq options that bound how long a silent database is waited for (Settings.db_dead_peer_s).

    With data unacknowledged (a statement sent, a COMMIT among them),
    tcp_user_timeout gives up; with nothing in flight (waiting for a result,
    idle in the pool), unanswered keepalive probes do. Either way the
    statement fails with a lost connection instead of waiting out the
    kernel's retransmissions. A live server acknowledges both at once, so a
    long statement is never cut by them.
    """
    dead_s = settings.db_dead_peer_s
    return {
        "keepalives": "1",
        "keepalives_idle": str(max(1, int(dead_s / 2))),
        "keepalives_interval": str(max(1, int(dead_s / 6))),
        "keepalives_count": "3",
        "tcp_user_timeout": str(int(dead_s * 1000)),
    }


def with_network_options(url: str, settings: Settings) -> str:
    """`url` with the network options it does not set itself."""
    given = conninfo.conninfo_to_dict(url)
    missing = {k: v for k, v in network_options(settings).items() if k not in given}
    return conninfo.make_conninfo(url, **missing)


def described(settings: Settings) -> str:
    """Which database, for a person: DATABASE_URL's name and host (no password), or the embedded folder."""
    if not settings.database_url:
        return f"the embedded PostgreSQL in {embedded.pgdata(settings.data_dir)}"
    info = conninfo.conninfo_to_dict(settings.database_url)
    where = f"{info.get('host') or 'the local socket'}:{info.get('port') or 5432}"
    return f"DATABASE_URL's database {info.get('dbname') or info.get('user') or ''} on {where}"


def connect(settings: Settings) -> Connection:
    """One autocommit connection for a command: no pool, no session limits."""
    return Connection.connect(database_url(settings), autocommit=True)


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


def _configure(values: dict[str, str]) -> Callable[[Connection], None]:
    def configure(conn: Connection) -> None:
        conn.execute(_CONFIGURE, [list(values), list(values.values())])

    return configure


# Without a check, a connection killed by the server is handed out and the
# request fails (docs/benchmark.md, "What the code cites").
# A connection idle longer than this gets a full round-trip check at checkout:
# a peer that vanished without a word (a NAT or firewall dropping the flow)
# leaves no trace on the socket.
IDLE_CHECK_AFTER_S = 5.0


def looks_alive(conn: Connection) -> bool:
    """False for a connection the server has closed, at a round trip only when in doubt.

    An idle connection has nothing to read unless the server spoke: a
    terminated backend (pg_terminate_backend, restart, idle timeout) sends its
    FATAL message and closes, which makes the socket readable. So a
    zero-timeout select() replaces the SELECT for connections returned
    moments ago, which is almost all of them under load.
    """
    idle_since = conn.idle_since
    if idle_since is not None and time.monotonic() - idle_since < IDLE_CHECK_AFTER_S:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
        if not readable:
            return True
    try:
        ConnectionPool.check_connection(conn)
    except psycopg.Error:
        return False
    return True


@contextlib.contextmanager
def connection(pool: Pool, timeout: float | None = None) -> Iterator[Connection]:
    """pool.connection(), skipping connections the server has closed.

    The pool's own check would, on a dead connection, wait a second before
    trying another (its reconnect backoff), longer than the whole pool wait:
    every request that met a connection killed by a restart or
    pg_terminate_backend answered 503. Here a dead one goes back to the pool,
    which replaces it, and the next is tried at once, within the same wait.
    """
    deadline = time.monotonic() + (pool.timeout if timeout is None else timeout)
    while True:
        conn = pool.getconn(timeout=max(deadline - time.monotonic(), 0.0))
        if looks_alive(conn):
            break
        pool.putconn(conn)
        if time.monotonic() > deadline:
            # Its check went unanswered past the wait (a silent server, given up
            # after the dead-peer time): the next idle one would only be as slow.
            raise PoolTimeout("no connection answered within the pool wait")
    try:
        with conn:
            yield conn
    finally:
        conn.idle_since = time.monotonic()
        pool.putconn(conn)


def cursor(conn: psycopg.Connection[TupleRow]) -> psycopg.Cursor[TupleRow]:
    """The connection's own cursor, made once, for statements whose rows are read at once.

    `conn.execute` makes a cursor (and its adapters' cache) per statement;
    reusing one cuts the CPU of a delivery's database path (docs/benchmark.md,
    "One reused cursor per connection"). A connection not made here (a
    test's) gets a cursor of its own each time.
    """
    if not isinstance(conn, Connection):
        return conn.cursor()
    if conn.reused is None:
        conn.reused = conn.cursor()
    return conn.reused


class NoRow(PublicError):
    """A statement that returns a row on every path returned none: a rule broken, not a value to use."""


def one(cur: psycopg.Cursor[Row]) -> Row:
    """The row of the statement `cur` has just run, one that returns a row on every path."""
    row = cur.fetchone()
    if row is None:
        raise NoRow("a statement that always returns a row returned none")
    return row


def one_as(conn: psycopg.Connection[Any], row: type[T], query: QueryNoTemplate, params: Params) -> T:
    """The one row `query` returns, as a `row`: a class whose fields are its columns, by name (class_row)."""
    with conn.cursor(row_factory=class_row(row)) as cur:
        return one(cur.execute(query, params))


@contextlib.contextmanager
def transaction(conn: Connection) -> Iterator[Connection]:
    """BEGIN ... COMMIT on a pooled (autocommit) connection from `connection`.

    Cheaper than psycopg's `conn.transaction()` (savepoint bookkeeping, a
    statement path of its own). On an exception nothing is committed:
    `connection` rolls the transaction back before the pool takes it.
    A handler's own `conn.transaction()` inside still nests as a savepoint.
    """
    cur = cursor(conn)
    cur.execute("BEGIN")
    yield conn
    cur.execute("COMMIT")


def open_pool(settings: Settings, url: str | None = None, **overrides: Any) -> Pool:
    options: dict[str, Any] = dict(
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
        timeout=settings.pool_timeout_s,
        # Checked at checkout by `connection` instead (see there). No
        # `reset` callback either: with one, every return is handed to a
        # pool thread through a queue, a thread switch per request.
        # While the server is down psycopg_pool doubles its reconnect delay
        # (1, 2, 4, 8 s...), so an outage of D seconds kept us down up to 2D.
        # Giving up after one pool wait lets the next request try at once.
        reconnect_timeout=settings.pool_timeout_s,
        configure=_configure(session_settings(settings)),
        kwargs={"autocommit": True},
        name=f"webhooks-{os.getpid()}",
    )
    options.update(overrides)
    # database_url() already carries the network options; a URL handed in gets them here.
    target = with_network_options(url, settings) if url else database_url(settings)
    pool = ConnectionPool(target, connection_class=Connection, open=False, **options)
    pool.open(wait=False)
    return pool


class LazyPool:
    """One pool per process, opened on first use, so it is never shared across a fork.

    gunicorn imports the app in its master and forks the workers: a pool
    opened before the fork would hand each worker the master's sockets.
    """

    def __init__(self, settings: Settings, **overrides: Any):
        self._settings = settings
        self._overrides = overrides
        self._lock = threading.Lock()
        self._pool: Pool | None = None
        self._pid: int | None = None

    def get(self) -> Pool:
        pool = self._pool
        if pool is None or self._pid != os.getpid():
            with self._lock:
                if self._pool is None or self._pid != os.getpid():
                    self._pool = open_pool(self._settings, **self._overrides)
                    self._pid = os.getpid()
                pool = self._pool
        return pool

    def close(self) -> None:
        if self._pool is not None and self._pid == os.getpid():
            self._pool.close()


_UNAVAILABLE = (
    # connection refused or lost, admin shutdown, 57014 statement timeout,
    # 53xxx disk full / out of resources
    psycopg.OperationalError,
    errors.IdleInTransactionSessionTimeout,  # 25P03
    PoolTimeout,
)


def server_silent(exc: BaseException) -> bool:
    """True when no server answered at all: no connection could be had, or one's peer fell silent.

    A server that refuses or ends a session says why (a SQLSTATE); a pool
    timeout, a refused or timed-out connection attempt, or a connection the
    kernel gave up on (Settings.db_dead_peer_s) carry none.
    """
    return isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None


def is_unavailable(exc: BaseException) -> bool:
    """True when the database, not the event, is why a delivery failed."""
    if isinstance(exc, errors.LockNotAvailable):
        return False
    return isinstance(exc, _UNAVAILABLE)


# What JSON (and Python's json module) can carry but PostgreSQL cannot store:
# a NUL in any text or jsonb value, a UTF-16 surrogate without its pair (not
# encodable as UTF-8), and NaN or an infinity (no such JSON number).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(value: Any) -> Any:
    """`value` (parsed JSON) as PostgreSQL's text and jsonb can hold it.

    A signed payload is stored as the text it came as, whatever it holds;
    what the rules copy out of it into columns and jobs (metadata, a
    reference, a name) goes through this, so that one value in a payload
    cannot make a paid order fail on every retry. Unstorable characters
    become U+FFFD; NaN and the infinities become the strings Python's json
    writes for them. Everything else is unchanged.
    """
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)  # "NaN", "Infinity", "-Infinity"
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable(v) for v in value]
    return value
