"""Outbox job kinds, each held to its JSON Schema before a job of it is written.

A domain declares its kinds (`JobKind`, usually `documented`: the schema is
`docs/schemas/<kind>.json`, what receivers code against, docs/outbox.md) and
brings them to the Registry with its handlers (core/parts.py). A job that
breaks its kind's schema (an order without an amount) raises `InvalidJob`
inside the delivery's transaction, which then commits nothing: the delivery
answers 500, is recorded as a failure, and is retried, instead of a
receiver acting on it. A kind with no schema (a shop's own handler's, named
by a plain string) is written as given; tests/core/test_job_schemas.py holds
every kind the service writes to having one. The validator is jsonschema-rs,
chosen by `python -m bench.jobs` (it compiles each schema once; it is the
fastest of the maintained validators measured there, and speaks the
schemas' draft, 2020-12).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import jsonschema_rs

from webhooks.infra.config import Settings
from webhooks.infra.db import LazyPool

from .events import Event

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


class InvalidJob(Exception):
    """A job that breaks its kind's schema; the text names the field and the rule, never a value."""


class JobFailed(RuntimeError):
    """A job the worker performs itself did not complete; the text is safe to log. It is retried."""


class Answered(Protocol):
    """What a delivery through the claim answered (core.ingest.Answer)."""

    @property
    def status(self) -> int: ...

    @property
    def outcome(self) -> str: ...

    @property
    def body(self) -> str: ...

    @property
    def replayed(self) -> bool: ...


class Service(Protocol):
    """What the worker hands a job it performs: its process's settings, and the claim events go through."""

    @property
    def settings(self) -> Settings: ...

    @property
    def pool(self) -> LazyPool: ...

    def accept(self, provider: str, event: Event, settled: str | None = None) -> Answered: ...


# A job the worker performs itself instead of POSTing it; raises JobFailed to be retried.
Perform = Callable[[Service, bytes], object]
# What the worker adds to a job's payload before it POSTs it (the line items
# of an order, read from Stripe outside the claim); raises JobFailed to be retried.
Complete = Callable[[Service, bytes], bytes]


@dataclass(frozen=True)
class JobKind:
    """A kind of outbox job: its name (the job's `kind`), its schema, and who performs it.

    `perform` is None for a job POSTed to WEBHOOK_OUTBOX_URL, as all but
    Stripe's fetch are. `complete`, if any, runs before such a POST.
    """

    name: str
    schema: Path | None = None
    perform: Perform | None = None
    complete: Complete | None = None


def documented(name: str, perform: Perform | None = None, complete: Complete | None = None) -> JobKind:
    """A kind whose schema is published with the docs: `docs/schemas/<name>.json`."""
    return JobKind(name, SCHEMAS / f"{name}.json", perform, complete)


def schema(kind: JobKind) -> dict[str, Any]:
    if kind.schema is None:
        raise ValueError(f"{kind.name} has no schema")
    rules: dict[str, Any] = json.loads(kind.schema.read_text())
    return rules


@cache
def _validator(kind: JobKind, partial: bool) -> jsonschema_rs.Validator:
    rules = schema(kind)
    if partial:
        rules = {**rules, "required": []}
    return jsonschema_rs.validator_for(rules)


def check(kind: JobKind | str, job: dict[str, Any], *, partial: bool = False) -> None:
    """Raise InvalidJob unless `job` (with its "kind") matches the schema of `kind`.

    `partial` checks only the fields `job` has: what one event states of a
    job the SQL functions complete from stored rows (orders.py).
    """
    if isinstance(kind, str) or kind.schema is None:
        return
    error = next(_validator(kind, partial).iter_errors(job), None)
    if error is None:
        return
    # The top-level field only: below it are a payload's own keys (metadata).
    field = error.instance_path[0] if error.instance_path else None
    if field is None and isinstance(error.kind, jsonschema_rs.ValidationErrorKind.Required):
        field = error.kind.property
    rule = error.schema_path[-1]
    raise InvalidJob(f"{kind.name} job: field {field or '(the job)'} breaks its schema's {rule!r}")
