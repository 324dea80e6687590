"""Outbox job kinds, each a pydantic model a job of it is held to before it is written.

A domain declares its kinds (a `Job` model per kind, brought as
`documented(Model)`: its JSON Schema is published as
`docs/schemas/<kind>.json`, what receivers code against, docs/outbox.md) and
brings them to the Registry with its handlers (core/parts.py). A job that
breaks its model (an order without an amount) raises `InvalidJob` inside the
delivery's transaction, which then commits nothing: the delivery answers
500, is recorded as a failure, and is retried, instead of a receiver acting
on it. A kind with no model (a shop's own handler's, named by a plain
string) is written as given; tests/core/test_job_schemas.py holds every kind
the service writes to having one, and its published schema to being what
the model writes (`.ci/reference`). The models are checked strictly, as the
JSON Schema reads them: no string for a number, no field not declared.
`python -m bench.jobs` prices the check against jsonschema-rs, the validator
the schemas were checked with before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Protocol, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from webhooks.infra.config import Settings
from webhooks.infra.db import LazyPool
from webhooks.infra.errors import PublicError

from .events import Event


class InvalidJob(PublicError):
    """A job that breaks its kind's model; the text names the field and the rule, never a value,
    so it is shown where the failure is recorded (events show, /admin)."""


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


class Fields(BaseModel):
    """Fields as a receiver reads them: of their declared types exactly, and no other."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)


class Job(Fields):
    """A job's fields; a kind's model narrows `kind` to its name."""

    kind: str


# Field types the kinds share.
Amount = Annotated[int, Field(ge=0)]
Currency = Annotated[str, Field(pattern=r"^[a-z]{3}$")]
Moment = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


@dataclass(frozen=True)
class JobKind:
    """A kind of outbox job: its name (the job's `kind`), its model, and who performs it.

    `perform` is None for a job POSTed to WEBHOOK_OUTBOX_URL, as all but
    Stripe's fetch are. `complete`, if any, runs before such a POST.
    """

    name: str
    model: type[Job] | None = None
    perform: Perform | None = None
    complete: Complete | None = None


def documented(model: type[Job], perform: Perform | None = None, complete: Complete | None = None) -> JobKind:
    """The kind `model` declares (its `kind` literal), published as `docs/schemas/<name>.json`."""
    [name] = get_args(model.model_fields["kind"].annotation)
    return JobKind(str(name), model, perform, complete)


@cache
def _partial(model: type[Job]) -> type[Job]:
    """`model` with every field optional: what one event states of a job, checked field by field."""
    optional: dict[str, Any] = {
        name: (info.annotation, FieldInfo.merge_field_infos(info, default=None, default_factory=None))
        for name, info in model.model_fields.items()
    }
    return create_model(f"Partial{model.__name__}", __base__=model, **optional)


def check(kind: JobKind | str, job: dict[str, Any], *, partial: bool = False) -> None:
    """Raise InvalidJob unless `job` (with its "kind") is a job of `kind`'s model.

    `partial` checks only the fields `job` has: what one event states of a
    job the SQL functions complete from stored rows (orders.py).
    """
    if isinstance(kind, str) or kind.model is None:
        return
    model = _partial(kind.model) if partial else kind.model
    try:
        model.__pydantic_validator__.validate_python(job)
    except ValidationError as exc:
        error = exc.errors(include_url=False, include_context=False, include_input=False)[0]
        # The top-level field only: below it are a payload's own keys (metadata).
        field = error["loc"][0] if error["loc"] else "(the job)"
        raise InvalidJob(f"{kind.name} job: field {field} breaks its model: {error['msg']}") from None


DRAFT = "https://json-schema.org/draft/2020-12/schema"


def schema(kind: JobKind) -> dict[str, Any]:
    """The JSON Schema published for `kind`: `docs/schemas/<name>.json`, written by `.ci/reference`."""
    if kind.model is None:
        raise ValueError(f"{kind.name} has no model")
    written = kind.model.model_json_schema(schema_generator=_Published)
    inline = _published(written, written.pop("$defs", {}))
    first = {"$schema": DRAFT, "$id": f"{kind.name}.json", "title": inline.pop("title")}
    return {**first, **inline}


class _Published(GenerateJsonSchema):
    """The schemas as receivers' tools read them best: no generated titles, `null` as a type, a
    kind's name as a `const`."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        inner = self.generate_inner(schema["schema"])
        if isinstance(inner.get("type"), str):
            return {**inner, "type": [inner["type"], "null"]}
        return super().nullable_schema(schema)

    def literal_schema(self, schema: core_schema.LiteralSchema) -> JsonSchemaValue:
        written = super().literal_schema(schema)
        return {"const": written["const"]} if "const" in written else written


# The order a schema's keys are written in: what a value is, then what it means, then its parts.
_ORDER = ("$schema", "$id", "title", "description", "type", "const", "minimum", "pattern", "format", "enum")


def _published(node: Any, defs: dict[str, Any]) -> Any:
    """`node` with each `$ref` to a nested model replaced by that model's schema, untitled, each
    description on one line (a docstring's line breaks are the source's, not the text's), and its keys
    in `_ORDER`."""
    if isinstance(node, list):
        return [_published(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        nested = dict(defs[node["$ref"].rpartition("/")[2]])
        nested.pop("title", None)
        return _published(nested, defs)
    ordered = sorted(node, key=lambda key: _ORDER.index(key) if key in _ORDER else len(_ORDER))
    return {
        key: " ".join(node[key].split())
        if key == "description" and isinstance(node[key], str)
        else _published(node[key], defs)
        for key in ordered
    }
