"""Service hosts and outbox workers on hosts of their own (support/netns.py), one PostgreSQL between them.

The database is a private PostgreSQL 15 server (tests/support/pg_servers.py)
listening on each host's database address, never the shared server at
127.0.0.1. Each host runs real processes: gunicorn as gunicorn.conf.py
serves the app, or `python -m webhooks worker`, delivering to a receiver in
the root namespace that records every Idempotency-Key it is sent
(tests/support/downstream.py). Senders in the root namespace reach the hosts over
their veth pairs, so a host's link to the database can be cut while its
senders still reach it.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg

from tests.conftest import SECRET, Gunicorn, service_env
from tests.support import netns, pg_servers
from tests.support.downstream import Downstream, Worker, delivered
from tests.support.pg_servers import Cluster, Server
from webhooks.infra import migrate
from webhooks.providers import Outgoing
from webhooks.traffic import checker, samples, sender
from webhooks.traffic import stripe as stripe_traffic

# A worker that notices new jobs and retries a failed delivery within a test's patience.
WORKER_ENV = {
    "WEBHOOK_OUTBOX_POLL_SECONDS": 0.5,
    "WEBHOOK_OUTBOX_HEARTBEAT_TIMEOUT_SECONDS": 3,
    "WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS": 0.05,
    "WEBHOOK_OUTBOX_BACKOFF_MAX_SECONDS": 0.5,
}


def unavailable() -> str | None:
    return netns.unavailable() or pg_servers.unavailable()


def require() -> None:
    netns.require()
    pg_servers.require()


@dataclass
class Site:
    hosts: list[netns.Host]
    database: Server
    receiver: Downstream
    services: list[Gunicorn] = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)

    def url(self, host: netns.Host) -> str:
        """The database as `host` reaches it."""
        return self.database.url(host=host.database_address)

    def connect(self) -> psycopg.Connection:
        return self.database.connect()

    def service(self, host: netns.Host, **env) -> Gunicorn:
        """gunicorn on `host`, ready (every worker booted, /readyz 200)."""
        served = Gunicorn(
            service_env(self.url(host), **{"WEB_CONCURRENCY": 2, **env}), host=host.address, inside=host.argv
        )
        self.services.append(served)
        return served

    def worker(self, host: netns.Host, **env) -> Worker:
        """`python -m webhooks worker` on `host`, delivering to the receiver."""
        env = service_env(self.url(host), WEBHOOK_OUTBOX_URL=self.receiver.url, **{**WORKER_ENV, **env})
        worker = Worker(env, inside=host.argv)
        self.workers.append(worker)
        # Connected before any cut: a worker that cannot reach the database at
        # start exits, saying so, for its process manager to start again.
        worker.wait_started()
        return worker

    def stop(self) -> None:
        """After the test: nothing is left to finish, so no idle keep-alive connection is waited out."""
        for service in self.services:
            service.stop(quick=True)
        for worker in self.workers:
            worker.stop()
        self.receiver.close()


@contextlib.contextmanager
def site(count: int, net: int = 27) -> Iterator[Site]:
    """`count` hosts on 10.<net>.0.0/16 and a migrated database; everything stopped and removed on exit."""
    with netns.hosts(count, net) as hosts:
        listen = ",".join(host.database_address for host in hosts)
        with Cluster(listen_addresses=listen, trusted_subnets=(f"10.{net}.0.0/16",)) as cluster:
            database = cluster.primary()
            migrate.migrate(database.url())
            made = Site(hosts, database, Downstream(host=hosts[0].root_address))
            try:
                yield made
            finally:
                made.stop()


class Storm:
    """loadtest's sender at each URL at once, every event `copies` times to each, back to back.

    Each URL gets the events in an order of its own: in the same order, the
    host whose sender is a moment ahead wins every claim. So every host wins
    some, and an event's copies race within a host, and across hosts
    wherever two orders bring it up together.
    """

    def __init__(
        self,
        urls: list[str],
        sent: list[tuple[bytes, Outgoing]],
        copies: int,
        concurrency: int,
        retry: sender.Retry,
        jitter_s: float = 0.0,
    ):
        """`jitter_s`: a random wait of up to this before each attempt, to spread the storm over time."""
        self.results: list[sender.Result | None] = [None] * len(urls)
        self._together = threading.Barrier(len(urls))
        self._threads = [
            threading.Thread(
                target=self._send,
                args=(
                    i,
                    url,
                    sender.plan(_shuffled(sent), copies, together=True),
                    concurrency,
                    retry,
                    jitter_s,
                ),
                daemon=True,
            )
            for i, url in enumerate(urls)
        ]
        for thread in self._threads:
            thread.start()

    def _send(self, i: int, url: str, deliveries, concurrency: int, retry: sender.Retry, jitter_s) -> None:
        self._together.wait()
        self.results[i] = sender.deliver(
            url + "/webhooks/stripe", SECRET, deliveries, concurrency, jitter_s, retry, progress=False
        )

    def join(self, timeout: float) -> list[sender.Result]:
        for thread in self._threads:
            thread.join(timeout)
        finished = [result for result in self.results if result is not None]
        assert len(finished) == len(self.results), "the storm did not finish in time"
        return finished

    @staticmethod
    def answers(results: list[sender.Result]) -> list[checker.Answer]:
        return [answer for result in results for answer in result.answers]


def _shuffled(sent: list[tuple[bytes, Outgoing]]) -> list[tuple[bytes, Outgoing]]:
    return random.sample(sent, len(sent))


@dataclass
class Run:
    """What one storm across service hosts, drained by the workers, ended with."""

    results: list[sender.Result]  # per service host
    verdict: checker.Verdict
    audit: dict[str, int]  # the Stripe traffic's own checks: name -> violations
    outbox: checker.Outbox
    drain_s: float  # from the storm's end to the last job delivered

    @property
    def events(self) -> int:
        return self.verdict.events

    @property
    def elapsed_s(self) -> float:
        return max(result.elapsed_s for result in self.results)

    @property
    def events_per_s(self) -> float:
        return self.events / self.elapsed_s

    def claimed(self, host: int) -> int:
        """Events service host `host` answered as new: the claims it won."""
        return sum(answer.new for answer in self.results[host].answers)

    def passed(self) -> bool:
        return self.verdict.passed and set(self.audit.values()) <= {0}


@contextlib.contextmanager
def two_hosts() -> Iterator[tuple[Site, list[Gunicorn]]]:
    """Two service hosts and two outbox workers, each on a host of its own, against one database."""
    with site(4) as here:
        web = [here.service(host) for host in here.hosts[:2]]
        for host in here.hosts[2:]:
            here.worker(host)
        yield here, web


def storm(here: Site, web: list[Gunicorn], events: int, copies: int, concurrency: int) -> Run:
    """`events` fresh payments' events, each sent `copies` times to every one of `web` at once
    over `concurrency` connections each; then the outbox drained, and the verdict."""
    sent = stripe_traffic.sent(samples.payment_stream(events))
    retry = sender.Retry(budget=30, cap_s=0.5)
    results = Storm([s.url for s in web], sent, copies, concurrency, retry).join(timeout=300)
    ended = time.monotonic()
    with here.connect() as conn:
        outbox = delivered(conn, here.receiver, timeout=60)
        drain_s = time.monotonic() - ended
        verdict = checker.check(conn, Storm.answers(results), outbox=outbox)
        audit = stripe_traffic.audit(conn, [out for _, out in sent])
    return Run(results, verdict, audit, outbox, drain_s)
