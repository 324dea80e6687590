"""`loadtest` as Stripe: Checkout card payments (three events each), and their audit."""

from __future__ import annotations

import psycopg

from webhooks.infra.db import one
from webhooks.providers import Outgoing
from webhooks.providers.stripe import NAME

from . import plugin, samples

# The payment each sent event belongs to, read from the ledger's payloads
# (an intent is its own; a session and a charge name theirs), and how many
# fulfilments it has.
_FULFILMENTS = """
SELECT count(*) FILTER (WHERE n <> 1) FROM (
    SELECT count(f.id) AS n
    FROM (SELECT DISTINCT coalesce(w.payload::jsonb #>> '{data,object,payment_intent}',
                                   w.payload::jsonb #>> '{data,object,id}') AS payment_id
          FROM webhook_events e
          JOIN webhook_payloads w ON w.ledger_id = e.id AND w.received_at = e.received_at
          WHERE e.provider = 'stripe' AND e.event_id = ANY(%s)) AS p
    LEFT JOIN fulfilments f USING (payment_id)
    GROUP BY p.payment_id
) per_payment
"""


def sent(events: list[dict]) -> list[tuple[bytes, Outgoing]]:
    """Stripe events as the bodies Stripe sends, each with what its signer needs."""
    return [(samples.encode(evt), Outgoing(evt["id"], evt["type"])) for evt in events]


def events(n: int) -> list[tuple[bytes, Outgoing]]:
    """n events of Checkout card payments (samples.payment_stream): every payment is an order."""
    return sent(samples.payment_stream(n))


def audit(conn: psycopg.Connection, sent: list[Outgoing]) -> dict[str, int]:
    """Violations per check, for the events in `sent`: the ledger's, and each payment shipped once."""
    event_ids = sorted({out.event_id for out in sent})
    (shipped_wrong,) = one(conn.execute(_FULFILMENTS, [event_ids]))
    return {**plugin.completed_once(conn, NAME, sent), "each payment fulfilled once": shipped_wrong}


TRAFFIC = plugin.Traffic(NAME, events, audit)
