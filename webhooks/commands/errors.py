"""What a command's failure looks like to the person who ran it: one line, non-zero exit.

Every command runs through `run`, which turns each mistake a user can fix
(a setting, a file, the database) into the one line that names it; only a
bug also logs its short traceback.
"""

from __future__ import annotations

import os
import sys
import time

import psycopg
import structlog
from psycopg import errors as sqlstate

from webhooks.infra import embedded, migrate
from webhooks.infra.config import SettingError, Settings
from webhooks.infra.db import database_url, described
from webhooks.infra.logs import public_message

log = structlog.get_logger(__name__)

# A statement naming a table, function or column the database does not have:
# a schema behind the code, unless the schema is current (then it is a bug).
_SCHEMA_BEHIND = (sqlstate.UndefinedTable, sqlstate.UndefinedFunction, sqlstate.UndefinedColumn)
# How long a lost embedded server is given to finish stopping.
_STOPPING_S = 3.0
# What a shell reports for a program that a closed pipe ended (128 + SIGPIPE).
_PIPE_CLOSED = 141


class CommandError(Exception):
    """A mistake the user can fix; its message is the whole answer."""


def _one_line(exc: BaseException) -> str:
    return " ".join(public_message(exc).split())[:400]


def _database() -> str:
    try:
        return described(Settings.from_env())
    except SettingError:
        return "the database"


def _embedded_stopped() -> str | None:
    """Said when the embedded server this command used is gone: `bin/serve` stops the one it started."""
    try:
        settings = Settings.from_env()
    except SettingError:
        return None
    folder = embedded.pgdata(settings.data_dir)
    if settings.database_url:
        return None
    # A fast stop ends the connections first and the server a moment later.
    deadline = time.monotonic() + _STOPPING_S
    while embedded.running(folder):
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)
    return (
        f"the embedded PostgreSQL in {folder} stopped (bin/serve stops the one it started when it exits; "
        "`webhooks db url` starts it)"
    )


def not_migrated() -> str:
    return f"the database is not migrated ({_database()}): run `webhooks migrate` first"


def _schema_current() -> bool:
    try:
        with psycopg.connect(database_url(Settings.from_env()), connect_timeout=5) as conn:
            return migrate.is_current(conn)
    except psycopg.Error:
        return False


def explained(exc: Exception) -> str | None:
    """The line for a mistake the user can fix, or None for a bug."""
    if isinstance(exc, (CommandError, SettingError)):
        return str(exc)
    if isinstance(exc, _SCHEMA_BEHIND) and not _schema_current():
        return not_migrated()
    if isinstance(exc, psycopg.OperationalError):
        return _embedded_stopped() or f"cannot use the database ({_database()}): {_one_line(exc)}"
    if isinstance(exc, OSError):
        # A file named on the command line that is missing, a folder or
        # unreadable: the user's to fix, and its frames would say nothing.
        return f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else _one_line(exc)
    return None


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the exit's own flush into the closed pipe says nothing."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def run(func, args) -> int:
    try:
        code = func(args)
        sys.stdout.flush()  # a reader gone (`| head`) is found here, not in the exit's own flush
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `events list | head`: the reader had all it wanted. Not a failure to report.
        _quiet_stdout()
        return _PIPE_CLOSED
    except Exception as exc:
        message = explained(exc)
        if message is None:
            # A bug, not a mistake: the short traceback goes to the log for a report.
            log.error("command_failed", exc_info=exc)
            message = f"{type(exc).__name__}: {_one_line(exc)}"
    print(f"error: {message}", file=sys.stderr)
    return 1
