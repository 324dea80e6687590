"""Load-test traffic per provider: what `loadtest --provider NAME` sends, and how it audits the result."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import psycopg

from ..service.providers import Outgoing


@dataclass(frozen=True)
class Traffic:
    provider: str
    # n unique events: each body with what its sender puts beside it (id, type, shop, delivery id)
    events: Callable[[int], list[tuple[bytes, Outgoing]]]
    # after the run, read from the database: check name -> number of violations (0 = passed)
    audit: Callable[[psycopg.Connection, list[Outgoing]], dict[str, int]]


_TRAFFIC: dict[str, Traffic] = {}


def register(traffic: Traffic) -> Traffic:
    _TRAFFIC[traffic.provider] = traffic
    return traffic


def get(provider: str) -> Traffic | None:
    return _TRAFFIC.get(provider)
