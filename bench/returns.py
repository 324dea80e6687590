"""The return call's row: `POST /stripe/checkout/sessions/<id>/fulfil`, each call a new paid session.

Stripe's API is the tests' stand-in (tests/support/stripe_api.py), serving
each session with three line items. It runs in this process, so what it
spends is the load generator's CPU, never the call's: the row's CPU per call
is the web workers' and their PostgreSQL backends', read from /proc as every
row's is (cpu.Meter).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import requests

from tests.support import checkout
from tests.support.stripe_api import StripeApi, api_env
from webhooks.traffic.report import percentile

TOKEN = "bench-fulfil-token-0123456789"
LINE_ITEMS = 3


@contextlib.contextmanager
def stand_in() -> Iterator[StripeApi]:
    api = StripeApi()
    try:
        yield api
    finally:
        api.close()


def env(api: StripeApi) -> dict[str, str]:
    """The settings that turn the return call on against `api`."""
    return {**api_env(api), "WEBHOOK_FULFIL_TOKEN": TOKEN}


def sessions(api: StripeApi, count: int) -> list[str]:
    """`count` new paid sessions, put in the stand-in."""
    return [checkout.put(api, count=LINE_ITEMS)[0]["id"] for _ in range(count)]


@dataclass(frozen=True)
class Calls:
    calls: int
    seconds: float
    p99_ms: float
    answers: Counter

    @property
    def per_s(self) -> float:
        return self.calls / self.seconds


def call_all(url: str, session_ids: list[str], concurrency: int) -> Calls:
    """Each session's return call once, `concurrency` at a time; the answers by status and outcome."""

    def one(session_id: str) -> tuple[float, str]:
        started = time.perf_counter()
        response = http.post(
            f"{url}/stripe/checkout/sessions/{session_id}/fulfil",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        )
        body = response.json()
        return (
            time.perf_counter() - started,
            f"HTTP {response.status_code} {body.get('outcome') or body.get('error')}",
        )

    http = requests.Session()
    http.mount("http://", requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=concurrency))
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        done = list(pool.map(one, session_ids))
    seconds = time.perf_counter() - started
    http.close()
    return Calls(
        len(done),
        seconds,
        percentile([s * 1000 for s, _ in done], 99),
        Counter(answer for _, answer in done),
    )
