"""Thin events and re-syncs: fetch the object from Stripe, then apply it once.

A thin event (`object: v2.core.event`) names its object without carrying it;
Stripe's docs say to fetch the related object (or the versioned event) while
processing it. That call must not run inside the claim's transaction, so the
claim only records the intent here, as a `stripe.fetch` outbox job that
commits with the claim; the worker fetches and applies the object through
the same handlers as a snapshot event, under an event id derived from the
thin event's, whose ledger claim makes the fetch once-only however often
the job runs.

`v1.payment_intent.succeeded` is the thin twin of `payment_intent.succeeded`:
the job applies the fetched object as that snapshot type. A thin type with no
snapshot handler stays `notified`.

The same job re-syncs the object of a snapshot event whose api_version the
handlers cannot read (`resync_later`, chosen by versions.Admission): fetched
with the pinned version, it has the shape they expect.
"""

from __future__ import annotations

from typing import Any

import psycopg

from webhooks.core import outbox
from webhooks.core.events import Event, require_created, require_id
from webhooks.core.outcomes import IGNORED, NOTIFIED
from webhooks.core.registry import Handler, Registry
from webhooks.providers.stripe import NAME, UnsupportedApiVersion, thin

FETCH = "stripe.fetch"
# The event is recorded and its object will be fetched and applied by the worker.
FETCH_QUEUED = "fetch_queued"
RESYNC_QUEUED = "resync_queued"
# The fetched object is applied as an event with this id: one claim per thin event.
FETCHED_SUFFIX = ":fetched"

# API v1 paths of the objects the handlers read (a thin event brings its own `url`).
OBJECT_PATHS = {
    "payment_intent": "/v1/payment_intents/",
    "checkout.session": "/v1/checkout/sessions/",
    "charge": "/v1/charges/",
    "dispute": "/v1/disputes/",
    "refund": "/v1/refunds/",
    "invoice": "/v1/invoices/",
    "subscription": "/v1/subscriptions/",
}


def snapshot_type(thin_type: str) -> str | None:
    """`v1.payment_intent.succeeded` -> `payment_intent.succeeded`; None for a v2 type."""
    return thin_type.removeprefix("v1.") if thin_type.startswith("v1.") else None


def unhandled(registry: Registry, event: Event) -> Handler | str:
    """What a Stripe event of a type no handler takes gets.

    A thin event names its object without carrying it: when a handler reads
    its snapshot twin, the object is fetched later (`fetch_later`); else the
    ledger row (id, type, payload) is the record a later fetch works from.
    Any other event is only recorded.
    """
    if not thin(event):
        return IGNORED
    applies_as = snapshot_type(event.type)
    if applies_as is None or registry.handler(NAME, applies_as) is None or _url(event) is None:
        return NOTIFIED
    return fetch_later


def _url(event: Event) -> str | None:
    related = event.data.get("related_object")
    url = related.get("url") if isinstance(related, dict) else None
    return url if isinstance(url, str) else None


def fetch_later(conn: psycopg.Connection, event: Event) -> str:
    """Queue the fetch of a thin event's object, to apply as its snapshot twin."""
    # The context is the Connect account: it is sent as Stripe-Context, as the
    # stripe library's own fetch_related_object does.
    enqueue_fetch(conn, event, snapshot_type(event.type), _url(event), via="context")
    return FETCH_QUEUED


def resync_later(conn: psycopg.Connection, event: Event) -> str:
    """A handled event in an API version the handlers cannot read: fetch its object instead.

    An object of a kind with no known path cannot be re-synced: refused as
    unsupported (500, recorded), so an operator sees it.
    """
    if not enqueue_resync(conn, event):
        raise UnsupportedApiVersion(
            "its api_version is not one the handlers read, and its data.object.object "
            "is not a kind this service can fetch again"
        )
    return RESYNC_QUEUED


def enqueue_resync(conn: psycopg.Connection, event: Event) -> bool:
    """Queue a fetch of a snapshot event's object, to apply in the pinned API version.

    Runs on `conn` in the caller's transaction. False when the object is of a
    kind with no known path (nothing queued).
    """
    obj = event.object
    path = OBJECT_PATHS.get(obj.get("object"))
    if path is None:
        return False
    url = path + require_id(obj.get("id"), "object id")
    enqueue_fetch(conn, event, event.type, url, via="account")
    return True


def enqueue_fetch(conn: psycopg.Connection, event: Event, applies_as: str, url: str, via: str) -> None:
    outbox.enqueue(
        conn,
        FETCH,
        fetch_payload(event, applies_as, url, via),
        idempotency_key=f"{FETCH}:{event.id}",
    )


def fetch_payload(event: Event, applies_as: str, url: str, via: str) -> dict[str, Any]:
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
