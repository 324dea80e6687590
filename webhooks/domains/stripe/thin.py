"""Thin events and re-syncs: fetch the object from Stripe, then apply it once.

A thin event (`object: v2.core.event`) names its object without carrying it;
Stripe's docs say to fetch the related object (or the versioned event) while
processing it. That call must not run inside the claim's transaction, so the
claim only records the intent here, as a `stripe.fetch` outbox job that
commits with the claim; the worker fetches and applies the object (fetch.py) through
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

from functools import partial

import psycopg

from webhooks.core.events import Event, require_id
from webhooks.core.outcomes import IGNORED, NOTIFIED
from webhooks.core.parts import Parts
from webhooks.core.registry import Handler, Registry
from webhooks.providers.stripe import NAME, UnsupportedApiVersion, thin

from . import fetch
from .objects import PATHS

# The event is recorded and its object will be fetched and applied by the worker.
FETCH_QUEUED = "fetch_queued"
RESYNC_QUEUED = "resync_queued"
PARTS = Parts(outcomes=(NOTIFIED, FETCH_QUEUED, RESYNC_QUEUED))


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
    applies_as, url = snapshot_type(event.type), _url(event)
    if applies_as is None or registry.handler_name(NAME, applies_as) is None or url is None:
        return NOTIFIED
    return partial(fetch_later, applies_as=applies_as, url=url)


def _url(event: Event) -> str | None:
    related = event.data.get("related_object")
    url = related.get("url") if isinstance(related, dict) else None
    return url if isinstance(url, str) else None


def fetch_later(conn: psycopg.Connection, event: Event, applies_as: str, url: str) -> str:
    """Queue the fetch of a thin event's object (at `url`), to apply as its snapshot twin."""
    # The context is the Connect account: it is sent as Stripe-Context, as the
    # stripe library's own fetch_related_object does.
    fetch.enqueue(conn, event, applies_as, url, via="context")
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
    kind = obj.get("object")
    path = PATHS.get(kind) if isinstance(kind, str) else None
    if path is None:
        return False
    url = path + require_id(obj.get("id"), "object id")
    fetch.enqueue(conn, event, event.type, url, via="account")
    return True
