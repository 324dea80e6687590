"""`GET /metrics` in Prometheus text format (prometheus-client), on the scraper's own listener.

/metrics shows business counts and the outbox backlog, and a scrape costs a
database query, so it is not on the public listener. Behind the front,
gunicorn has a second socket that only the front's listener on
METRICS_HOST:METRICS_PORT hands requests to, whole and a few at a time
(webhooks/web/front.py); alone, gunicorn listens on METRICS_HOST:METRICS_PORT
itself. A request is served /metrics only when it came in there, which a
client cannot fake.

Under gunicorn every worker is its own process with its own counters; with
PROMETHEUS_MULTIPROC_DIR set (gunicorn.conf.py always sets it) each writes
them to files there and a scrape, whichever worker answers it, sums them.
Outbox depth and age are read from the database at scrape time, and the
front's refusals from the totals `serve` keeps of them, so they are the same
whichever process is asked.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import weakref
from collections.abc import Iterable

import structlog
from flask import Flask
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from webhooks.core import outbox
from webhooks.core.outcomes import ALREADY_FULFILLED
from webhooks.infra import db
from webhooks.infra.config import Settings

from . import ADMIN, LISTENER, PUBLIC, SCRAPER, front, refusals

log = structlog.get_logger(__name__)

# The answers whose event or payment had already been claimed by someone else.
_CONFLICTS = {
    "in_progress": "event_in_flight",
    "replayed": "event_completed",
    ALREADY_FULFILLED: "payment_fulfilled",
}
# psycopg_pool's cumulative statistics, popped after each request and added up.
_POOL_COUNTERS = ("requests_num", "requests_queued", "requests_errors", "connections_lost")
_POOL_GAUGES = ("pool_size", "pool_available", "requests_waiting")


class OutboxCollector:
    """Outbox jobs by status and the age of the oldest, queried per scrape.

    No describe(): registering it must not touch the database.
    """

    def __init__(self, pool):
        self._pool = pool

    def collect(self):
        jobs = GaugeMetricFamily(
            "webhook_outbox_jobs", "Outbox jobs not yet delivered, by status", labels=["status"]
        )
        age = GaugeMetricFamily(
            "webhook_outbox_oldest_age_seconds",
            "Age of the oldest outbox job in each status",
            labels=["status"],
        )
        try:
            with db.connection(self._pool.get(), timeout=2.0) as conn:
                counts = outbox.depth(conn)
        except Exception as exc:  # a scrape must still answer when the database does not
            log.warning("outbox_metrics_unavailable", error=type(exc).__name__)
            return
        for status in ("queued", "picked", outbox.DEAD):
            found = next((c for c in counts if c.status == status), None)
            jobs.add_metric([status], found.jobs if found else 0)
            age.add_metric([status], found.oldest_age_s if found else 0)
        yield jobs
        yield age


class FrontRefusals:
    """Requests the app never saw, refused by the front or gunicorn's parser, by status and reason.

    `serve` keeps the totals (webhooks/web/refusals.py); every process reads
    the same ones, so a scrape counts them all whichever worker answers it.
    """

    def __init__(self, front_dir: str):
        self._front_dir = front_dir

    def collect(self):
        family = CounterMetricFamily(
            "webhook_front_refusals",
            "Requests answered before the app saw them (by the front or gunicorn's parser), "
            "by status and reason",
            labels=["status", "reason"],
        )
        counted = {str(status): 0 for status in front.REFUSALS} | refusals.counts(self._front_dir)
        for status, count in sorted(counted.items()):
            family.add_metric([status, front.REFUSALS.get(int(status), "other")], count)
        yield family


class Metrics:
    """The app's own metrics, and the domains' (counted where their handlers run)."""

    def __init__(self, pool, front_dir: str | None = None, domains: Iterable[Collector] = ()):
        self._pool = pool
        self.registry = CollectorRegistry()
        self.deliveries = Counter(
            "webhook_deliveries_total",
            "Webhook deliveries answered, by provider, outcome and HTTP status",
            ["provider", "outcome", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "webhook_delivery_duration_seconds",
            "Time from request to answer for webhook deliveries",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.conflicts = Counter(
            "webhook_claim_conflicts_total",
            "Deliveries that found their event or payment already claimed",
            ["kind"],
            registry=self.registry,
        )
        self.returns = Counter(
            "webhook_checkout_returns_total",
            "Return calls from a shop's success page answered, by outcome (or error) and HTTP status",
            ["outcome", "status"],
            registry=self.registry,
        )
        self.sign_in_failures = Counter(
            "webhook_admin_sign_in_failures_total",
            "Refused sign-ins to the operator console, by reason (wrong_token, or rate_limited unchecked)",
            ["reason"],
            registry=self.registry,
        )
        self.pool_counters = {
            name: Counter(f"webhook_db_pool_{name}", f"psycopg_pool {name}", registry=self.registry)
            for name in _POOL_COUNTERS
        }
        self.pool_gauges = {
            name: Gauge(
                f"webhook_db_pool_{name}",
                f"psycopg_pool {name}, summed over live processes",
                multiprocess_mode="livesum",
                registry=self.registry,
            )
            for name in _POOL_GAUGES
        }
        # What each gauge was last set to in this process, and the lock that
        # keeps that equal to the gauge when threads set it together.
        self._pool_gauge_values: dict[str, float] = {}
        self._pool_gauge_lock = threading.Lock()
        for collector in domains:
            self.registry.register(collector)
        self.outbox = OutboxCollector(pool)
        self.registry.register(self.outbox)
        self.front = FrontRefusals(front_dir) if front_dir else None
        if self.front:
            self.registry.register(self.front)

    def delivery(
        self, provider: str, outcome: str | None, status: int, replayed: bool, seconds: float
    ) -> None:
        """One answered webhook delivery."""
        outcome = outcome or "rejected"
        self.deliveries.labels(provider, outcome, str(status)).inc()
        self.latency.observe(seconds)
        conflict = "replayed" if replayed else outcome
        if conflict in _CONFLICTS:
            self.conflicts.labels(_CONFLICTS[conflict]).inc()

    def checkout_return(self, outcome: str, status: int) -> None:
        """One answered return call (checkout_return.py): its outcome, or its error word."""
        self.returns.labels(outcome, str(status)).inc()

    def observe_pool_every(self, seconds: float) -> None:
        """The pool's figures written every `seconds` from a thread of this process's own.

        Under gunicorn a scrape is answered by one worker, which reads its own
        pool at scrape time; every other worker's figures are what it last
        wrote. Reading them on every delivery instead takes the pool's lock
        and a multi-process value's lock for figures that rarely change
        (docs/benchmark.md, "Every microsecond accounted").
        """

        def observe() -> None:
            while True:
                time.sleep(seconds)
                try:
                    self.observe_pool()
                except Exception as exc:  # the next tick tries again; deliveries never see it
                    log.warning("pool_metrics_unavailable", error=type(exc).__name__)

        threading.Thread(target=observe, name="pool-metrics", daemon=True).start()

    def observe_pool(self) -> None:
        # Only what changed is written: each write to a multi-process value
        # takes a lock and a pid check, and most of these figures stay put
        # from one delivery to the next.
        stats = self._pool.get().pop_stats()
        for name, counter in self.pool_counters.items():
            if stats.get(name):
                counter.inc(stats[name])
        with self._pool_gauge_lock:
            for name, gauge in self.pool_gauges.items():
                value = stats.get(name, 0)
                if self._pool_gauge_values.get(name) != value:
                    gauge.set(value)
                    self._pool_gauge_values[name] = value

    def exposition(self) -> bytes:
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        registry.register(self.outbox)
        if self.front:
            registry.register(self.front)
        return generate_latest(registry)

    def wsgi(self, environ, start_response):
        """The scraper's listener: `GET /metrics`, and nothing else."""
        if environ.get("PATH_INFO") != "/metrics" or environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return _not_found(start_response)
        self.observe_pool()
        body = self.exposition()
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(body)))])
        return [body]


class ByListener:
    """Each request to the app of the listener it came in on: the scraper's is served /metrics alone,
    the console's /admin alone, and the public one never either.

    Each is gunicorn's socket for it behind the front, or its port without one.
    A request on the console's socket came from the front, which names its
    client in X-Real-IP (the socket itself has no peer address).
    """

    def __init__(self, public, metrics: Metrics, settings: Settings):
        self._public, self._metrics = public, metrics
        if settings.front_dir:
            self._kinds: dict[str | int, str] = {
                str(front.metrics_socket_path(settings.front_dir)): SCRAPER,
                str(front.admin_socket_path(settings.front_dir)): ADMIN,
            }
        else:
            self._kinds = {settings.metrics_port: SCRAPER, settings.admin_port: ADMIN}
        # Per connection: its requests (keep-alive) all came in on one listener.
        self._listeners: weakref.WeakKeyDictionary[socket.socket, str] = weakref.WeakKeyDictionary()

    def __call__(self, environ, start_response):
        sock = environ.get("gunicorn.socket")
        if sock is None:  # Flask's test client: the listener its environ names, public by default
            kind = environ.setdefault(LISTENER, PUBLIC)
        else:
            kind = self._listeners.get(sock)
            if kind is None:
                kind = self._listeners[sock] = self._kinds.get(self._listener(sock), PUBLIC)
            environ[LISTENER] = kind
            if kind == ADMIN:
                if not environ.get("PATH_INFO", "").startswith("/admin"):
                    return _not_found(start_response)
                if sock.family == socket.AF_UNIX:
                    environ["REMOTE_ADDR"] = environ.get("HTTP_X_REAL_IP", "")
        if kind == SCRAPER:
            return self._metrics.wsgi(environ, start_response)
        return self._public(environ, start_response)

    @staticmethod
    def _listener(sock: socket.socket) -> str | int:
        """The path of the Unix socket, or the port, the connection was accepted on."""
        name = sock.getsockname()
        return name if sock.family == socket.AF_UNIX else name[1]


def _not_found(start_response):
    body = b'{"error":"not_found"}'
    start_response(
        "404 NOT FOUND", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]


def install(app: Flask, metrics: Metrics, settings: Settings) -> None:
    """`metrics` (what webhook deliveries are reported to) as /metrics, on the scraper's listener."""
    app.extensions["webhooks.metrics"] = metrics
    app.wsgi_app = ByListener(app.wsgi_app, metrics, settings)  # type: ignore[method-assign]
