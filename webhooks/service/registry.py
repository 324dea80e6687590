"""Which function runs for which event type.

A handler takes the claim's connection and the parsed event, runs inside the
claim's transaction, and returns the outcome word stored in the ledger.
Registering a type again replaces its handler, so a shop can take over a
built-in one (and call it from its own to keep its effect).
"""
from __future__ import annotations

import importlib
from typing import Callable

import psycopg

from .events import Event
from .outcomes import IGNORED, NOTIFIED

Handler = Callable[[psycopg.Connection, Event], str]
_HANDLERS: dict[str, Handler] = {}


def handles(*event_types: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for event_type in event_types:
            _HANDLERS[event_type] = handler
        return handler

    return register


def load(modules: tuple[str, ...]) -> None:
    """Import handler modules (WEBHOOK_HANDLER_MODULES) so their @handles register."""
    for module in modules:
        importlib.import_module(module)


def handler_name(event_type: str) -> str | None:
    """`module.function` of the handler this process runs for the type, None if none."""
    handler = _HANDLERS.get(event_type)
    return None if handler is None else f"{handler.__module__}.{handler.__qualname__}"


def run(conn: psycopg.Connection, event: Event) -> str:
    handler = _HANDLERS.get(event.type)
    if handler is not None:
        return handler(conn, event)
    # A thin event names its object without carrying it; the ledger row (id,
    # type, payload) is the record a later fetch works from.
    return NOTIFIED if event.thin else IGNORED
