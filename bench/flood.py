"""`python -m bench.flood`: issue 33's trickle flood, against the served stack and against HAProxy.

The attack: from each of `--addresses` loopback addresses (127.0.0.2 and
up), `--per-address` connections, each a `POST /webhooks/stripe` declaring
`Content-Length: 100000` and sending one byte of it every `--interval`
seconds. A connection the front cuts is opened again at once, as an
attacker would. Meanwhile, from 127.0.0.1, a signed delivery (a new payment's
event, on a new connection) and a `GET /healthz` every half second, each
timed: a delivery must be answered 200 within 2 s and /healthz within 1 s.

Each front is measured in turn, fresh, with the service's defaults:

- nginx as `python -m webhooks serve` runs it (webhooks/web/front.py);
- HAProxy 2.6 in front of the same gunicorn, with `option
  http-buffer-request` and `timeout http-request` (the service's read
  timeout), which count the whole request, head and body, and a buffer over
  the body cap, which is what it takes for HAProxy to hold a whole body
  (`python -m bench.fronts`).

Reported per front: deliveries and /healthz answered in time, the
connections the attack held and how often the front cut one, the front's
memory (resident, its processes summed) and CPU over the window, and the
lines the front wrote about running out of connections.

    python -m bench.flood                          # the full attack, 30 s per front
    python -m bench.flood --addresses 3 --per-address 100 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import multiprocessing
import os
import random
import shutil
import sys
import threading
import time
from pathlib import Path

import psutil
import requests

from webhooks.infra.config import Settings
from webhooks.providers import stripe as stripe_wire
from webhooks.traffic import samples
from webhooks.traffic.report import markdown_table
from webhooks.web import front as serving
from webhooks.web import refusals

from . import cpu, fronts, servers

SECRET = "whsec_bench_flood"
DELIVERY_WITHIN_S = 2.0
HEALTHZ_WITHIN_S = 1.0
# How often a delivery and a /healthz are sent while the flood runs.
_EVERY_S = 0.5
# Connections opened at once: past the listen backlog the kernel drops SYNs,
# and the attack would measure its own retransmissions.
_OPENING = 256
_RUN_OUT = ("worker_connections are not enough", "maxconn", "Too many open files")


@dataclasses.dataclass(frozen=True)
class Attack:
    addresses: int = 10
    per_address: int = 490
    interval_s: float = 5.0
    length: int = 100_000
    # Bytes of the body sent at once with the head, before the trickle: what a held body costs the front.
    first: int = 0

    def sources(self) -> list[str]:
        return [f"127.0.0.{2 + n}" for n in range(self.addresses)]

    def head(self) -> bytes:
        return (
            "POST /webhooks/stripe HTTP/1.1\r\nHost: flood\r\nContent-Type: application/json\r\n"
            f"Stripe-Signature: t=1,v1=00\r\nContent-Length: {self.length}\r\n\r\n"
        ).encode() + b"a" * self.first


class Flood:
    """The attack, in a process of its own so that it never delays what is timed here."""

    def __init__(self, host: str, port: int, attack: Attack, seconds: float):
        # opened, cut by the server, failed to connect
        self._counts = multiprocessing.Array("q", 3, lock=False)
        self._proc = multiprocessing.Process(
            target=_flood, args=(host, port, attack, seconds, self._counts), daemon=True
        )

    def __enter__(self) -> Flood:
        self._proc.start()
        return self

    def __exit__(self, *exc) -> None:
        self._proc.join(timeout=30)
        if self._proc.is_alive():
            self._proc.kill()

    @property
    def opened(self) -> int:
        return self._counts[0]

    @property
    def cut(self) -> int:
        return self._counts[1]

    @property
    def failed(self) -> int:
        return self._counts[2]

    def held(self) -> int:
        return self.opened - self.cut


def _flood(host: str, port: int, attack: Attack, seconds: float, counts) -> None:
    asyncio.run(_slots(host, port, attack, time.monotonic() + seconds, counts))


async def _slots(host, port, attack: Attack, stop_at: float, counts) -> None:
    opening = asyncio.Semaphore(_OPENING)
    await asyncio.gather(
        *(
            _slot(host, port, source, attack, stop_at, counts, opening)
            for source in attack.sources()
            for _ in range(attack.per_address)
        )
    )


async def _slot(host, port, source: str, attack: Attack, stop_at: float, counts, opening) -> None:
    """One attacker connection: opened, its head sent, then a byte per interval; again when cut."""
    while time.monotonic() < stop_at:
        try:
            async with opening:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port, local_addr=(source, 0)), timeout=10
                )
        except (TimeoutError, OSError):
            counts[2] += 1
            await asyncio.sleep(1.0)
            continue
        counts[0] += 1
        writer.write(attack.head())
        # The bytes of all the connections spread over the interval, not in bursts.
        wait_s = random.uniform(0, attack.interval_s)
        while (left := stop_at - time.monotonic()) > 0:
            try:
                await asyncio.wait_for(reader.read(1024), timeout=min(wait_s, left))
            except TimeoutError:
                with contextlib.suppress(OSError):
                    writer.write(b"a")
                wait_s = attack.interval_s
                continue
            except OSError:
                pass
            counts[1] += 1  # the server answered or closed: open another at once
            break
        writer.close()


@dataclasses.dataclass
class Timed:
    """What one kind of request got while the flood ran."""

    within_s: float
    seconds: list[float] = dataclasses.field(default_factory=list)  # answered ones
    unanswered: int = 0

    def sent(self) -> int:
        return len(self.seconds) + self.unanswered

    def in_time(self) -> int:
        return sum(1 for s in self.seconds if s <= self.within_s)

    def summary(self) -> str:
        slowest = f", slowest {max(self.seconds) * 1000:.0f} ms" if self.seconds else ""
        return f"{self.in_time()} of {self.sent()}{slowest}"


def _delivery(url: str) -> float | None:
    evt = samples.payment_events()[1]
    body = samples.encode(evt)
    headers = {"Stripe-Signature": stripe_wire.sign(body, SECRET), "Content-Type": "application/json"}
    started = time.monotonic()
    try:
        answer = requests.post(url + "/webhooks/stripe", data=body, headers=headers, timeout=10)
    except requests.RequestException:
        return None
    return time.monotonic() - started if answer.status_code == 200 else None


def _healthz(url: str) -> float | None:
    started = time.monotonic()
    try:
        answer = requests.get(url + "/healthz", timeout=10)
    except requests.RequestException:
        return None
    return time.monotonic() - started if answer.status_code == 200 else None


def _timed(send, url: str, timed: Timed, stop_at: float) -> None:
    while time.monotonic() < stop_at:
        started = time.monotonic()
        took = send(url)
        if took is None:
            timed.unanswered += 1
        else:
            timed.seconds.append(took)
        time.sleep(max(0.0, _EVERY_S - (time.monotonic() - started)))


@dataclasses.dataclass
class Outcome:
    deliveries: Timed
    healthz: Timed
    held_most: int
    opened: int
    cut: int
    failed: int
    memory_before_mib: float
    memory_peak_mib: float
    front_cpu_s: float
    seconds: float

    def passed(self) -> bool:
        return (
            self.deliveries.sent() > 0
            and self.deliveries.in_time() == self.deliveries.sent()
            and self.healthz.in_time() == self.healthz.sent()
        )


def _memory_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(pid).memory_info().rss
    return total / (1 << 20)


def measure(url: str, front_pids, attack: Attack, seconds: float) -> Outcome:
    """The flood for `seconds` against `url`, deliveries and /healthz timed meanwhile.

    `front_pids()` names the front's processes (read again as it goes: a worker may be replaced).
    """
    host, port = url.removeprefix("http://").split(":")
    deliveries, healthz = Timed(DELIVERY_WITHIN_S), Timed(HEALTHZ_WITHIN_S)
    memory_before = _memory_mib(front_pids())
    cpu_before = cpu.seconds(front_pids())
    started = time.monotonic()
    held_most, memory_peak = 0, memory_before
    with Flood(host, int(port), attack, seconds) as flood:
        stop_at = time.monotonic() + seconds
        timers = [
            threading.Thread(target=_timed, args=(send, url, timed, stop_at))
            for send, timed in ((_delivery, deliveries), (_healthz, healthz))
        ]
        for timer in timers:
            timer.start()
        while time.monotonic() < stop_at:
            time.sleep(0.5)
            held_most = max(held_most, flood.held())
            memory_peak = max(memory_peak, _memory_mib(front_pids()))
        front_cpu = cpu.seconds(front_pids()) - cpu_before
        for timer in timers:
            timer.join()
    return Outcome(
        deliveries,
        healthz,
        held_most,
        flood.opened,
        flood.cut,
        flood.failed,
        memory_before,
        memory_peak,
        front_cpu,
        time.monotonic() - started,
    )


def _with_children(pid: int):
    return lambda: refusals.with_children(pid)


def _nginx(env: dict[str, str], folder: Path, attack: Attack, seconds: float) -> tuple[Outcome, str]:
    log_path = folder / "serve.log"
    with servers.serve(env, log_path) as (url, serve, _):
        nginx = next(p.pid for p in psutil.Process(serve).children() if p.name() == "nginx")
        outcome = measure(url, _with_children(nginx), attack, seconds)
    return outcome, log_path.read_text()


def _haproxy(env: dict[str, str], folder: Path, attack: Attack, seconds: float) -> tuple[Outcome, str]:
    settings = Settings.from_env({**os.environ, **env})
    direct_port = servers.free_port()
    env = {**env, **fronts.behind_a_front(folder, direct_port)}
    with fronts.gunicorn(env, direct_port, folder / "gunicorn.log"):
        port = servers.free_port()
        config = fronts.haproxy_config(
            settings, folder, port, settings.max_body_bytes + 16384, settings.request_read_timeout_s
        )
        haproxy = fronts.Front("HAProxy", lambda path: ["haproxy", "-f", str(path)], config, folder, port)
        try:
            outcome = measure(f"http://127.0.0.1:{port}", haproxy.pids, attack, seconds)
        finally:
            haproxy.stop()
    return outcome, ""


FRONTS = {
    "nginx 1.22 (`serve`, worker_connections {connections})": _nginx,
    "HAProxy 2.6 (http-buffer-request, timeout http-request, a buffer over the body cap, "
    "maxconn {connections})": _haproxy,
}


def row(title: str, outcome: Outcome, log: str) -> list[str]:
    return [
        title,
        outcome.deliveries.summary(),
        outcome.healthz.summary(),
        f"{outcome.held_most}",
        f"{outcome.cut} ({outcome.failed} refused at connect)",
        f"{outcome.memory_before_mib:.0f} → {outcome.memory_peak_mib:.0f} MiB",
        f"{outcome.front_cpu_s / outcome.seconds * 100:.0f}%",
        str(sum(log.count(said) for said in _RUN_OUT)),
    ]


HEADERS = [
    "front",
    f"signed deliveries answered 200 within {DELIVERY_WITHIN_S:g} s",
    f"/healthz within {HEALTHZ_WITHIN_S:g} s",
    "attack connections held (most)",
    "cut by the front",
    "front memory",
    "front CPU (of one core)",
    "lines about running out of connections",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.flood",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--addresses", type=int, default=10)
    parser.add_argument("--per-address", type=int, default=490)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between two bytes of a body")
    parser.add_argument(
        "--first", type=int, default=0, help="bytes of each body sent with its head, before the trickle"
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the flood runs per front")
    parser.add_argument("--front", choices=["nginx", "haproxy", "both"], default="both")
    parser.add_argument(
        "--database", default=os.environ.get("DATABASE_URL") or "postgresql://root@127.0.0.1:5432/test"
    )
    args = parser.parse_args(argv)
    haproxy = shutil.which("haproxy", path=os.environ.get("PATH", "") + ":/usr/sbin")
    if haproxy is None and args.front != "nginx":
        parser.error("haproxy is not installed (apt-get install haproxy), or pass --front nginx")
    attack = Attack(args.addresses, args.per_address, args.interval, first=args.first)
    chosen = list(FRONTS.items())
    if args.front != "both":
        chosen = [chosen[0 if args.front == "nginx" else 1]]
    rows, outcomes = [], []
    with servers.private_schema(args.database) as url:
        env = {"DATABASE_URL": url, "STRIPE_WEBHOOK_SECRET": SECRET}
        settings = Settings.from_env()
        for title, run in chosen:
            title = title.format(connections=serving.fitted_connections(settings.front_connections))
            folder = serving.make_folder(settings)
            try:
                outcome, log = run(env, folder, attack, args.seconds)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            print(f"[bench.flood] {title}: deliveries {outcome.deliveries.summary()}", file=sys.stderr)
            rows.append(row(title, outcome, log))
            outcomes.append(outcome)
    # The settings given to this run, which `serve` and HAProxy's config take.
    given = [f"{name}={value} " for name, value in sorted(os.environ.items()) if name.startswith("WEBHOOK_")]
    print(f"$ {''.join(given)}python -m bench.flood {' '.join(argv if argv is not None else sys.argv[1:])}\n")
    print(markdown_table(HEADERS, rows))
    print(
        f"\n{attack.addresses} addresses x {attack.per_address} connections, Content-Length {attack.length}, "
        f"{attack.first} bytes of it at once, then a byte every {attack.interval_s:g} s, "
        f"for {args.seconds:g} s per front; a delivery and a /healthz every {_EVERY_S:g} s from "
        f"another address; {os.cpu_count()} cores"
    )
    return 0 if all(outcome.passed() for outcome in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
