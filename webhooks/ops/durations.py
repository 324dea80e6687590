"""Operator-typed time spans: `30d`, `12h`, `90m`, `45s`, or an ISO instant."""
from __future__ import annotations

import argparse
import re
from datetime import datetime, timedelta, timezone

_SPAN = re.compile(r"(\d+)([dhms])")
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def span(text: str) -> timedelta:
    """`30d` -> 30 days; an argparse type, so a typo is a usage error."""
    match = _SPAN.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a span like 30d, 12h, 90m or 45s")
    return timedelta(**{_UNITS[match[2]]: int(match[1])})


def instant(text: str) -> datetime:
    """A span back from now (`1h`) or an ISO-8601 time (UTC unless it says otherwise)."""
    try:
        return datetime.now(timezone.utc) - span(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a span (1h) nor an ISO time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
