"""Slow clients against the served stack, while real deliveries are sent.

`trickle` connections send full headers then one body byte per second;
`silent` connections send headers and never a body; `idle` connections
open and send nothing. Whenever the server cuts
one, it is re-opened at once, as an attacker would. Meanwhile valid signed
deliveries (new payments, three events each) are sent one at a time over a
fresh connection each and timed. Reported: the deliveries' latencies, how
long the server took to cut each slow connection, and how it cut them.

`python -m bench.slow_clients --seconds 60` runs the full version against a
private schema served as `python -m webhooks serve` serves it: nginx in front
of gunicorn.conf.py's defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from webhooks.providers import stripe as stripe_wire
from webhooks.traffic import samples
from webhooks.traffic.report import percentile

_HEAD = (
    "POST /webhooks/stripe HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
    "Stripe-Signature: {sig}\r\nContent-Length: {length}\r\n\r\n"
)


@dataclass
class Report:
    latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    cut_after_s: list[float] = field(default_factory=list)
    # How each slow connection ended: the first bytes of the answer, or "closed".
    cut_by: Counter = field(default_factory=Counter)
    opened: int = 0

    def p99_ms(self) -> float:
        return percentile(sorted(self.latencies_ms), 99)

    def summary(self) -> str:
        lat = sorted(self.latencies_ms)
        cuts = sorted(self.cut_after_s)
        return "\n".join(
            [
                f"deliveries: {len(lat)} {dict(self.statuses)}; latency ms p50 "
                f"{percentile(lat, 50):.1f} p99 {percentile(lat, 99):.1f} max {lat[-1]:.1f}",
                f"slow connections opened: {self.opened}; cut: {len(cuts)} {dict(self.cut_by)}; "
                f"cut after s: min {cuts[0]:.1f} median {percentile(cuts, 50):.1f} max {cuts[-1]:.1f}"
                if cuts
                else "slow connections: none cut",
            ]
        )


async def _slow_connection(host, port, kind: str, stop_at: float, report: Report) -> None:
    """One attacker slot (`trickle`, `silent` or `idle`).

    It opens, stalls, and re-opens whenever the server cuts it.
    """
    head = b"" if kind == "idle" else _HEAD.format(sig="t=1,v1=00", length=1000).encode()
    while time.monotonic() < stop_at:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        report.opened += 1
        opened = time.monotonic()
        writer.write(head)
        answer = await _stall(reader, writer, kind == "trickle", stop_at)
        if answer is not None:
            report.cut_after_s.append(time.monotonic() - opened)
            report.cut_by[answer.split(b"\r\n")[0].decode(errors="replace") or "closed"] += 1
        writer.close()


async def _stall(reader, writer, trickle: bool, stop_at: float) -> bytes | None:
    """Until the server answers or closes (its answer), or the window ends (None)."""
    read = asyncio.ensure_future(reader.read(200))
    try:
        while time.monotonic() < stop_at:
            done, _ = await asyncio.wait({read}, timeout=1.0)
            if done:
                try:
                    return read.result()
                except OSError:
                    return b""
            if trickle:
                try:
                    writer.write(b"{")
                    await writer.drain()
                except OSError:
                    return b""
        return None
    finally:
        read.cancel()


async def _deliveries(host, port, secret: str, stop_at: float, report: Report) -> None:
    while time.monotonic() < stop_at:
        for evt in samples.payment_events():
            body = samples.encode(evt)
            head = _HEAD.format(sig=stripe_wire.sign(body, secret), length=len(body)).encode()
            started = time.monotonic()
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(head + body)
            status_line = await reader.readline()
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            report.latencies_ms.append((time.monotonic() - started) * 1000)
            report.statuses[status_line.split(b" ")[1].decode()] += 1
            writer.close()
            await asyncio.sleep(0.05)


async def _send_until_then(host, port, secret, seconds, counts: dict[str, int]) -> Report:
    report = Report()
    stop_at = time.monotonic() + seconds
    slow = [
        _slow_connection(host, port, kind, stop_at, report)
        for kind, count in counts.items()
        for _ in range(count)
    ]
    # Let the slow connections take their places before the deliveries start.
    tasks = [asyncio.ensure_future(c) for c in slow]
    await asyncio.sleep(1.0)
    await _deliveries(host, port, secret, stop_at, report)
    await asyncio.gather(*tasks)
    return report


def run(
    url: str, secret: str, seconds: float, trickle: int = 200, silent: int = 200, idle: int = 0
) -> Report:
    host, port = url.removeprefix("http://").split(":")
    counts = {"trickle": trickle, "silent": silent, "idle": idle}
    return asyncio.run(_send_until_then(host, int(port), secret, seconds, counts))


def main(argv: list[str] | None = None) -> int:
    from . import servers

    parser = argparse.ArgumentParser(prog="python -m bench.slow_clients", description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--trickle", type=int, default=200)
    parser.add_argument("--silent", type=int, default=200)
    parser.add_argument("--idle", type=int, default=0, help="connections that send nothing")
    parser.add_argument("--database", default="postgresql://root@127.0.0.1:5432/test")
    args = parser.parse_args(argv)
    secret = "whsec_slow_clients"
    log_path = Path("/tmp") / f"slow-clients-{time.time_ns()}.log"
    with servers.private_schema(args.database) as db_url:
        env = {"DATABASE_URL": db_url, "STRIPE_WEBHOOK_SECRET": secret}
        with servers.front(env, log_path) as (url, _pid, _front):
            report = run(url, secret, args.seconds, args.trickle, args.silent, args.idle)
    log = log_path.read_text()
    print(report.summary())
    print(
        f"served log: {log_path}; worker timeouts/kills: "
        f"{log.count('WORKER TIMEOUT') + log.count('SIGKILL')}, error lines: {log.count('[ERROR]')}"
    )
    return 0 if report.p99_ms() <= 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
