"""Which function runs for which event type.

A handler takes the claim's connection and the parsed event, runs inside the
claim's transaction, and returns the outcome word stored in the ledger.
Handlers are keyed by (provider, event type): Shopify's `orders/paid` and a
Standard Webhooks sender's `invoice.paid` never meet Stripe's handlers.
Registering a type again replaces its handler, so a shop can take over a
built-in one (and call it from its own to keep its effect).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Callable, Protocol

import psycopg

from .events import STRIPE, Event
from .outcomes import IGNORED, NOTIFIED

if TYPE_CHECKING:  # the ledger names the handler in its failure records
    from .ledger import Claim

Handler = Callable[[psycopg.Connection, Event], str]
_HANDLERS: dict[tuple[str, str], Handler] = {}


class OneStatement(Protocol):
    """A handler's effect that also runs the claim and completion, in one statement."""

    def deliver(self, conn: psycopg.Connection, provider: str, event: Event) -> tuple[Claim, str | None]:
        """The claim, and the outcome committed with it (None when the event id was taken)."""


# For some handlers, the one statement an event's whole delivery can be
# (None for an event that needs the handler itself). Only the handler
# registered with it has it: a shop's replacement handler runs as any other.
OneStatementPlan = Callable[[Event], OneStatement | None]
_ONE_STATEMENT: dict[tuple[str, str], OneStatementPlan] = {}

# Handlers for events no type handler fits, one per situation, registered by
# the domain: "thin" runs for a thin event whose type has no handler (thin
# types are open ended, `v1.<any snapshot type>`); "resync" claims a handled
# event whose API version the handlers cannot read, to fetch its object again.
_FALLBACKS: dict[str, Handler] = {}


def handles(
    *event_types: str, provider: str = STRIPE, one_statement: OneStatementPlan | None = None
) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for event_type in event_types:
            _HANDLERS[provider, event_type] = handler
            _ONE_STATEMENT.pop((provider, event_type), None)
            if one_statement is not None:
                _ONE_STATEMENT[provider, event_type] = one_statement
        return handler

    return register


def handles_fallback(situation: str) -> Callable[[Handler], Handler]:
    """Register the handler for `situation` ("thin" or "resync"); the last one wins."""

    def register(handler: Handler) -> Handler:
        _FALLBACKS[situation] = handler
        return handler

    return register


def fallback(situation: str) -> Handler | None:
    return _FALLBACKS.get(situation)


def handler_for(event_type: str, provider: str = STRIPE) -> Handler | None:
    return _HANDLERS.get((provider, event_type))


def load(modules: tuple[str, ...]) -> None:
    """Import handler modules (WEBHOOK_HANDLER_MODULES) so their @handles register."""
    for module in modules:
        importlib.import_module(module)


def handled(event_type: str, provider: str = STRIPE) -> bool:
    """A handler reads this type's payload (so its shape matters)."""
    return (provider, event_type) in _HANDLERS


def handler_name(event_type: str, provider: str = STRIPE) -> str | None:
    """`module.function` of the handler this process runs for the type, None if none."""
    handler = _HANDLERS.get((provider, event_type))
    return None if handler is None else f"{handler.__module__}.{handler.__qualname__}"


def settled(event: Event, provider: str = STRIPE) -> str | None:
    """The outcome `run` gives `event` without running anything; None when a handler runs."""
    if (provider, event.type) in _HANDLERS:
        return None
    if provider != STRIPE:
        return IGNORED
    if event.thin and "thin" in _FALLBACKS:
        return None
    # A thin event names its object without carrying it; the ledger row (id,
    # type, payload) is the record a later fetch works from.
    return NOTIFIED if event.thin else IGNORED


def one_statement(event: Event, provider: str = STRIPE) -> OneStatement | None:
    """The whole delivery of `event` as one statement, when its handler offers one."""
    plan = _ONE_STATEMENT.get((provider, event.type))
    return None if plan is None else plan(event)


def run(conn: psycopg.Connection, event: Event, provider: str = STRIPE) -> str:
    handler = _HANDLERS.get((provider, event.type))
    if handler is not None:
        return handler(conn, event)
    if provider == STRIPE and event.thin and "thin" in _FALLBACKS:
        return _FALLBACKS["thin"](conn, event)
    return settled(event, provider)
