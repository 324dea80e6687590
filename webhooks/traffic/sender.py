"""The retrying sender: deliveries at load, retried as providers retry them.

Each event is delivered K times over C concurrent connections. Like
Stripe, a delivery answered 409, 5xx or not at all is retried with
exponential backoff until it gets a 2xx or its attempt budget runs out.
`loadtest`, the benchmarks and the tests send through it.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp
from tqdm import tqdm

from webhooks.providers import Outgoing
from webhooks.providers.stripe import NAME

from . import checker, signing

# Stripe waits longer than any delivery should take before it counts a timeout.
REQUEST_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Retry:
    """Stripe's schedule (exponential backoff over days), scaled down to a test run."""

    budget: int = 8
    base_s: float = 0.05
    cap_s: float = 2.0

    def delay(self, failed_attempts: int) -> float:
        # Full jitter: duplicates that failed together do not come back together.
        return random.uniform(0, min(self.cap_s, self.base_s * 2 ** (failed_attempts - 1)))


def retryable(status: int | None) -> bool:
    """Whether Stripe would try again: no answer, 409 (in flight elsewhere) or 5xx."""
    return status is None or status == 409 or status >= 500


@dataclass(eq=False)
class Delivery:
    event_id: str
    body: bytes
    # What its signer needs beside the body (the dedupe id, the type, ...).
    outgoing: Outgoing
    attempts: int = 0


@dataclass
class Result:
    events: int
    deliveries: int
    elapsed_s: float = 0.0
    # Every HTTP attempt and its answer: the history the checker judges.
    answers: list[checker.Answer] = field(default_factory=list)
    dropped: int = 0
    # Why attempts failed, counted: "503 webhook_secret_missing", or the connection error.
    failures: Counter = field(default_factory=Counter)

    @property
    def accepted(self) -> int:
        """Attempts answered 2xx."""
        return sum(1 for answer in self.answers if answer.ok)

    @property
    def attempts(self) -> list[tuple[str, float]]:
        """(label, seconds) per HTTP attempt; label is the status, "200 replayed" or "error"."""
        return [(_label(a), a.answered_at - a.sent_at) for a in self.answers]

    @property
    def deliveries_per_s(self) -> float:
        return self.deliveries / self.elapsed_s

    @property
    def events_per_s(self) -> float:
        return self.events / self.elapsed_s

    def latencies_ms(self, label: str | None = None) -> list[float]:
        return sorted(s * 1000 for answer, s in self.attempts if label in (None, answer))


def _label(answer: checker.Answer) -> str:
    if answer.status is None:
        return "error"
    return f"{answer.status} replayed" if answer.replayed else str(answer.status)


def plan(sent: list[tuple[bytes, Outgoing]], duplicates: int, together: bool) -> list[Delivery]:
    """Every event `duplicates` times: back to back so the copies race, or shuffled."""
    deliveries = [Delivery(out.event_id, body, out) for body, out in sent for _ in range(duplicates)]
    if not together:
        random.shuffle(deliveries)
    return deliveries


def deliver(
    url: str,
    secret: str,
    deliveries: list[Delivery],
    concurrency: int,
    jitter_s: float = 0.0,
    retry: Retry = Retry(),
    progress: bool = True,
    provider: str = NAME,
) -> Result:
    result = Result(events=len({d.event_id for d in deliveries}), deliveries=len(deliveries))

    def sign(delivery: Delivery) -> dict[str, str]:
        return signing.headers(provider, delivery.body, secret, delivery.outgoing)

    with tqdm(total=len(deliveries), unit="delivery", disable=not progress, file=sys.stderr) as bar:
        started = time.perf_counter()
        asyncio.run(_deliver_all(url, sign, deliveries, concurrency, jitter_s, retry, result, bar))
        result.elapsed_s = time.perf_counter() - started
    return result


async def _deliver_all(url, sign, deliveries, concurrency, jitter_s, retry, result, bar) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Delivery] = asyncio.Queue()
    for delivery in deliveries:
        queue.put_nowait(delivery)
    unfinished = len(deliveries)
    all_done = asyncio.Event()

    def finish(status: int | None) -> None:
        nonlocal unfinished
        if status is None or not 200 <= status < 300:
            result.dropped += 1
        bar.update()
        unfinished -= 1
        if unfinished == 0:
            all_done.set()

    async def worker(session: aiohttp.ClientSession) -> None:
        while True:
            delivery = await queue.get()
            if jitter_s:
                await asyncio.sleep(random.uniform(0, jitter_s))
            # Signed per attempt, as a provider's retry is: a fresh timestamp each time.
            status = await _attempt(session, url, sign(delivery), delivery, result)
            delivery.attempts += 1
            if retryable(status) and delivery.attempts < retry.budget:
                # The retry waits off the connection, as Stripe's does.
                loop.call_later(retry.delay(delivery.attempts), queue.put_nowait, delivery)
            else:
                finish(status)

    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        workers = [asyncio.create_task(worker(session)) for _ in range(concurrency)]
        await all_done.wait()
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


def _error_word(answer: bytes) -> str:
    """The service's `{"error": ...}`, or the start of any other answer."""
    try:
        return str(json.loads(answer)["error"])
    except (ValueError, KeyError, TypeError):
        return " ".join(answer[:80].decode(errors="replace").split())


async def _attempt(session, url: str, headers: dict, delivery: Delivery, result: Result) -> int | None:
    started = time.monotonic()
    status, replayed = None, False
    try:
        async with session.post(url, data=delivery.body, headers=headers) as response:
            answer = await response.read()
            status = response.status
            replayed = response.headers.get("Idempotent-Replayed") == "true"
    except (TimeoutError, aiohttp.ClientError) as exc:
        result.failures[f"no answer: {type(exc).__name__}: {exc}"] += 1  # recorded as such, and retried
    else:
        if not 200 <= status < 300:
            result.failures[f"{status} {_error_word(answer)}".strip()] += 1
    result.answers.append(
        checker.Answer(
            delivery.event_id, status, started, time.monotonic(), replayed, delivery.outgoing.account
        )
    )
    return status
