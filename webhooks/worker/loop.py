"""The outbox worker: deliver outbox jobs to WEBHOOK_OUTBOX_URL, and run the stripe.fetch job.

Beside them it tells the access flips that time alone made (access.sweep).

pgqueuer runs the loop: it claims jobs with FOR UPDATE SKIP LOCKED (so any
number of workers share the queue without taking the same job), wakes on
its NOTIFY channel when the claim's transaction commits a job and polls
every WEBHOOK_OUTBOX_POLL_SECONDS in case a notification was missed, and
retakes a job whose worker stopped heartbeating (killed mid-delivery).
This module decides what a delivery is and what a failure costs.
"""

from __future__ import annotations

import asyncio
import signal
from datetime import timedelta

import psycopg
import requests
import structlog
from pgqueuer import PgQueuer
from pgqueuer.domain.errors import RetryRequested
from pgqueuer.models import Job

from webhooks import bootstrap
from webhooks.core import outbox
from webhooks.domains.stripe import access, thin
from webhooks.infra.config import Settings
from webhooks.infra.db import database_url

from . import fetch

log = structlog.get_logger(__name__)


class DeliveryFailed(RuntimeError):
    """The downstream did not confirm; the message is what an operator sees."""


def post(settings: Settings, job: Job) -> None:
    """One HTTP delivery; any answer but 2xx is a failure to retry."""
    try:
        response = requests.post(
            settings.outbox_url,
            data=job.payload,
            headers={
                "Content-Type": "application/json",
                "Idempotency-Key": job.headers[outbox.KEY_HEADER],
            },
            timeout=settings.outbox_http_timeout_s,
        )
        response.raise_for_status()
    except requests.RequestException as exc:
        raise DeliveryFailed(f"{type(exc).__name__}: {exc}"[:500]) from exc


def perform(service: bootstrap.Service, job: Job) -> None:
    """A `stripe.fetch` job reads Stripe and applies the object; any other is POSTed."""
    if job.headers.get(outbox.KIND_HEADER) != thin.FETCH:
        return post(service.settings, job)
    try:
        fetch.run(service, job.payload)
    except fetch.FetchFailed as exc:
        raise DeliveryFailed(str(exc)[:500]) from exc


async def deliver(service: bootstrap.Service, job: Job) -> None:
    settings = service.settings
    key = job.headers[outbox.KEY_HEADER]
    try:
        # requests and psycopg are blocking: a thread keeps the loop free for heartbeats.
        await asyncio.to_thread(perform, service, job)
    except DeliveryFailed as exc:
        attempt = job.attempts + 1
        if attempt >= settings.outbox_max_attempts:
            log.error("outbox_dead", job_id=job.id, idempotency_key=key, attempt=attempt, error=str(exc))
            raise  # on_failure="hold": the job stays, status failed, for an operator
        delay = outbox.backoff_s(job.attempts, settings.outbox_backoff_base_s, settings.outbox_backoff_max_s)
        log.warning(
            "outbox_retry",
            job_id=job.id,
            idempotency_key=key,
            attempt=attempt,
            delay_s=round(delay, 3),
            error=str(exc),
        )
        raise RetryRequested(delay=timedelta(seconds=delay), reason=str(exc)) from exc
    log.info("outbox_delivered", job_id=job.id, idempotency_key=key, attempt=job.attempts + 1)


def sweep_access(url: str) -> None:
    """Tell the access flips time alone made (see access.sweep); any worker may, at once."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            told = access.sweep(conn)
    except psycopg.Error as exc:
        log.warning("access_sweep_failed", error=type(exc).__name__)
        return
    if told:
        log.info("access_sweep", told=told)


async def _sweeping(settings: Settings, url: str) -> None:
    while True:
        await asyncio.to_thread(sweep_access, url)
        await asyncio.sleep(settings.access_sweep_s)


async def run(service: bootstrap.Service) -> None:
    """Until SIGTERM or SIGINT: the queue, and the access sweep beside it."""
    url = database_url(service.settings)
    sweeper = asyncio.create_task(_sweeping(service.settings, url))
    try:
        await _queue(service, url)
    finally:
        sweeper.cancel()


async def _queue(service: bootstrap.Service, url: str) -> None:
    settings = service.settings
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        pgq = PgQueuer.from_psycopg_connection(conn)

        @pgq.entrypoint(outbox.ENTRYPOINT, on_failure="hold")
        async def _deliver(job: Job) -> None:
            await deliver(service, job)

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, pgq.shutdown.set)
        log.info("outbox_worker_started", url=settings.outbox_url)
        await pgq.qm.run(
            dequeue_timeout=timedelta(seconds=settings.outbox_poll_s),
            batch_size=settings.outbox_concurrency,
            max_concurrent_tasks=2 * settings.outbox_concurrency,
            heartbeat_timeout=timedelta(seconds=settings.outbox_heartbeat_timeout_s),
        )
