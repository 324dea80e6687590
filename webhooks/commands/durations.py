"""Operator-typed time spans: `30d`, `12h`, `90m`, `45s`, or an ISO instant."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta

from webhooks.infra.config import parse_instant, parse_span


def span(text: str) -> timedelta:
    """`30d` -> 30 days; an argparse type, so a typo is a usage error."""
    try:
        return parse_span(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def instant(text: str) -> datetime:
    """A span back from now (`1h`) or an ISO-8601 time (UTC unless it says otherwise)."""
    try:
        return parse_instant(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
