"""`python -m webhooks loadtest`: duplicate deliveries at load, then an audit of the database.

N realistic events (three per Checkout payment) are each delivered K times
over C concurrent connections. Like Stripe, a delivery answered 409, 5xx or
not at all is retried with exponential backoff until it gets a 2xx or its
attempt budget runs out. At the end: a summary of what was answered and how
fast, and an audit of the ledger and fulfilments that fails the command
unless every event took effect exactly once.

`--provider P` sends P's events instead (its Traffic, webhooks/traffic/plugin.py),
signed as P signs them, to `/webhooks/P`, and runs P's own audit.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp
from tqdm import tqdm

from . import audit, samples, signing, stripe as stripe_sender, plugin as traffic
from .report import latency_table, throughput_table
from webhooks.infra.config import Settings
from webhooks.infra.db import database_url
from webhooks.core.events import STRIPE
from webhooks.providers import Outgoing
from webhooks.commands.errors import CommandError
from .stripe import Retry, retryable

# Stripe waits longer than any delivery should take before it counts a timeout.
REQUEST_TIMEOUT_S = 30.0
# The modules that register a Traffic for `--provider` (Stripe's is built in).
TRAFFIC_MODULES = (
    "webhooks.traffic.standard", "webhooks.traffic.github", "webhooks.traffic.shopify",
)


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
    # (label, seconds) per HTTP attempt; label is the status, "200 replayed" or "error".
    attempts: list[tuple[str, float]] = field(default_factory=list)
    # Non-replayed 200s per event id: more than one means an event took effect twice.
    first_answers: Counter = field(default_factory=Counter)
    dropped: int = 0

    @property
    def deliveries_per_s(self) -> float:
        return self.deliveries / self.elapsed_s

    @property
    def events_per_s(self) -> float:
        return self.events / self.elapsed_s

    def latencies_ms(self, label: str | None = None) -> list[float]:
        return sorted(s * 1000 for answer, s in self.attempts if label in (None, answer))


def plan(events: list[dict], duplicates: int, together: bool) -> list[Delivery]:
    """Stripe events, each `duplicates` times (see plan_sent)."""
    sent = [(samples.encode(evt), Outgoing(evt["id"], evt["type"])) for evt in events]
    return plan_sent(sent, duplicates, together)


def plan_sent(sent: list[tuple[bytes, Outgoing]], duplicates: int, together: bool) -> list[Delivery]:
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
    provider: str = STRIPE,
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


async def _attempt(session, url: str, headers: dict, delivery: Delivery, result: Result) -> int | None:
    started = time.perf_counter()
    try:
        async with session.post(url, data=delivery.body, headers=headers) as response:
            await response.read()
            status = response.status
            replayed = response.headers.get("Idempotent-Replayed") == "true"
    except (aiohttp.ClientError, asyncio.TimeoutError):
        result.attempts.append(("error", time.perf_counter() - started))
        return None
    result.attempts.append((f"{status} replayed" if replayed else str(status), time.perf_counter() - started))
    if status == 200 and not replayed:
        result.first_answers[delivery.event_id] += 1
    return status


def register(subparsers) -> None:
    parser = stripe_sender.command_parser(
        subparsers,
        "loadtest",
        __doc__,
        help="deliver N events K times each over C connections, then audit the database",
    )
    count = stripe_sender.positive_int
    parser.add_argument("--events", "-n", type=count, default=300, help="unique events (default %(default)s)")
    parser.add_argument(
        "--duplicates", "-k", type=count, default=4, help="deliveries of each event (default %(default)s)"
    )
    parser.add_argument(
        "--concurrency", "-c", type=count, default=16, help="concurrent connections (default %(default)s)"
    )
    parser.add_argument(
        "--order",
        choices=["together", "spread"],
        default="together",
        help="together: an event's copies are sent back to back and race each other "
        "(default); spread: all deliveries shuffled",
    )
    parser.add_argument(
        "--jitter-ms", type=float, default=0.0, help="random delay of up to this before each attempt"
    )
    parser.add_argument(
        "--retry-budget",
        type=count,
        default=Retry.budget,
        help="attempts per delivery before giving up (default %(default)s)",
    )
    parser.add_argument(
        "--no-audit",
        action="store_true",
        help="skip the database audit (it needs the service's DATABASE_URL)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    secret = signing.secret(args, "loadtest")
    if args.provider == STRIPE:
        events = samples.payment_stream(args.events)
        deliveries = plan(events, args.duplicates, together=args.order == "together")
    else:
        plugin = _traffic(args.provider)
        sent = plugin.events(args.events)
        deliveries = plan_sent(sent, args.duplicates, together=args.order == "together")
    result = deliver(
        signing.url(args),
        secret,
        deliveries,
        args.concurrency,
        jitter_s=args.jitter_ms / 1000,
        retry=Retry(budget=args.retry_budget),
        progress=sys.stderr.isatty(),
        provider=args.provider,
    )
    print(latency_table(result), end="\n\n")
    print(throughput_table(result, args.concurrency), end="\n\n")
    if args.no_audit:
        return 0 if result.dropped == 0 else 1
    url = database_url(Settings.from_env())
    if args.provider == STRIPE:
        checks = audit.audit_events(url, events, result.first_answers)
    else:
        checks = audit.audit_traffic(url, plugin, [out for _, out in sent], result.first_answers)
    for check in checks:
        print(f"{'PASS' if check.passed else 'FAIL'}  {check.name}: {check.detail}")
    failed = [check.name for check in checks if not check.passed]
    if failed:
        print(f"loadtest: audit failed: {'; '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _traffic(provider: str) -> traffic.Traffic:
    for module in TRAFFIC_MODULES:
        importlib.import_module(module)
    plugin = traffic.get(provider)
    if plugin is None:
        raise CommandError(f"loadtest: no traffic for provider {provider}: add a Traffic (webhooks/traffic/plugin.py)")
    return plugin
