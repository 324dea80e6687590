"""Personal data replaced: in stored payloads (`prune`, the privacy handlers), and in what is shown.

`Policy` is what an operator is shown, by /admin, `events show` (its text
and `--json`) alike: the value of every personal key (the domains'
declared ones and WEBHOOK_REDACT_FIELDS), of a card's identifying keys
(CARD_FIELDS) at any depth, and the email addresses, phone numbers and
street addresses in any text, descriptions and metadata included
(webhooks/infra/personal.py, which the log lines are scrubbed by too).
`events show --show-personal` is the only way around it, and is audited.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from webhooks.infra import personal

REDACTED = personal.REDACTED
# What identifies a card across payments, wherever an object carries one
# (a PaymentMethod's card, a charge's payment_method_details, a wallet's).
CARD_FIELDS = frozenset({"last4", "dynamic_last4", "fingerprint", "exp_month", "exp_year"})


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


@dataclass(frozen=True)
class Policy:
    """What is never shown: the values of `fields` and CARD_FIELDS, and personal data in any text."""

    fields: frozenset[str]

    def value(self, value: Any) -> Any:
        hidden = self.fields | CARD_FIELDS
        if isinstance(value, dict):
            return {k: REDACTED if k in hidden else self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, str):
            return personal.scrub(value)
        return value

    def text(self, text: str | None) -> str | None:
        return personal.scrub(text) if text else text

    def payload(self, payload: str | None) -> str | None:
        """`payload` (JSON text) as it may be shown; text that is not JSON is scrubbed as text."""
        if payload is None:
            return None
        try:
            return json.dumps(self.value(json.loads(payload)))
        except ValueError:
            return personal.scrub(payload)
