"""The `stripe.fetch` job: fetch an object from Stripe, then apply it once, run by the outbox worker.

The claim only records the intent (thin.py): a job that commits with it.
The worker performs the job itself rather than POSTing it, outside any
claim: the API call happens before any connection is checked out, so a
slow Stripe never holds a claim. The fetched object then goes through
`core.ingest`, the one transaction boundary, as the snapshot event
`fetched_event` builds under the id `<event id>:fetched`: a job retaken
after its worker died, or run again for any reason, meets that claim and
changes nothing.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Literal

import psycopg
import stripe
from pydantic import ConfigDict

from webhooks.core import jobs, outbox
from webhooks.core.events import Event, InvalidEvent, InvalidFields, require_created
from webhooks.core.parts import Parts
from webhooks.infra.config import Settings
from webhooks.providers.stripe import NAME, UnsupportedApiVersion, parse, require_api_version

from . import api as stripe_api

# The fetched object is applied as an event with this id: one claim per thin event.
FETCHED_SUFFIX = ":fetched"


class FetchFailed(jobs.JobFailed):
    """The fetch or its application did not complete; the job is retried."""


@functools.lru_cache(maxsize=1)
def _client(settings: Settings) -> stripe.StripeClient:
    return stripe_api.client(settings)


def run(service: jobs.Service, payload: bytes) -> jobs.Answered:
    """Fetch the job's object and apply it, with the worker's handlers, as its snapshot event."""
    settings = service.settings
    job = json.loads(payload)
    try:
        api = _client(settings)
        auth = {job["via"]: job["account"]} if job.get("account") else {}
        obj = stripe_api.get(api, job["url"], **auth)
        event = parse(json.dumps(fetched_event(job, obj, settings.stripe_api_version)))
        # Fetched in the pinned STRIPE_API_VERSION: outside the handled range it
        # would be re-synced forever, so the job fails (and is retried) instead.
        require_api_version(event, settings.stripe_api_versions)
    except (stripe_api.ApiNotConfigured, stripe_api.ApiFailed, InvalidEvent, UnsupportedApiVersion) as exc:
        raise FetchFailed(f"{job['event_id']}: {exc}") from exc
    # Not admitted again: its thin event (or the event it re-syncs) was, when it was accepted.
    answer = service.accept(NAME, event)
    # A fetched object refused for good (its stored 422) is as final as a 200:
    # fetching it again brings the same object.
    if answer.status not in (200, InvalidFields.status):
        raise FetchFailed(f"{event.id}: {answer.status} {answer.outcome}")
    return answer


class StripeFetchJob(jobs.Job):
    """Not POSTed: the worker fetches `url` in the pinned `STRIPE_API_VERSION` and applies it through the
    handlers. Key: `stripe.fetch:<event_id>`."""

    model_config = ConfigDict(title="Fetch an object from Stripe and apply it once")

    kind: Literal["stripe.fetch"]
    event_id: str
    """the thin or out-of-range event; applied as `<event_id>:fetched`"""
    event_type: str
    """the snapshot type the fetched object is applied as"""
    url: str
    """the API path to fetch (`/v1/payment_intents/pi_...`)"""
    account: str | None
    """the Connect account (`acct_...`) the object belongs to; null for the platform's own"""
    via: Literal["context", "account"]
    """how the account is sent: `context` (Stripe-Context, a thin event's) or `account` (Stripe-Account)"""
    livemode: bool | None
    """the event's mode"""
    created: int
    """the event's creation time (Unix time), which orders it"""


FETCH = jobs.documented(StripeFetchJob, perform=run)
PARTS = Parts(jobs=(FETCH,))


def enqueue(conn: psycopg.Connection, event: Event, applies_as: str, url: str, via: str) -> None:
    """Queue the fetch of `url`, to apply as an event of type `applies_as`, in `conn`'s transaction.

    `via` is how the event's account is sent: `account` (Stripe-Account) or
    `context` (Stripe-Context, a thin event's).
    """
    outbox.enqueue(
        conn, FETCH, _payload(event, applies_as, url, via), idempotency_key=f"{FETCH.name}:{event.id}"
    )


def _payload(event: Event, applies_as: str, url: str, via: str) -> dict[str, Any]:
    return {
        "event_id": event.id,
        "event_type": applies_as,
        "url": url,
        "account": event.account,
        "via": via,
        "livemode": event.livemode,
        "created": int(require_created(event).timestamp()),
    }


def fetched_event(job: dict[str, Any], obj: dict[str, Any], api_version: str) -> dict[str, Any]:
    """The snapshot event the handlers apply: the job's event carrying the fetched object."""
    envelope = {"account": job["account"]} if job["account"] else {}
    return {
        "id": job["event_id"] + FETCHED_SUFFIX,
        "object": "event",
        "api_version": api_version,
        "created": job["created"],
        "livemode": job["livemode"],
        "type": job["event_type"],
        "data": {"object": obj},
        **envelope,
    }
