"""The GitHub domain: nothing is fulfilled, so events are recorded and routed.

GitHub sends `ping` when a webhook is created (and on "Redeliver" of it);
answering it 200 is what marks the hook as working in GitHub's settings.
Every other GitHub event is claimed and recorded (`ignored`) unless a shop
registers a handler with `@fulfilment.handles(type, provider="github")`.
"""

from __future__ import annotations

import sys

import psycopg

from webhooks.core.events import Event
from webhooks.core.parts import Parts
from webhooks.core.registry import Registry, handles
from webhooks.infra.config import Settings
from webhooks.providers.github import NAME

PONG = "pong"
PARTS = Parts(outcomes=(PONG,))


@handles("ping")
def ping(conn: psycopg.Connection, event: Event) -> str:
    return PONG


def register(registry: Registry, settings: Settings) -> None:
    registry.include(sys.modules[__name__], provider=NAME)
