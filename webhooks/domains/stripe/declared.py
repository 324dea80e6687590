"""The field types Stripe's objects are declared with, and the check every handled event's object passes.

Each object's module declares, once, the fields its handlers read and
their types, as a pydantic model of this module's `StripeObject` (the
Checkout Session in checkout.py, the Invoice in invoices.py, ...), and
names it on its handlers (`handles(..., reads=Model)`). A field Stripe
added that no handler reads is ignored; one a handler reads must be what
Stripe sends: a signed event whose object breaks a rule is refused for good
(InvalidFields, a stored 422) before any handler runs, instead of failing
in SQL on every retry. The same check decides whether the handlers can
read an event of an API version newer than any this project knows
(versions.py).

The rules are Stripe's documented shapes (the objects' pages in Stripe's
API reference, and stripe-python's annotations generated from its OpenAPI
spec): ids are short ASCII tokens, currencies three-letter lowercase ISO
codes, amounts whole numbers of the smallest unit (never NaN, never past
what PostgreSQL's bigint holds), times Unix seconds, metadata a flat map.
Free text (a `client_reference_id`, metadata's values) may hold anything:
what PostgreSQL cannot store is made storable where it is copied
(infra/db.storable), so one value there never stops a paid order.

pydantic is the engine, chosen by CPU per delivery against msgspec and
JSON Schema (docs/benchmark.md, "Declared input"): a few microseconds, as
cheap as msgspec; the one cheaper (jsonschema_rs, by about a microsecond)
quotes values in its messages and keeps the rules apart from the modules.
It is already installed (pgqueuer is built on it). Its messages name the
rule; errors are read with `include_input=False` and their locations cut
at the first part that is not a declared field name, so a refusal never
quotes a value, nor a metadata key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr
from pydantic import ValidationError as _ValidationError

from webhooks.core.events import ID_PATTERN, Event, InvalidFields, Unprocessable

# API 2025-03-31 (basil), which moved links the handlers read (docs/events.md).
BASIL = "2025-03-31"
# The largest integers PostgreSQL's bigint (amounts) and integer hold.
_BIGINT = 2**63 - 1
_INTEGER = 2**31 - 1
# Unix seconds up to this (year 6325) are what core.events.timestamp reads.
_LAST_SECOND = 2**37 - 1

Id = Annotated[StrictStr, Field(pattern=f"^{ID_PATTERN}$")]
# An amount in the currency's smallest unit.
Amount = Annotated[StrictInt, Field(ge=0, le=_BIGINT)]
# A movement of money: negative when it leaves the balance (a balance transaction).
SignedAmount = Annotated[StrictInt, Field(ge=-_BIGINT, le=_BIGINT)]
Count = Annotated[StrictInt, Field(ge=0, le=_INTEGER)]
Currency = Annotated[StrictStr, Field(pattern="^[a-z]{3}$")]
# One of a documented set of values (a status, a mode, a reason). Stripe adds
# values over time: an unknown word still has the shape, and the handler
# that reads it decides (refused and retried, rather than stored as wrong).
Word = Annotated[StrictStr, Field(pattern="^[a-z0-9_]{1,64}$")]
Timestamp = Annotated[StrictInt, Field(ge=0, le=_LAST_SECOND)]
Text = StrictStr
Flag = StrictBool


def _flat(metadata: dict[str, Any]) -> dict[str, Any]:
    if any(isinstance(value, (dict, list)) for value in metadata.values()):
        raise ValueError("a value is an object or an array; Stripe's metadata maps keys to strings")
    return metadata


Metadata = Annotated[dict[str, Any], AfterValidator(_flat)]


class UnknownValue(Unprocessable):
    """A field has the shape Stripe sends but a value no rule here places (a status Stripe added).

    Refused (500) and recorded, nothing claimed, so Stripe retries it until
    the rules here know where the value sits. The text names the field.
    """

    error = "unknown_value"


@dataclass(frozen=True)
class Need:
    """A link the handlers need, at the API versions from `since` up to (not including) `until`.

    Present means the key is there at each step of `path`; a null on the way
    is an object without the link (a one-off invoice has no subscription),
    while a key that is not there is a shape the handlers do not read (the
    link moved), so the event is refused as one of an unsupported version
    (versions.Admission) rather than applied without it.
    """

    path: tuple[str, ...]
    since: str = ""
    until: str = "9999"


class StripeObject(BaseModel):
    """Fields a handler reads; any other field Stripe sends is ignored.

    `NEEDS`: the links its handlers need, per API version (`Need`).
    """

    model_config = ConfigDict(extra="ignore", frozen=True)
    NEEDS: ClassVar[tuple[Need, ...]] = ()


class Expanded(StripeObject):
    """An id field that arrived expanded into its object."""

    id: Id


# An id field that may also arrive expanded (core.events.id_of reads both).
Expandable = Id | Expanded


def problems(model: type[StripeObject], obj: Any) -> list[str]:
    """Each field of `obj` that breaks a rule of `model`, as `data.object.<path>: <rule>`; [] if none."""
    try:
        model.model_validate(obj)
    except _ValidationError as exc:
        names = _field_names(model)
        found: dict[str, str] = {}
        for error in exc.errors(include_url=False, include_context=False, include_input=False):
            # One rule per field: a union's other members' rules add nothing.
            found.setdefault(_path(error["loc"], names), error["msg"])
        return [f"{path}: {rule}" for path, rule in found.items()]
    return []


def unmet(model: type[StripeObject], event: Event) -> list[str]:
    """Each link `model` needs at the event's API version that its object lacks; [] if none."""
    version = (event.api_version or "")[:10]
    return [
        f"data.object.{'.'.join(need.path)}: missing, and the handlers need it at {event.api_version}"
        for need in model.NEEDS
        if need.since <= version < need.until and not _present(event.object, need.path)
    ]


def _present(obj: Any, path: tuple[str, ...]) -> bool:
    for key in path:
        if obj is None:
            return True  # the link is null: an object without one
        if not isinstance(obj, dict) or key not in obj:
            return False
        obj = obj[key]
    return True


def check(model: type[StripeObject], event: Event) -> None:
    """Raise InvalidFields naming each field of the event's object that breaks `model`'s rules."""
    found = problems(model, event.object)
    if found:
        raise InvalidFields("; ".join(found))


def _path(loc: tuple[int | str, ...], names: frozenset[str]) -> str:
    """`data.object` and the declared fields down to the error: a list's index, never a key of a map."""
    parts = ["data.object"]
    for part in loc:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif part in names:
            parts.append(f".{part}")
        else:
            break  # a union member's tag, or a key Stripe's sender chose
    return "".join(parts)


def _field_names(model: type[BaseModel]) -> frozenset[str]:
    """Every field name declared in `model` and the models inside it."""
    names: set[str] = set()
    pending: list[Any] = [model]
    while pending:
        kind = pending.pop()
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            for name, field in kind.model_fields.items():
                if name not in names:
                    names.add(name)
                    pending.append(field.annotation)
        for inner in getattr(kind, "__args__", ()):
            pending.append(inner)
    return frozenset(names)
