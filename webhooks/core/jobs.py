"""Every outbox job is held to its kind's JSON Schema, `docs/schemas/<kind>.json`, before it is written.

The schemas are what receivers code against (docs/outbox.md). A job that
breaks one (an order without an amount) raises `InvalidJob` inside the
delivery's transaction, which then commits nothing: the delivery answers
500, is recorded as a failure, and is retried, instead of a receiver acting
on it. A kind with no schema there (a shop's own handler's) is written as
given; tests/test_job_schemas.py holds every kind the service writes to
having one. The validator is jsonschema-rs, chosen by `python -m bench.jobs`
(it compiles each schema once; it is the fastest of the maintained
validators measured there, and speaks the schemas' draft, 2020-12).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import jsonschema_rs

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


class InvalidJob(Exception):
    """A job that breaks its kind's schema; the text names the field and the rule, never a value."""


def schema(kind: str) -> dict:
    return json.loads((SCHEMAS / f"{kind}.json").read_text())


@cache
def _validator(kind: str, partial: bool):
    if not (SCHEMAS / f"{kind}.json").exists():
        return None
    rules = schema(kind)
    if partial:
        rules = {**rules, "required": []}
    return jsonschema_rs.validator_for(rules)


def check(kind: str, job: dict, *, partial: bool = False) -> None:
    """Raise InvalidJob unless `job` (with its "kind") matches the schema of `kind`.

    `partial` checks only the fields `job` has: what one event states of a
    job the SQL functions complete from stored rows (orders.py).
    """
    validator = _validator(kind, partial)
    error = None if validator is None else next(validator.iter_errors(job), None)
    if error is None:
        return
    # The top-level field only: below it are a payload's own keys (metadata).
    field = error.instance_path[0] if error.instance_path else None
    if field is None and isinstance(error.kind, jsonschema_rs.ValidationErrorKind.Required):
        field = error.kind.property
    rule = error.schema_path[-1]
    raise InvalidJob(f"{kind} job: field {field or '(the job)'} breaks its schema's {rule!r}")
