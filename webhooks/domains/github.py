"""The GitHub domain: nothing is fulfilled, so events are recorded and routed.

GitHub sends `ping` when a webhook is created (and on "Redeliver" of it);
answering it 200 is what marks the hook as working in GitHub's settings.
Every other GitHub event is claimed and recorded (`ignored`) unless a shop
registers a handler with `@registry.handles(type, provider="github")`.
"""
from __future__ import annotations

import psycopg

from webhooks.core.events import Event
from webhooks.providers.github import NAME
from webhooks.core.registry import handles

PONG = "pong"


@handles("ping", provider=NAME)
def ping(conn: psycopg.Connection, event: Event) -> str:
    return PONG
