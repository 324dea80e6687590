"""The `stripe.fetch` job, run by the outbox worker: fetch an object, apply it once.

The API call happens here, before any connection is checked out, so a slow
Stripe never holds a claim. The fetched object then goes through
`core.ingest`, the one transaction boundary, as the snapshot event
`domains.stripe.thin.fetched_event` builds under the id `<event id>:fetched`: a job
retaken after its worker died, or run again for any reason, meets that
claim and changes nothing.
"""

from __future__ import annotations

import functools
import json

import stripe

from webhooks import bootstrap
from webhooks.core import ingest
from webhooks.core.events import InvalidEvent, InvalidFields
from webhooks.domains.stripe import api as stripe_api
from webhooks.domains.stripe import thin
from webhooks.infra.config import Settings
from webhooks.providers.stripe import NAME, UnsupportedApiVersion, parse, require_api_version


class FetchFailed(RuntimeError):
    """The fetch or its application did not complete; the job is retried."""


@functools.lru_cache(maxsize=1)
def _client(settings: Settings) -> stripe.StripeClient:
    return stripe_api.client(settings)


def run(service: bootstrap.Service, payload: bytes) -> ingest.Answer:
    """Fetch the job's object and apply it, with the worker's handlers, as its snapshot event."""
    settings = service.settings
    job = json.loads(payload)
    try:
        api = _client(settings)
        auth = {job["via"]: job["account"]} if job.get("account") else {}
        obj = stripe_api.get(api, job["url"], **auth)
        event = parse(json.dumps(thin.fetched_event(job, obj, settings.stripe_api_version)))
        # Fetched in the pinned STRIPE_API_VERSION: outside the handled range it
        # would be re-synced forever, so the job fails (and is retried) instead.
        require_api_version(event, settings.stripe_api_versions)
    except (stripe_api.ApiNotConfigured, stripe_api.ApiFailed, InvalidEvent, UnsupportedApiVersion) as exc:
        raise FetchFailed(f"{job['event_id']}: {exc}") from exc
    # Admitted when its thin event (or the event it re-syncs) was claimed.
    answer = service.deliver(NAME, event)
    # A fetched object refused for good (its stored 422) is as final as a 200:
    # fetching it again brings the same object.
    if answer.status not in (200, InvalidFields.status):
        raise FetchFailed(f"{event.id}: {answer.status} {answer.outcome}")
    return answer
