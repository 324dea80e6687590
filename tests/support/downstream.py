"""Outbox test doubles that are real: an HTTP receiver on loopback and worker processes."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psycopg

from tests.support.rows import count_rows
from webhooks.domains.stripe.orders import ORDER_FULFILLED
from webhooks.traffic import checker

ROOT = Path(__file__).resolve().parents[2]


class Downstream:
    """A receiver that, like a well-behaved API, treats a repeated Idempotency-Key as done.

    `status` is what it answers to every request. With `stall_first`, the
    first request applies its effect and then hangs before answering, so a
    worker can be killed while it waits for the response.
    """

    def __init__(self, status: int = 200, stall_first: bool = False, host: str = "127.0.0.1"):
        self.status = status
        self.stall_first = stall_first
        self.received: list[tuple[str, bytes]] = []
        # The client ends of the TCP connections the deliveries came on.
        self.connections: set[tuple[str, int]] = set()
        self.effects: Counter[str] = Counter()
        self.first_arrived = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer((host, 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://{host}:{self._server.server_port}/effects"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _receive(self, key: str, body: bytes, client: tuple[str, int]) -> tuple[int, bool]:
        with self._lock:
            self.received.append((key, body))
            self.connections.add(client)
            first = len(self.received) == 1
            if self.status < 300 and key not in self.effects:
                self.effects[key] += 1
        return self.status, first and self.stall_first

    def _handler(self):
        downstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            # Keep-alive, as a real API answers: a worker may send many deliveries on one connection.
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                key = self.headers.get("Idempotency-Key")
                status, stall = downstream._receive(key, body, self.client_address)
                downstream.first_arrived.set()
                if stall:
                    downstream._release.wait(60)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        return Handler

    def keys(self) -> list[str]:
        with self._lock:
            return [key for key, _ in self.received]

    @property
    def redelivered(self) -> int:
        """Deliveries of a key already received."""
        keys = self.keys()
        return len(keys) - len(set(keys))

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()


class Worker:
    """`python -m webhooks worker` as its own process, as the Procfile runs it."""

    def __init__(self, env: dict[str, str], inside: Callable[[list[str]], list[str]] = list):
        """`inside` wraps the command line (a network namespace's `ip netns exec`)."""
        self.log_path = Path(tempfile.mkdtemp()) / "worker.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            inside([sys.executable, "-m", "webhooks", "worker"]),
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return self.log_path.read_text()

    @property
    def started(self) -> int:
        """Times it has connected and begun taking jobs."""
        return self.output().count('"event":"outbox_worker_started"')

    def wait_started(self, timeout: float = 60) -> None:
        """Until it takes jobs; at once, with its output, if it exits first."""
        wait_until(lambda: self.started or self.proc.poll() is not None, timeout, "the worker to start")
        self.assert_running()

    @property
    def reconnects(self) -> int:
        """Times it connected to the database again by itself after losing its connections."""
        return self.output().count('"event":"outbox_worker_reconnecting"')

    def assert_running(self) -> None:
        """It never exited: it rode out every lost connection by itself."""
        assert self.proc.poll() is None, self.output()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


def wait_until(predicate, timeout: float, what: str, interval: float = 0.05):
    """Poll `predicate` until it is truthy; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def shipped(conn: psycopg.Connection) -> frozenset[str]:
    """The Idempotency-Key of every fulfilled payment's job (orders.sql keys them by payment)."""
    keys = conn.execute("SELECT payment_id FROM fulfilments")
    return frozenset(f"{ORDER_FULFILLED.name}:{p}" for (p,) in keys)


def delivered(conn: psycopg.Connection, receiver: Downstream, timeout: float) -> checker.Outbox:
    """Once the receiver has had every shipped payment's job and the queue is empty: the outbox's history."""
    expected = shipped(conn)
    wait_until(
        lambda: expected <= set(receiver.effects) and count_rows(conn, "pgqueuer", "status <> 'failed'") == 0,
        timeout,
        "the workers to deliver every shipped payment's job",
        interval=0.2,
    )
    return checker.Outbox(expected, list(receiver.effects.elements()))
