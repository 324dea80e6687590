"""Deliveries made the way Stripe makes them, to drive a real server through faults.

Each attempt is signed afresh (a new `t=`), and anything but a 2xx, including
no answer at all, is retried with exponential backoff until a 2xx or the retry
budget runs out. Stripe's schedule is hours long; this one is compressed.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import requests

from tests.conftest import SECRET, signed_headers
from webhooks.traffic import checker, samples


@dataclass(frozen=True)
class Attempt:
    started: float  # time.monotonic()
    seconds: float
    status: int | None  # None: the connection failed or was cut
    replayed: bool = False

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass
class Delivery:
    event: dict
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def delivered(self) -> bool:
        return bool(self.attempts) and self.attempts[-1].ok


@dataclass(frozen=True)
class Provider:
    url: str
    secret: str = SECRET
    budget_s: float = 30.0
    first_backoff_s: float = 0.05
    max_backoff_s: float = 1.0
    timeout_s: float = 30.0

    def deliver(self, event: dict, session: requests.Session | None = None) -> Delivery:
        session = session or requests.Session()
        body = samples.encode(event)
        delivery = Delivery(event)
        deadline = time.monotonic() + self.budget_s
        backoff = self.first_backoff_s
        while True:
            attempt = self._attempt(session, body)
            delivery.attempts.append(attempt)
            if attempt.ok or time.monotonic() > deadline:
                return delivery
            # Jitter keeps retries of duplicates from arriving in lockstep.
            time.sleep(backoff * random.uniform(0.5, 1.5))
            backoff = min(backoff * 2, self.max_backoff_s)

    def _attempt(self, session: requests.Session, body: bytes) -> Attempt:
        started = time.monotonic()
        try:
            response = session.post(
                self.url + "/webhooks/stripe",
                data=body,
                headers=signed_headers(body, self.secret),
                timeout=self.timeout_s,
            )
        except requests.RequestException:
            # A cut connection may have been reused by the pool: start afresh.
            session.close()
            return Attempt(started, time.monotonic() - started, None)
        return Attempt(
            started,
            time.monotonic() - started,
            response.status_code,
            response.headers.get("Idempotent-Replayed") == "true",
        )


def paid_deliveries(payments: int, copies: int = 2) -> tuple[list[dict], set[str]]:
    """Every event of `payments` Checkout payments, each `copies` times, shuffled.

    Returns the events to deliver and the payment ids that must each end up
    fulfilled exactly once.
    """
    events, payment_ids = [], set()
    for _ in range(payments):
        checkout, intent, charge = samples.payment_events()
        payment_ids.add(intent["data"]["object"]["id"])
        events += [checkout, intent, charge] * copies
    random.shuffle(events)
    return events, payment_ids


class Load:
    """Deliveries running in the background on `senders` threads, each with its own HTTP session."""

    def __init__(self, provider: Provider, events: list[dict], senders: int):
        self._provider = provider
        self._local = threading.local()
        self._done = threading.Condition()
        self.deliveries: list[Delivery] = []
        self._pool = ThreadPoolExecutor(senders)
        self._futures = [self._pool.submit(self._deliver, event) for event in events]

    def _deliver(self, event: dict) -> Delivery:
        if not hasattr(self._local, "session"):
            self._local.session = requests.Session()
        delivery = self._provider.deliver(event, self._local.session)
        with self._done:
            self.deliveries.append(delivery)
            self._done.notify_all()
        return delivery

    def wait_delivered(self, count: int, timeout: float = 60.0) -> None:
        """Block until `count` deliveries have finished (to fault the server mid-load)."""
        with self._done:
            assert self._done.wait_for(lambda: len(self.deliveries) >= count, timeout)

    def join(self) -> list[Delivery]:
        deliveries = [future.result() for future in self._futures]
        self._pool.shutdown()
        return deliveries


def attempts(deliveries: list[Delivery]) -> list[Attempt]:
    return sorted((a for d in deliveries for a in d.attempts), key=lambda a: a.started)


def failed_attempts(deliveries: list[Delivery]) -> list[Attempt]:
    """Attempts the provider had to retry (409 in-flight answers are normal under duplicates)."""
    return [a for a in attempts(deliveries) if not a.ok and a.status != 409]


def status_counts(deliveries: list[Delivery]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for attempt in attempts(deliveries):
        key = str(attempt.status or "no answer")
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def history(deliveries: list[Delivery]) -> list[checker.Answer]:
    """Every attempt of every delivery, as the history checker reads it."""
    return [
        checker.Answer(
            d.event["id"], a.status, a.started, a.started + a.seconds, a.replayed, d.event.get("account")
        )
        for d in deliveries
        for a in d.attempts
    ]


def assert_exactly_once(db, deliveries: list[Delivery], payment_ids: set[str]) -> checker.Verdict:
    """The provider saw every delivery succeed, the history checker finds nothing lost
    or doubled, and nothing outside the paid set was fulfilled (the test owns its schema)."""
    undelivered = [d.event["id"] for d in deliveries if not d.delivered]
    assert not undelivered, f"{len(undelivered)} deliveries never got a 2xx: {undelivered[:5]}"
    verdict = checker.check(db, history(deliveries))
    assert verdict.passed, verdict.checks()
    fulfilled = db.execute("SELECT payment_id FROM fulfilments").fetchall()
    assert sorted(r[0] for r in fulfilled) == sorted(payment_ids)
    return verdict
