"""What a domain brings beside its handlers, for the processes that may not import it.

The core, the worker and the web edge import no domain
(tests/test_architecture.py). Each domain hands them what they need through
the Registry every process builds (webhooks/bootstrap.py):

- its outcome words, which the ledger stores and docs/events.md names;
- its outbox job kinds, each with its JSON Schema (core/jobs.py), and the
  ones the worker performs itself instead of POSTing (Stripe's fetch);
- its metrics, which /metrics exposes;
- the periodic work the worker runs beside the queue (Stripe's access sweep);
- the payload keys that carry a person, which /admin redacts when it shows a payload.

A module declares all but the periodic work as `PARTS = Parts(...)`, which
`Registry.include` takes with the module's handlers, so a new Stripe object
is its own module; periodic work depends on the settings, so a domain's
`register` adds it (`Registry.periodic`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from prometheus_client.registry import Collector

from .jobs import JobKind


@dataclass(frozen=True)
class Parts:
    """A module's outcome words, job kinds, metrics and personal fields."""

    outcomes: tuple[str, ...] = ()
    jobs: tuple[JobKind, ...] = ()
    metrics: tuple[Collector, ...] = ()
    personal: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Periodic:
    """Work the worker runs every `every_s` seconds, on an autocommit connection of its own.

    `run` returns how many things it acted on; the worker logs `name` with
    that count when there were any, and `<name>_failed` when the database
    did not answer.
    """

    name: str
    every_s: float
    run: Callable[[psycopg.Connection], int]
