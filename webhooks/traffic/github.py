"""`loadtest --provider github`: push deliveries with a ping among them, and their audit."""

from __future__ import annotations

import json
import uuid

import psycopg

from webhooks.infra.db import one
from webhooks.providers import Outgoing
from webhooks.providers.github import NAME

from . import plugin

# Every tenth delivery is a ping, answered by the built-in handler; pushes are recorded.
_PING_EVERY = 10

_PINGS_NOT_PONGED = """
SELECT count(*) FROM webhook_events
WHERE provider = %s AND event_id = ANY(%s) AND outcome IS DISTINCT FROM 'pong'
"""


def events(n: int) -> list[tuple[bytes, Outgoing]]:
    sent = []
    for i in range(n):
        event_type = "ping" if i % _PING_EVERY == 0 else "push"
        repository = {"id": 1296269, "full_name": "octocat/Hello-World"}
        # Each body of its event's shape: the service refuses a body under another event's name.
        body = (
            {"zen": "Keep it logically awesome.", "hook_id": 42, "repository": repository}
            if event_type == "ping"
            else {
                "ref": "refs/heads/main",
                "before": uuid.uuid4().hex,
                "after": uuid.uuid4().hex,
                "commits": [],
                "repository": repository,
            }
        )
        sent.append((json.dumps(body).encode(), Outgoing(str(uuid.uuid4()), event_type)))
    return sent


def audit(conn: psycopg.Connection, sent: list[Outgoing]) -> dict[str, int]:
    pings = [out.event_id for out in sent if out.event_type == "ping"]
    (not_ponged,) = one(conn.execute(_PINGS_NOT_PONGED, [NAME, pings]))
    return {**plugin.completed_once(conn, NAME, sent), "every ping answered pong": not_ponged}


TRAFFIC = plugin.Traffic(NAME, events, audit)
