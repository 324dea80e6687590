"""What a command's failure looks like to the person who ran it: one line, non-zero exit."""

from __future__ import annotations

import sys

import psycopg
import structlog

from webhooks.infra.logs import public_message

log = structlog.get_logger(__name__)


class CommandError(Exception):
    """A mistake the user can fix; its message is the whole answer."""


def _one_line(exc: BaseException) -> str:
    return " ".join(public_message(exc).split())[:400]


def run(func, args) -> int:
    try:
        return func(args)
    except CommandError as exc:
        message = str(exc)
    except psycopg.OperationalError as exc:
        message = f"cannot use the database: {_one_line(exc)}"
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        # A file named on the command line that is missing, a folder or
        # unreadable: the user's to fix, and its frames would say nothing.
        message = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else _one_line(exc)
    except Exception as exc:
        # A bug, not a mistake: the short traceback goes to the log for a report.
        log.error("command_failed", exc_info=exc)
        message = f"{type(exc).__name__}: {_one_line(exc)}"
    print(f"error: {message}", file=sys.stderr)
    return 1
