"""Replacing personal data in stored payloads: shared by `prune` and the privacy handlers."""

from __future__ import annotations

import json
from typing import Any

REDACTED = "[redacted]"


def redact_value(value: Any, fields: frozenset[str]) -> Any:
    """`value` with the value of every key in `fields`, at any depth, replaced."""
    if isinstance(value, dict):
        return {k: REDACTED if k in fields else redact_value(v, fields) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(v, fields) for v in value]
    return value


def redact(payload: str, fields: frozenset[str]) -> str:
    """`payload` (JSON text) with `fields` redacted; text that is not JSON is returned as it is."""
    try:
        return json.dumps(redact_value(json.loads(payload), fields))
    except ValueError:
        return payload  # not JSON: nothing we can find fields in
