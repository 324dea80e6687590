"""structlog set-up: one JSON object per line on stdout, ours and the libraries' alike."""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import MutableMapping
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson
import psycopg
import structlog
from gunicorn import glogging
from structlog.typing import Processor

from . import personal
from .errors import PublicError

# The innermost frames say where it broke; the outer ones are the framework's.
_FRAMES = 8
_MESSAGE_CHARS = 300


def public_message(exc: BaseException) -> str:
    """What an error may say in a log line, `webhook_failures`, `events show`, /admin or a command's line.

    Only text written to name a field, a setting or a rule is shown as it
    is: a PublicError's, a connection or file error's (OSError, psycopg's
    client side), which names no data. A database error's text quotes the
    data it tripped on (a unique violation's `DETAIL: Key (email)=(...)`, a
    JSON cast's `CONTEXT: JSON data, line 1: ...`, the value in `invalid
    input syntax for type ...`), so it says only its SQLSTATE and the names
    (constraint, table, column) it concerns. Any other exception's text can
    quote a payload (a handler's `ValueError(f"no account for {email}")`,
    a codec's error naming the character): it says only where it was raised.
    """
    if isinstance(exc, psycopg.Error) and exc.sqlstate:
        diag = exc.diag
        names = [
            f"{what} {name}"
            for what, name in (
                ("constraint", diag.constraint_name),
                ("table", diag.table_name),
                ("column", diag.column_name),
            )
            if name
        ]
        return " ".join([f"SQLSTATE {exc.sqlstate}", *names])
    if isinstance(exc, (PublicError, psycopg.Error, OSError)):
        return str(exc)
    return _withheld(exc)


def _withheld(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = (
        f": raised at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}"
        if frames
        else ""
    )
    return f"text not shown, it may quote the payload{where}"


def short_traceback(
    exc_info: tuple[type[BaseException], BaseException, TracebackType | None],
) -> dict[str, Any]:
    """The exception's type, message and last frames as `file:line function`.

    Never locals and never source lines: the rich and better-exceptions
    renderers print locals, and a local can be a signing secret, a
    Stripe-Signature header or a payload with a customer's email.
    """
    exc_type, exc, tb = exc_info
    frames = traceback.extract_tb(tb)[-_FRAMES:]
    return {
        "type": exc_type.__name__,
        "message": public_message(exc)[:_MESSAGE_CHARS],
        "frames": [f"{frame.filename}:{frame.lineno} {frame.name}" for frame in frames],
    }


_SHARED: list[Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def _json_line(event: Any, **dumps_kw: Any) -> str:
    """A line's JSON: orjson, which writes a delivery's line in a fraction of json's CPU
    (docs/benchmark.md), and json for what orjson refuses (an int past 64 bits, a lone surrogate)."""
    try:
        return orjson.dumps(event, default=dumps_kw.get("default")).decode()
    except orjson.JSONEncodeError:
        return json.dumps(event, **dumps_kw)


def _scrub_personal(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Email addresses, phone numbers and street addresses out of a line's text (personal.py), the
    exception's message included: a PublicError's text, say, naming what a customer sent."""
    for key, value in event.items():
        if isinstance(value, str) and key not in _NOT_PERSONAL:
            event[key] = personal.scrub(value)
    exception = event.get("exception")
    if isinstance(exception, dict) and isinstance(exception.get("message"), str):
        exception["message"] = personal.scrub(exception["message"])
    return event


# Written by the logger itself, never from a payload.
_NOT_PERSONAL = frozenset({"timestamp", "level", "event", "logger"})

_RENDER: list[Processor] = [
    structlog.processors.ExceptionRenderer(short_traceback),
    _scrub_personal,
    structlog.processors.JSONRenderer(serializer=_json_line),
]


def to_stderr() -> Any:
    """A logger writing the same JSON lines to stderr: a command's audit line beside output that must
    stay parseable (`--json`)."""
    return structlog.wrap_logger(structlog.WriteLogger(sys.stderr), processors=[*_SHARED, *_RENDER])


def formatter() -> logging.Formatter:
    """A stdlib record as our JSON line (also gunicorn's own logs: gunicorn.conf.py)."""
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *_SHARED],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *_RENDER],
    )


def configure(level: str = "INFO") -> None:
    """structlog for our loggers, and the stdlib root (pgqueuer, psycopg_pool, ...) through it."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(formatter())
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    # pgserver narrates every pg_ctl call at INFO, several lines each, and the
    # stripe library every API call: noise among a command's own output
    # (reconcile --json must stay parseable). Their warnings still show.
    for chatty in ("pgserver", "stripe"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    structlog.configure(
        processors=[*_SHARED, *_RENDER],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        # One write per line, newline included: print() writes the newline
        # separately, and with PYTHONUNBUFFERED=1 (common on platforms) another
        # worker's line sharing this stdout could land between the two. No file
        # named: each logger writes to sys.stdout as it is when the logger is
        # made, not as it was when this ran (a test's capture, closed since).
        logger_factory=structlog.WriteLoggerFactory(),
        cache_logger_on_first_use=True,
    )


class GunicornLogger(glogging.Logger):  # type: ignore[misc]  # gunicorn ships no types
    """gunicorn's error log (start, boot, worker exits) written as our JSON lines."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(formatter())
