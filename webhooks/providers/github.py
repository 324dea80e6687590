"""GitHub webhooks: `X-Hub-Signature-256`, the delivery GUID, the event name in a header.

GitHub documents only the HMAC (HMAC-SHA256 of the raw body under the
webhook's secret, hex, prefixed `sha256=`), so it is checked here with
`hmac.compare_digest` against each configured secret. Only
`application/json` deliveries are read; a webhook set to
`application/x-www-form-urlencoded` gets 400 `invalid_event`.

What the HMAC proves: the body was written by GitHub (or whoever holds the
secret). What it does not: the headers. GitHub sends no timestamp, and
`X-GitHub-Delivery` and `X-GitHub-Event` are unsigned, so a captured delivery
can be re-sent at any time, under a new GUID or another event name. The
ledger's dedupe on the GUID stops GitHub's own redeliveries (its UI keeps
the GUID); the event name is believed only when the body has that event's
shape (SHAPES), else 400 before anything is written; and a handler with an
effect must key it on an id in the body, which a replay under a new GUID
repeats. The built-in `ping` has no effect to repeat.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from typing import Any

from webhooks.core.events import Event, InvalidEvent, InvalidSignature

from .base import Headers, Outgoing, Provider
from .fields import TOKEN, event_type, header_id, json_object, utf8

NAME = "github"
SIGNATURE, DELIVERY, EVENT = "X-Hub-Signature-256", "X-GitHub-Delivery", "X-GitHub-Event"
_HEX = re.compile(r"sha256=([0-9a-f]{64})")


def digest(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def verify(body: bytes, headers: Headers, secrets: Sequence[str], tolerance_s: int) -> str:
    sent = headers.get(SIGNATURE) or ""
    if not _HEX.fullmatch(sent):
        raise InvalidSignature(f"missing or malformed {SIGNATURE}")
    if not any(hmac.compare_digest(digest(body, s), sent) for s in secrets if s):
        raise InvalidSignature("no valid signature for this body")
    return utf8(body)


def account(data: dict[str, Any]) -> str | None:
    """The repository (`owner/name`), else the organization, the delivery is about.

    Both are documented common properties of GitHub's payloads and lie inside
    the signed body; an App's `installation.id` names who installed the app,
    not what the event concerns. None when neither is there (an app's own
    events, a sponsor).
    """
    for key, field in (("repository", "full_name"), ("organization", "login")):
        value = data.get(key)
        name = value.get(field) if isinstance(value, dict) else None
        if isinstance(name, str) and TOKEN.fullmatch(name):
            return name
    return None


# Each event's own fields (required), and those that mark another event
# with the same ones (forbidden), from GitHub's "Webhook events and
# payloads" (https://docs.github.com/en/webhooks/webhook-events-and-payloads):
# an issue_comment's body has the `issue` an issues event has, and a comment.
# An event not listed here is taken as named: its shape is not known.
SHAPES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    name: (frozenset(required), frozenset(forbidden))
    for name, required, forbidden in (
        ("ping", ("zen", "hook_id"), ()),
        ("push", ("ref", "before", "after"), ("ref_type", "action")),
        ("create", ("ref", "ref_type", "master_branch"), ("after",)),
        ("delete", ("ref", "ref_type"), ("after", "master_branch")),
        ("issues", ("action", "issue"), ("comment",)),
        ("issue_comment", ("action", "issue", "comment"), ()),
        ("pull_request", ("action", "number", "pull_request"), ("review", "comment", "thread")),
        ("pull_request_review", ("action", "review", "pull_request"), ()),
        ("pull_request_review_comment", ("action", "comment", "pull_request"), ()),
        ("release", ("action", "release"), ()),
        ("workflow_run", ("action", "workflow_run"), ()),
        ("workflow_job", ("action", "workflow_job"), ()),
        ("check_run", ("action", "check_run"), ()),
        ("check_suite", ("action", "check_suite"), ()),
        ("deployment", ("action", "deployment"), ("deployment_status",)),
        ("deployment_status", ("action", "deployment", "deployment_status"), ()),
        ("status", ("sha", "state", "context"), ()),
        ("fork", ("forkee",), ()),
        ("star", ("action", "starred_at"), ()),
        ("installation", ("action", "installation"), ("repositories_added", "repositories_removed")),
        ("sponsorship", ("action", "sponsorship"), ()),
    )
}


def _shaped(name: str, data: dict[str, Any]) -> str:
    """`name` if the body has its event's shape (or the event is not listed); InvalidEvent otherwise."""
    required, forbidden = SHAPES.get(name, (frozenset(), frozenset()))
    if not required <= data.keys() or forbidden & data.keys():
        raise InvalidEvent(f"body is not the shape of a {name} event ({EVENT})")
    return name


def parse(text: str, headers: Headers) -> Event:
    data = json_object(text)
    return Event(
        id=header_id(headers, DELIVERY),
        type=_shaped(event_type(headers.get(EVENT), EVENT), data),
        # GitHub payloads have no event time of their own.
        created=None,
        livemode=None,
        account=account(data),
        raw=text,
        data=data,
    )


def sign(body: bytes, secret: str, outgoing: Outgoing) -> dict[str, str]:
    """The headers GitHub sets on a delivery (the old SHA-1 `X-Hub-Signature` left out)."""
    return {
        SIGNATURE: digest(body, secret),
        DELIVERY: outgoing.event_id,
        EVENT: outgoing.event_type,
        "User-Agent": "GitHub-Hookshot/webhooks-replay",
    }


PROVIDER = Provider(
    name=NAME,
    secret_setting="GITHUB_WEBHOOK_SECRET",
    secrets=lambda settings: settings.github_webhook_secrets,
    verify=verify,
    parse=parse,
    sign=sign,
)
