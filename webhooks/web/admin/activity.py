"""Each provider's recent traffic for /admin: enabled or not, events by status and outcome."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

import psycopg

from webhooks.core import history
from webhooks.providers import Providers

WINDOW = timedelta(hours=24)

# Claimed events by status and outcome (one refused for good, a 4xx answer, is
# failed), and events with failed attempts and no claim yet, per provider,
# received within the window.
_COUNTS = f"""
SELECT provider, {history.STATUS} AS status, outcome, count(*)
FROM webhook_events e
WHERE received_at >= now() - %(window)s
GROUP BY 1, 2, 3
UNION ALL
SELECT f.provider, 'failed', NULL, count(DISTINCT f.event_id)
FROM webhook_failures f
WHERE f.failed_at >= now() - %(window)s
  AND NOT EXISTS (SELECT 1 FROM webhook_events e
                  WHERE e.provider = f.provider AND e.event_id = f.event_id)
GROUP BY f.provider
ORDER BY 1, 2, 4 DESC
"""


@dataclass(frozen=True)
class Activity:
    provider: str
    enabled: bool
    # The setting that enables it (its secret), for the page to name when it is not.
    setting: str
    # (status, outcome or None, events) received within WINDOW.
    counts: list[tuple[str, str | None, int]] = field(default_factory=list)


def recent(conn: psycopg.Connection, providers: Providers, enabled: list[str]) -> list[Activity]:
    """Every provider, enabled ones first, with its counts over WINDOW."""
    counts = defaultdict(list)
    for provider, status, outcome, events in conn.execute(_COUNTS, {"window": WINDOW}):
        counts[provider].append((status, outcome, events))
    rows = [Activity(p.name, p.name in enabled, p.secret_setting, counts[p.name]) for p in providers]
    return sorted(rows, key=lambda a: (not a.enabled, a.provider))
