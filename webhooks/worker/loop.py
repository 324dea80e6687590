"""The outbox worker: deliver outbox jobs to WEBHOOK_OUTBOX_URL, or perform those a domain performs itself.

A job kind with `perform` (Stripe's fetch, core/jobs.py) is performed here
instead of POSTed. Beside the queue the worker runs the domains' periodic
work (Stripe's access sweep, which tells the access flips time alone made)
and the operators' bulk jobs (core/bulk.py: a reprocess or requeue that
/admin or a command started).

pgqueuer runs the loop: it claims jobs in batches with FOR UPDATE SKIP
LOCKED (so any number of workers share the queue without taking the same
job), dequeues again at once while a batch comes back full, polls every
WEBHOOK_OUTBOX_POLL_SECONDS when the queue is empty (no write sends a
NOTIFY: migrations/0040_outbox_without_notify_trigger.sql), and retakes a
job whose worker stopped heartbeating (killed mid-delivery).
This module decides what a delivery is and what a failure costs, and
gives pgqueuer the connections it needs to keep up (`SplitDriver`, one
HTTP session).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import signal
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import aiohttp
import psycopg
import structlog
from pgqueuer import PgQueuer
from pgqueuer.adapters.drivers.psycopg import PsycopgDriver
from pgqueuer.domain.errors import RetryRequested
from pgqueuer.models import Job
from pgqueuer.ports.driver import Driver, NotifyCallback

from webhooks import bootstrap
from webhooks.core import bulk, jobs, outbox, partitions
from webhooks.core.parts import Periodic
from webhooks.infra.config import Settings
from webhooks.infra.db import connection, database_url
from webhooks.infra.logs import public_message

log = structlog.get_logger(__name__)


class DeliveryFailed(RuntimeError):
    """The downstream did not confirm; the message is what an operator sees."""


def _kind(job: Job) -> object:
    return (job.headers or {}).get(outbox.KIND_HEADER)


def _key(job: Job) -> str:
    """The job's idempotency key; a job without one fails at once (KeyError), never sent keyless."""
    return str((job.headers or {})[outbox.KEY_HEADER])


# Only an answer's status counts: of its body the worker reads at most this
# much, so a receiver that answers megabytes costs it neither memory nor time.
ANSWER_READ_CAP = 64 * 1024


async def post(http: aiohttp.ClientSession, url: str, job: Job, payload: bytes | None = None) -> None:
    """One HTTP delivery (of `payload`, by default the job's); any answer but 2xx (a redirect
    included) is a failure to retry."""
    try:
        async with http.post(
            url,
            data=job.payload if payload is None else payload,
            headers={
                "Content-Type": "application/json",
                "Idempotency-Key": _key(job),
            },
            allow_redirects=False,
        ) as response:
            await _read_capped(response)
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise DeliveryFailed(f"{type(exc).__name__}: {exc}"[:500]) from exc
    if not 200 <= response.status < 300:
        raise DeliveryFailed(f"HTTP {response.status} {response.reason} from {url}"[:500])


async def _read_capped(response: aiohttp.ClientResponse) -> None:
    """The answer read to its end if it fits the cap, so its connection is reused; else dropped.

    A longer answer is not read on: its connection is closed instead, and
    the bytes left unread go with it.
    """
    read = 0
    while read <= ANSWER_READ_CAP:
        chunk = await response.content.read(ANSWER_READ_CAP + 1 - read)
        if not chunk:
            return
        read += len(chunk)
    response.close()


async def perform(service: bootstrap.Service, http: aiohttp.ClientSession, url: str, job: Job) -> None:
    """A job of a kind a domain performs (Stripe's fetch) is performed here; any other is POSTed to `url`."""
    if await asyncio.to_thread(_from_test_traffic, service, job):
        log.info("outbox_test_traffic_not_sent", job_id=job.id, kind=_kind(job), reason="loadtest")
        return
    kind = _kind(job)
    known = service.registry.job_kind(kind) if isinstance(kind, str) else None
    try:
        if known is None or known.perform is None:
            payload = job.payload
            if known is not None and known.complete is not None:
                # stripe and psycopg are blocking: a thread keeps the loop free for heartbeats.
                payload = await asyncio.to_thread(known.complete, service, job.payload or b"")
            return await post(http, url, job, payload)
        await asyncio.to_thread(known.perform, service, job.payload or b"")
    except jobs.JobFailed as exc:
        raise DeliveryFailed(str(exc)[:500]) from exc


def _from_test_traffic(service: bootstrap.Service, job: Job) -> bool:
    """Whether a load test's event enqueued the job; a database that cannot say is a retry, never a send."""
    try:
        with connection(service.pool.get()) as conn:
            return outbox.from_test_traffic(conn, dict(job.headers or {}))
    except psycopg.Error as exc:  # the pool's timeout included
        raise DeliveryFailed(f"cannot tell whether a load test made it: {public_message(exc)}"[:500]) from exc


async def deliver(service: bootstrap.Service, http: aiohttp.ClientSession, url: str, job: Job) -> None:
    settings = service.settings
    key = _key(job)
    try:
        await perform(service, http, url, job)
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


def run_once(task: Periodic, url: str) -> None:
    """One round of a domain's periodic work; any worker may run it at once (the work locks what it takes)."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            told = task.run(conn)
    except psycopg.Error as exc:
        log.warning(f"{task.name}_failed", error=type(exc).__name__)
        return
    if told:
        log.info(task.name, told=told)


async def _every(task: Periodic, url: str) -> None:
    while True:
        await asyncio.to_thread(run_once, task, url)
        await asyncio.sleep(task.every_s)


def run_bulk_jobs(
    service: bootstrap.Service, conn: psycopg.Connection, stopping: Callable[[], bool] = lambda: False
) -> int:
    """The bulk jobs' items (core/bulk.py), a batch at a time on `conn` (autocommit), until none is
    left or `stopping`; how many ran.

    Each job that its last batch finished gets its closing audit line here,
    with the counts. A stopping worker ends after the batch in flight: the
    rest is the next worker's.
    """
    ran = 0
    while not stopping():
        batch = service.run_bulk_batch(conn)
        for job in batch.finished:
            bulk.audit("finished", job)
        if not batch.ran:
            break
        ran += len(batch.ran)
    return ran


# How often an idle worker looks for a bulk job: an operator's job starts within it.
BULK_POLL_S = 1.0


def _connected(conn: psycopg.Connection | None, url: str) -> psycopg.Connection:
    """`conn`, or a new autocommit connection where there is none or it was lost."""
    return conn if conn is not None and not conn.closed else psycopg.connect(url, autocommit=True)


async def _bulk_jobs(service: bootstrap.Service, url: str, stopping: asyncio.Event) -> None:
    """`run_bulk_jobs` on one connection of its own, kept between rounds; a lost one is made again.

    A round cut short by an error leaves its batch uncommitted: the next
    round takes it up where the last committed batch left off.
    """
    conn: psycopg.Connection | None = None
    # A thread of its own: a long job never holds one the deliveries' blocking calls need.
    own = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bulk-jobs")
    loop = asyncio.get_running_loop()
    try:
        while not stopping.is_set():
            ran = 0
            try:
                conn = await loop.run_in_executor(own, _connected, conn, url)
                rounds = functools.partial(run_bulk_jobs, service, conn, stopping.is_set)
                ran = await loop.run_in_executor(own, rounds)
            except Exception as exc:  # logged; the queue beside it goes on, and so do the jobs
                log.error("bulk_jobs_failed", error=type(exc).__name__, detail=public_message(exc))
                if conn is not None and isinstance(exc, psycopg.Error):
                    conn.close()
            if not ran:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), BULK_POLL_S)
    finally:
        if conn is not None:
            conn.close()
        own.shutdown()


async def run(service: bootstrap.Service, outbox_url: str) -> None:
    """Until SIGTERM or SIGINT: the queue, delivering to `outbox_url`, and the periodic work beside it."""
    url = database_url(service.settings)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    periodic = (partitions.AHEAD, *service.registry.periodic_work())
    beside = [asyncio.create_task(_every(task, url)) for task in periodic]
    bulk_jobs = asyncio.create_task(_bulk_jobs(service, url, stopping))
    try:
        await _reconnecting(service, url, outbox_url, stopping)
    finally:
        for task in beside:
            task.cancel()
        # Not cancelled: it ends after the batch in flight, which commits.
        stopping.set()
        await bulk_jobs


# A failover or a partition ends the worker's connections; it connects again
# by itself, sooner at first, then no faster than every few seconds.
_RECONNECT_BASE_S = 0.5
_RECONNECT_MAX_S = 10.0


async def _reconnecting(
    service: bootstrap.Service, url: str, outbox_url: str, stopping: asyncio.Event
) -> None:
    """The queue, connected again whenever its database connections are lost, until `stopping`.

    Jobs in flight at the loss keep their rows; any worker retakes them once
    their heartbeat is stale, and the receiver's Idempotency-Key absorbs a
    delivery that had gone out. Without DATABASE_URL the database is the
    embedded one, which bin/serve stops as it exits: the worker then exits
    too, saying so (commands/errors.py), rather than wait for it.
    """
    failures = 0
    while not stopping.is_set():
        try:
            async with _connections(url) as driver:
                failures = 0
                await _queue(service, driver, outbox_url, stopping)
            return
        except psycopg.OperationalError as exc:
            if not service.settings.database_url:
                raise
            delay = outbox.backoff_s(failures, _RECONNECT_BASE_S, _RECONNECT_MAX_S)
            failures += 1
            log.warning(
                "outbox_worker_reconnecting",
                error=public_message(exc),
                attempt=failures,
                delay_s=round(delay, 3),
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), delay)


class SplitDriver(Driver):
    """pgqueuer's psycopg driver with LISTEN on a connection of its own.

    psycopg's notifies() holds its connection's lock while it waits (pgqueuer
    waits up to a second at a time), so on one shared connection every
    dequeue, heartbeat and status write queued behind that wait: a few jobs a
    second, and heartbeats late enough for another worker to retake a job
    still in flight. Queries go to `queries`, the listener to `listening`.
    """

    def __init__(self, queries: psycopg.AsyncConnection, listening: psycopg.AsyncConnection):
        self._queries, self._listening = PsycopgDriver(queries), PsycopgDriver(listening)

    async def fetch(self, query: str, *args: object) -> list[dict[str, object]]:
        return await self._queries.fetch(query, *args)

    async def execute(self, query: str, *args: object) -> str:
        return await self._queries.execute(query, *args)

    async def notify(self, channel: str, payload: str) -> None:
        await self._queries.notify(channel, payload)

    async def add_listener(self, channel: str, callback: NotifyCallback) -> None:
        await self._listening.add_listener(channel, callback)

    async def remove_listener(self, channel: str, callback: NotifyCallback) -> None:
        await self._listening.remove_listener(channel, callback)

    @property
    def shutdown(self) -> asyncio.Event:
        return self._listening.shutdown

    @property
    def tm(self):
        return self._listening.tm

    async def __aenter__(self) -> SplitDriver:
        await self._listening.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._listening.__aexit__(*exc)


def _in_flight(settings: Settings) -> int:
    """Jobs one worker may hold at once: four dequeues' worth.

    pgqueuer stops dequeuing when a worker holds this many, and then sleeps
    its minimum poll interval. At twice the batch the dequeue loop filled
    that headroom before the first batch's completions were written, so it
    slept after every second batch; at four times the batch, completions
    free room while it dequeues (docs/benchmark.md, "Outbox: wake-up and drain").
    """
    return 4 * settings.outbox_concurrency


def _http(settings: Settings) -> aiohttp.ClientSession:
    """One session for every delivery: connections to the receiver are kept and reused."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=_in_flight(settings)),
        timeout=aiohttp.ClientTimeout(total=settings.outbox_http_timeout_s),
    )


@contextlib.asynccontextmanager
async def _connections(url: str) -> AsyncIterator[SplitDriver]:
    async with (
        await psycopg.AsyncConnection.connect(url, autocommit=True) as queries,
        await psycopg.AsyncConnection.connect(url, autocommit=True) as listening,
    ):
        yield SplitDriver(queries, listening)


async def _shut_down_on(stopping: asyncio.Event, pgq: PgQueuer) -> None:
    await stopping.wait()
    pgq.shutdown.set()


async def _queue(
    service: bootstrap.Service, driver: SplitDriver, outbox_url: str, stopping: asyncio.Event
) -> None:
    settings = service.settings
    async with _http(settings) as http:
        pgq = PgQueuer(driver)

        @pgq.entrypoint(outbox.ENTRYPOINT, on_failure="hold")
        async def _deliver(job: Job) -> None:
            await deliver(service, http, outbox_url, job)

        log.info("outbox_worker_started", url=outbox_url)
        shutting_down = asyncio.create_task(_shut_down_on(stopping, pgq))
        try:
            await pgq.qm.run(
                dequeue_timeout=timedelta(seconds=settings.outbox_poll_s),
                batch_size=settings.outbox_concurrency,
                max_concurrent_tasks=_in_flight(settings),
                heartbeat_timeout=timedelta(seconds=settings.outbox_heartbeat_timeout_s),
            )
        finally:
            shutting_down.cancel()
