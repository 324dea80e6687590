"""What `loadtest --provider P` sends for a provider, and how it audits the database after.

One Traffic per provider, made by the module of this folder named after it
(stripe.py, standard.py, github.py, shopify.py), all alike: `loadtest`
lists them (`commands.loadtest.TRAFFIC`) and signs each body with the
provider's own signer, so a new provider plugs in with one line there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from webhooks.core.outbox import TEST_TRAFFIC_KEY
from webhooks.infra.db import one
from webhooks.providers import Outgoing


@dataclass(frozen=True)
class Traffic:
    provider: str
    # n unique events: each body with what its sender puts beside it (id, type, shop, delivery id)
    events: Callable[[int], list[tuple[bytes, Outgoing]]]
    # after the run, read from the database: check name -> number of violations (0 = passed)
    audit: Callable[[psycopg.Connection, list[Outgoing]], dict[str, int]]


def marked(sent: list[tuple[bytes, Outgoing]]) -> list[tuple[bytes, Outgoing]]:
    """Each body with the load test's mark, inside what is signed: the worker sends none of their jobs."""
    return [(json.dumps({**json.loads(body), TEST_TRAFFIC_KEY: True}).encode(), out) for body, out in sent]


_COMPLETED_ONCE = """
SELECT count(*) FILTER (WHERE provider = %(provider)s AND status = 'completed'),
       count(*) FILTER (WHERE provider <> %(provider)s)
FROM webhook_events
WHERE event_id = ANY(%(ids)s)
"""


def completed_once(conn: psycopg.Connection, provider: str, sent: list[Outgoing]) -> dict[str, int]:
    """The ledger checks every provider's audit starts from.

    Each event id completed in one row under `provider` (the unique key makes
    two impossible, so a shortfall is what can go wrong), and none recorded
    under another provider.
    """
    ids = sorted({outgoing.event_id for outgoing in sent})
    completed, elsewhere = one(conn.execute(_COMPLETED_ONCE, {"provider": provider, "ids": ids}))
    return {
        "every event completed once": len(ids) - completed,
        "no event under another provider": elsewhere,
    }
