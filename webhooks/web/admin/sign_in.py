"""The console's sign-in: the admin token checked once, refused sign-ins limited across every worker.

The refusals are rows in PostgreSQL, so every gunicorn worker counts the
same ones; an advisory lock held for the check makes the count exact under
concurrent attempts. Once FAILURES refusals fall within WINDOW, a sign-in is
refused unchecked until the oldest of them leaves it: the token cannot be
guessed faster than that, whoever guesses, from wherever.
"""

from __future__ import annotations

import hmac
from datetime import timedelta
from enum import Enum

import psycopg

WINDOW = timedelta(minutes=1)
FAILURES = 10

_LOCK = "SELECT pg_advisory_xact_lock(hashtext('webhooks.admin_sign_in'))"
_RECENT = "SELECT count(*) FROM admin_sign_in_failures WHERE failed_at > now() - %(window)s"
_FORGET = "DELETE FROM admin_sign_in_failures WHERE failed_at <= now() - %(window)s"
_FAILED = "INSERT INTO admin_sign_in_failures DEFAULT VALUES"


class Verdict(Enum):
    SIGNED_IN = "signed_in"
    WRONG_TOKEN = "wrong_token"
    RATE_LIMITED = "rate_limited"


def check(conn: psycopg.Connection, presented: str, token: str) -> Verdict:
    """Whether `presented` is `token`, unless too many sign-ins were refused within WINDOW."""
    with conn.transaction():
        conn.execute(_LOCK)
        conn.execute(_FORGET, {"window": WINDOW})
        [recent] = conn.execute(_RECENT, {"window": WINDOW}).fetchone() or [0]
        if recent >= FAILURES:
            return Verdict.RATE_LIMITED
        if hmac.compare_digest(presented.encode(), token.encode()):
            return Verdict.SIGNED_IN
        conn.execute(_FAILED)
        return Verdict.WRONG_TOKEN
