"""Where each Stripe object is found again in Stripe's API, and the local rows it is checked against.

Each object's module declares its own (`LOOKUPS`), beside its handlers; the
domain gathers them (`__init__.py`). A re-sync reads the object's path
(thin.py), and `reconcile` reads the rest: which objects it lists in its
window, which local rows they stand for, and what Stripe must say of an
object for its row to be right.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType

from webhooks.core.events import Json


@dataclass(frozen=True)
class Rows:
    """The local rows of one kind that reconcile matches with Stripe's objects, by object id.

    `at` is the column that says when the row's state was set, `state` the
    SQL condition of the rows Stripe's listed objects stand for: a constant
    of the declaring module, never input.
    """

    kind: str
    table: str
    id_column: str
    at: str
    state: str = "true"


@dataclass(frozen=True)
class Listing:
    """The list endpoint reconcile reads for objects created in its window.

    `local_id` is the id of the local row a listed object stands for, None
    when none should exist (a payment that did not succeed).
    """

    path: str
    local_id: Callable[[Json], str | None]
    filters: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Lookup:
    """One Stripe object (its `object` name), as the API serves it at `path` + id.

    `rows`, `prefixes` and `agrees` are what reconcile needs of an object
    whose rows it checks: the local rows it stands for, the id prefixes by
    which a row's id names this object, and what Stripe must say of the
    object for its row to be right. `listing`, if reconcile lists it.
    """

    object: str
    path: str
    rows: Rows | None = None
    prefixes: tuple[str, ...] = ("",)
    agrees: Callable[[Json], bool] = lambda _: True
    listing: Listing | None = None


def paths(lookups: Iterable[Lookup]) -> dict[str, str]:
    """Stripe's `object` name -> the path its objects are read from."""
    return {lookup.object: lookup.path for lookup in lookups}


def gather(modules: Iterable[ModuleType]) -> tuple[Lookup, ...]:
    """The lookups the modules declare (`LOOKUPS`), in their order."""
    found: list[Lookup] = []
    for module in modules:
        declared = getattr(module, "LOOKUPS", ())
        found += [lookup for lookup in declared if isinstance(lookup, Lookup)]
    return tuple(found)
