"""`loadtest --provider standard`: Standard Webhooks messages, and their audit."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import psycopg

from webhooks.providers import Outgoing
from webhooks.providers.standard import NAME

from . import plugin

# No handler takes it: each message is claimed, recorded and answered `ignored`.
EVENT_TYPE = "loadtest.message"


def events(n: int) -> list[tuple[bytes, Outgoing]]:
    """n messages in the spec's payload shape (type, timestamp, data), each with its webhook-id."""
    sent = []
    for i in range(n):
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        body = {"type": EVENT_TYPE, "timestamp": now, "data": {"sequence": i}}
        sent.append((json.dumps(body).encode(), Outgoing(f"msg_{uuid.uuid4().hex}", EVENT_TYPE)))
    return sent


def audit(conn: psycopg.Connection, sent: list[Outgoing]) -> dict[str, int]:
    return plugin.completed_once(conn, NAME, sent)


TRAFFIC = plugin.Traffic(NAME, events, audit)
