"""Which function runs for which event, and the shape in which it is accepted.

A handler takes the claim's connection and the parsed event, runs inside the
claim's transaction, and returns the outcome word stored in the ledger.
Handlers are keyed by (provider, event type): Shopify's `orders/paid` and a
Standard Webhooks sender's `invoice.paid` never meet Stripe's handlers.

One Registry is built per process, by `webhooks.bootstrap`, from every
domain and then the modules named by WEBHOOK_HANDLER_MODULES, so the web
app, the commands and the worker run the same handlers. `handles` only
marks a function, and `Registry.include` adds a module's marked functions:
importing a module changes no state. Adding a type again replaces its
handler, so a shop can take over a built-in one.

A handler can also name what it reads (`reads`): the declared shape of its
event's object, which the provider's guard checks before any handler of
the type runs. It belongs to the type, not to the handler: a handler that
replaces or wraps a built-in one is given the same object, and keeps it.

What a domain brings beside its handlers (its outcome words, job kinds,
metrics and periodic work, core/parts.py) is kept here too, so the core,
the worker and the web edge read it without importing any domain.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

import psycopg
from prometheus_client.registry import Collector

from .events import Event
from .jobs import JobKind
from .outcomes import CORE, IGNORED
from .parts import Parts, Periodic

if TYPE_CHECKING:  # what accepting in one statement returns
    from .ledger import Claim

Handler = Callable[[psycopg.Connection, Event], str]


class OneStatement(Protocol):
    """A handler's effect that also runs the claim and completion, in one statement."""

    def accept(self, conn: psycopg.Connection, provider: str, event: Event) -> tuple[Claim, str | None]:
        """The claim, and the outcome committed with it (None when the event id was taken)."""


# For some handlers, the one statement that can accept an event whole
# (None for an event that needs the handler itself). Only the handler
# added with it has it: a shop's replacement handler runs as any other.
OneStatementPlan = Callable[[Event], "OneStatement | None"]
# What a provider's event that no type handler takes gets: the handler to run,
# or the outcome it is settled with (Stripe's thin events are fetched later).
Unhandled = Callable[[Event], "Handler | str"]
# A provider's check of a handled event before its handler runs: None to run
# it, another handler to run instead; raises (Unprocessable) to refuse it.
Guard = Callable[[Event], "Handler | None"]

_MARKS = "__webhooks_handles__"


class HandlerMistake(ValueError):
    """A registration that would close events wrongly, refused before anything is served; one line."""


# How an admitted event is accepted: one of the three shapes `core.ingest` knows.


@dataclass(frozen=True)
class Settled:
    """No handler runs: the claim is written completed with this outcome."""

    outcome: str


@dataclass(frozen=True)
class InOneStatement:
    """The handler's whole effect, claim and completion included, as one statement."""

    statement: OneStatement


@dataclass(frozen=True)
class InTransaction:
    """The handler, run inside the claim's transaction."""

    handler: Handler


Plan = Settled | InOneStatement | InTransaction


def handles(
    *event_types: str,
    provider: str | None = None,
    one_statement: OneStatementPlan | None = None,
    reads: type | None = None,
    unlisted: bool = False,
) -> Callable[[Handler], Handler]:
    """Mark a handler of `event_types` for `Registry.include` (which names the provider if this does not).

    `unlisted`: the types are on purpose not in the provider's list (`Registry.vocabulary`).
    """

    def mark(handler: Handler) -> Handler:
        marks = getattr(handler, _MARKS, ())
        setattr(handler, _MARKS, (*marks, (provider, event_types, one_statement, reads, unlisted)))
        return handler

    return mark


def name_of(handler: Handler) -> str:
    """`module.function` of a handler, through any functools.partial that binds its settings."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    return f"{handler.__module__}.{handler.__qualname__}"


class Registry:
    def __init__(self) -> None:
        self._handlers: dict[tuple[str, str], Handler] = {}
        self._statements: dict[tuple[str, str], OneStatementPlan] = {}
        self._unhandled: dict[str, Unhandled] = {}
        self._guards: dict[str, Guard] = {}
        self._reads: dict[tuple[str, str], type] = {}
        self._outcomes: set[str] = set(CORE)
        self._jobs: dict[str, JobKind] = {}
        self._metrics: list[Collector] = []
        self._periodic: list[Periodic] = []
        self._personal: set[str] = set()
        self._vocabulary: dict[str, frozenset[str]] = {}

    def vocabulary(self, provider: str, event_types: frozenset[str]) -> None:
        """The event types `provider` documents: a handler added for another is refused (`unlisted` aside)."""
        self._vocabulary[provider] = event_types

    def add(
        self,
        provider: str,
        event_types: Iterable[str],
        handler: Handler,
        one_statement: OneStatementPlan | None = None,
        reads: type | None = None,
        unlisted: bool = False,
    ) -> None:
        """Run `handler` for `provider`'s events of `event_types`; HandlerMistake if it never could.

        A handler that is not callable would leave every event of its types
        to fail; a type the provider's list does not have (a typo) is never
        sent, so the type meant would be left to whatever ran before.
        """
        event_types = [event_types] if isinstance(event_types, str) else list(event_types)
        if not callable(handler):
            what = type(handler).__name__
            raise HandlerMistake(
                f"the handler of {provider} {', '.join(event_types)} is {what}, not a function"
            )
        if not unlisted:
            for event_type in event_types:
                self._check_listed(provider, event_type)
        for event_type in event_types:
            self._handlers[provider, event_type] = handler
            self._statements.pop((provider, event_type), None)
            if one_statement is not None:
                self._statements[provider, event_type] = one_statement
            if reads is not None:
                self._reads[provider, event_type] = reads

    def include(self, *modules: ModuleType, provider: str | None = None) -> None:
        """Add the functions each module defines and marks with `handles`, in the order it defines them,
        and the parts it declares (`PARTS`).

        `provider` is the provider of the marks that name none.
        """
        for module in modules:
            parts = getattr(module, "PARTS", None)
            if isinstance(parts, Parts):
                self.bring(parts)
            for value in vars(module).values():
                if getattr(value, "__module__", None) != module.__name__:
                    continue  # imported from elsewhere: its own module is included for it
                for marked, event_types, one_statement, reads, unlisted in getattr(value, _MARKS, ()):
                    sender = marked or provider
                    if sender is None:
                        raise HandlerMistake(f"{name_of(value)} names no provider")
                    self.add(sender, event_types, value, one_statement, reads, unlisted)

    def _check_listed(self, provider: str, event_type: str) -> None:
        listed = self._vocabulary.get(provider)
        if listed is None or event_type in listed:
            return
        near = difflib.get_close_matches(event_type, listed, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise HandlerMistake(f"{provider} sends no event type {event_type!r}{hint}")

    def bring(self, parts: Parts) -> None:
        """Add a module's outcome words, job kinds, metrics and personal fields; a kind added again wins."""
        self._outcomes.update(parts.outcomes)
        self._personal.update(parts.personal)
        self._jobs.update((kind.name, kind) for kind in parts.jobs)
        self._metrics.extend(metric for metric in parts.metrics if metric not in self._metrics)

    def periodic(self, task: Periodic) -> None:
        """Work the worker runs beside the queue."""
        self._periodic.append(task)

    def outcomes(self) -> frozenset[str]:
        """Every outcome word the core and the domains answer with (a shop's handler may add its own)."""
        return frozenset(self._outcomes)

    def job_kinds(self) -> tuple[JobKind, ...]:
        return tuple(self._jobs.values())

    def job_kind(self, name: str) -> JobKind | None:
        return self._jobs.get(name)

    def metrics(self) -> tuple[Collector, ...]:
        return tuple(self._metrics)

    def personal_fields(self) -> frozenset[str]:
        """Payload keys that carry a person, in any domain's payloads."""
        return frozenset(self._personal)

    def periodic_work(self) -> tuple[Periodic, ...]:
        return tuple(self._periodic)

    def unhandled(self, provider: str, rule: Unhandled) -> None:
        """What `provider`'s events of a type no handler takes get (by default they are `ignored`)."""
        self._unhandled[provider] = rule

    def guard(self, provider: str, rule: Guard) -> None:
        """A check every handled event of `provider` passes before its handler runs."""
        self._guards[provider] = rule

    def handler(self, provider: str, event_type: str) -> Handler:
        """The handler this process runs for the type (to wrap it); HandlerMistake if none is added."""
        handler = self._handlers.get((provider, event_type))
        if handler is None:
            self._check_listed(provider, event_type)
            raise HandlerMistake(f"no handler of {provider} {event_type!r} to look up: none is added")
        return handler

    def reads(self, provider: str, event_type: str) -> type | None:
        """The declared shape of the object the type's events carry, if its handler named one."""
        return self._reads.get((provider, event_type))

    def handler_name(self, provider: str, event_type: str) -> str | None:
        """`module.function` of the handler this process runs for the type, None if none."""
        handler = self._handlers.get((provider, event_type))
        return None if handler is None else name_of(handler)

    def plan(self, provider: str, event: Event) -> Plan:
        """How `event` is accepted; raises InvalidEvent or Unprocessable to refuse it."""
        handler = self._handlers.get((provider, event.type))
        if handler is None:
            rule = self._unhandled.get(provider)
            chosen = IGNORED if rule is None else rule(event)
            return Settled(chosen) if isinstance(chosen, str) else InTransaction(chosen)
        guard = self._guards.get(provider)
        instead = None if guard is None else guard(event)
        if instead is not None:
            return InTransaction(instead)
        plan = self._statements.get((provider, event.type))
        statement = None if plan is None else plan(event)
        return InOneStatement(statement) if statement is not None else InTransaction(handler)
