"""The `stripe.fetch` job, run by the outbox worker: fetch an object, apply it once.

The API call happens here, before any connection is checked out, so a slow
Stripe never holds a claim. The fetched object then goes through
`ingest.deliver`, the one transaction boundary, as the snapshot event
`stripe.thin.fetched_event` builds under the id `<event id>:fetched`: a job
retaken after its worker died, or run again for any reason, meets that
claim and changes nothing.
"""
from __future__ import annotations

import functools
import json

import stripe
from psycopg_pool import ConnectionPool

from webhooks.domains.stripe import api as stripe_api
from webhooks import fulfilment
from webhooks.core import ingest
from webhooks.infra.config import Settings
from webhooks.infra.db import open_pool
from webhooks.core.events import InvalidEvent, UnsupportedApiVersion, parse, require_api_version
from webhooks.web.app import PROVIDER
from webhooks.domains.stripe import thin


class FetchFailed(RuntimeError):
    """The fetch or its application did not complete; the job is retried."""


@functools.lru_cache(maxsize=1)
def _resources(settings: Settings) -> tuple[stripe.StripeClient, ConnectionPool]:
    api = stripe_api.client(settings)
    fulfilment.load(settings.handler_modules)
    return api, open_pool(settings, min_size=1, max_size=2)


def run(settings: Settings, payload: bytes) -> ingest.Answer:
    job = json.loads(payload)
    try:
        api, pool = _resources(settings)
        auth = {job["via"]: job["account"]} if job.get("account") else {}
        obj = stripe_api.get(api, job["url"], **auth)
        event = parse(json.dumps(thin.fetched_event(job, obj, settings.stripe_api_version)))
        # Fetched in the pinned STRIPE_API_VERSION: outside the handled range it
        # would be re-synced forever, so the job fails (and is retried) instead.
        require_api_version(event, settings.stripe_api_versions)
    except (stripe_api.ApiNotConfigured, stripe_api.ApiFailed, InvalidEvent, UnsupportedApiVersion) as exc:
        raise FetchFailed(f"{job['event_id']}: {exc}") from exc
    answer = ingest.deliver(pool, PROVIDER, event)
    if answer.status != 200:
        raise FetchFailed(f"{event.id}: {answer.status} {answer.outcome}")
    return answer
