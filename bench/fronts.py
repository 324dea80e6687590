"""`python -m bench.fronts`: the candidate fronts side by side, on one gunicorn, to choose between them.

One gunicorn (gunicorn.conf.py, stock gthread) listens on a Unix socket and,
for the direct row, on a loopback port. In front of the socket: nginx with
the service's own config (webhooks/web/front.py), and HAProxy (Debian's
2.6) configured as issue 23 asks (`option http-buffer-request`, `timeout
http-request`), with its default buffer and with a buffer over the body cap,
which is what it takes for HAProxy to hold a whole body. Each gets issue 23's
hostile framings (bench/framing.py) and what they cost it, then wrk's signed
deliveries in interleaved rounds: unique events/s and the CPU one delivery
costs in the front and in gunicorn's workers.

Both fronts must be installed (apt-get install nginx haproxy); the timeouts
are 3 s so that the cuts come within the run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import requests

from webhooks.infra.config import Settings
from webhooks.providers import stripe as stripe_wire
from webhooks.traffic import samples
from webhooks.traffic.report import markdown_table
from webhooks.web import front as serving

from . import cpu, framing, servers, wrk

SECRET = "whsec_bench_fronts"
TIMEOUT_S = 3
_HAPROXY = """\
global
    maxconn %(connections)d
    tune.bufsize %(bufsize)d
defaults
    mode http
    maxconn %(connections)d
    option http-buffer-request
    timeout http-request %(timeout_ms)dms
    timeout client %(timeout_ms)dms
    timeout http-keep-alive 5s
    timeout connect %(timeout_ms)dms
    timeout server 60s
frontend public
    bind 127.0.0.1:%(port)d
    http-request deny deny_status 413 if { req.hdr_val(content-length) gt %(body_cap)d }
    default_backend gunicorn
backend gunicorn
    server gunicorn %(socket)s
"""


class Front:
    """One candidate, started in front of the socket in `folder` on a port of its own."""

    def __init__(self, title: str, argv, config: str, folder: Path, port: int):
        self.title, self.port = title, port
        config_path = folder / f"{port}.conf"
        config_path.write_text(config)
        self.proc = subprocess.Popen(
            [*argv(config_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while not _accepts(port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"bench.fronts: {title} did not start")
            time.sleep(0.05)

    def pids(self) -> list[int]:
        return [self.proc.pid, *cpu.children(self.proc.pid)]

    def memory_mib(self) -> float:
        return sum(psutil.Process(pid).memory_info().rss for pid in self.pids()) / (1 << 20)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def _fronts(settings: Settings, folder: Path) -> list[Front]:
    nginx_port = servers.free_port()
    nginx_config = serving.nginx_config(
        settings.model_copy(update={"host": "127.0.0.1", "port": nginx_port}), folder
    )
    fronts = [
        Front(
            "nginx 1.22 (the service's config)",
            lambda path: ["nginx", "-p", str(folder), "-c", str(path)],
            nginx_config,
            folder,
            nginx_port,
        )
    ]
    for title, bufsize in (
        ("HAProxy 2.6, default 16 KiB buffer", 16384),
        ("HAProxy 2.6, buffer over the body cap", settings.max_body_bytes + 16384),
    ):
        port = servers.free_port()
        config = haproxy_config(settings, folder, port, bufsize, TIMEOUT_S)
        fronts.append(Front(title, lambda path: ["haproxy", "-f", str(path)], config, folder, port))
    return fronts


def haproxy_config(settings: Settings, folder: Path, port: int, bufsize: int, timeout_s: float) -> str:
    """HAProxy on 127.0.0.1:`port` in front of the gunicorn socket in `folder`."""
    return _HAPROXY % {
        "connections": settings.front_connections,
        "bufsize": bufsize,
        "timeout_ms": timeout_s * 1000,
        "port": port,
        "body_cap": settings.max_body_bytes,
        "socket": serving.socket_path(folder),
    }


def _signed_chunked(extension: bytes = b"", trailer: bytes = b"") -> bytes:
    body = samples.encode(samples.payment_events()[1])
    headers = {"Stripe-Signature": stripe_wire.sign(body, SECRET)}
    return framing.chunked(headers, body, extension, trailer)


def _answer(answer: framing.Answer) -> str:
    if answer.status() is None:
        return f"no answer, {answer.ended} after {answer.ended_s:.1f} s"
    return f"{answer.status()} after {answer.first_byte_s * 1000:.0f} ms"


def _held_until_cut(port: int, data: bytes, count: int, trickle: bool = False) -> str:
    """How long the front holds `count` connections that sent `data` (and a byte a second, if trickling)."""
    with framing.Held(("127.0.0.1", port), data, count) as held:
        started = time.monotonic()
        while "open" in held.poll() and time.monotonic() - started < 4 * TIMEOUT_S:
            if trickle:
                for conn in held.conns:
                    with contextlib.suppress(OSError):
                        conn.send(b"{")
            time.sleep(1.0 if trickle else 0.1)
        states = held.poll()
        statuses = {s for s in held.statuses() if s}
    if "open" in states:
        return f"{states.count('open')} of {count} still held after {4 * TIMEOUT_S} s"
    return f"all cut after {time.monotonic() - started:.1f} s" + (
        f" ({sorted(statuses)})" if statuses else ""
    )


def _healthz_while(port: int, data: bytes, count: int) -> str:
    """The slowest /healthz while `count` connections that sent `data` (a body's first part)
    trickle the rest a byte a second."""
    slowest = 0.0
    with framing.Held(("127.0.0.1", port), data, count) as held:
        for _ in range(2 * TIMEOUT_S):
            time.sleep(1.0)
            for conn in held.conns:
                with contextlib.suppress(OSError):
                    conn.send(b"a")
            started = time.monotonic()
            try:
                requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
            except requests.RequestException:
                return "no answer in 5 s: every gunicorn thread held"
            slowest = max(slowest, time.monotonic() - started)
    return f"all answered, slowest in {slowest * 1000:.0f} ms"


def _memory_while(front: Front, data: bytes, count: int) -> str:
    before = front.memory_mib()
    with framing.Held(("127.0.0.1", front.port), data, count):
        time.sleep(2.0)
        grown = front.memory_mib() - before
    return f"+{grown:.0f} MiB"


def hostile(front: Front) -> dict[str, str]:
    address = ("127.0.0.1", front.port)
    malformed = [framing.exchange(address, data).status() for data in framing.MALFORMED_CHUNKED.values()]
    pipelined, seconds, _ = framing.pipeline(address, framing.HEALTHZ, 4 << 20)
    continued = {}
    for version in ("1.1", "1.0"):
        head, body = framing.expect_continue(version, {}, b"{}")
        continued[version] = framing.exchange(address, head, then=body, pause_s=0.3).statuses()
    before = front.memory_mib()
    extended = framing.exchange(address, _signed_chunked(extension=b";" + b"e" * (1 << 20)), wait_s=30)
    grown = front.memory_mib() - before
    stalled_body = framing.HEAD + b"Content-Length: 200000\r\n\r\n" + b"a" * 100_000
    return {
        "chunk size -6": _answer(framing.exchange(address, framing.NEGATIVE_CHUNK)),
        "32 chunk sizes over the cap (FFFFFFF), then nothing": _held_until_cut(
            front.port, framing.OVER_CAP_CHUNK, 32
        ),
        "a head over 64 KiB that never ends": _answer(framing.exchange(address, framing.ENDLESS_HEAD)),
        f"{len(malformed)} malformed chunked bodies": ", ".join(str(s) for s in malformed),
        "signed delivery, 16 chunks with 1 MiB extensions each": (
            f"{extended.status()}, front memory +{grown:.0f} MiB"
        ),
        "signed delivery with 8 MiB of trailers": _answer(
            framing.exchange(address, _signed_chunked(trailer=b"X-Trailer: t\r\n" * 600_000), wait_s=30)
        ),
        "4 MiB pipeline of GET /healthz": f"{pipelined} answers at {pipelined / seconds:.0f}/s",
        "Expect: 100-continue, HTTP/1.1 and HTTP/1.0": f"{continued['1.1']} and {continued['1.0']}",
        "bare-LF request, then a CRLF one": str(
            framing.exchange(address, framing.BARE_LF + framing.HEALTHZ).statuses()
        ),
        "20 bodies trickling a byte a second": _held_until_cut(
            front.port, framing.HEAD + b"Content-Length: 1000\r\n\r\n", 20, trickle=True
        ),
        "/healthz while 20 bodies that sent 100 KB of 200 KB trickle the rest": _healthz_while(
            front.port, stalled_body, 20
        ),
        "500 bodies that sent 400 KB of 524 KB and stalled": _memory_while(
            front, framing.HEAD + b"Content-Length: 524000\r\n\r\n" + b"a" * 400_000, 500
        ),
    }


def cost(
    fronts: list[Front], direct_port: int, workers: list[int], rounds: int, seconds: int, folder: Path
) -> list[list[str]]:
    """wrk's signed deliveries, K=1, each front and direct in turn per round."""
    targets = [("gunicorn direct (loopback TCP)", direct_port, [])] + [
        (f.title, f.port, f.pids()) for f in fronts
    ]
    measured = {title: [] for title, _, _ in targets}
    requests_file = folder / "requests"
    for _ in range(rounds):
        for title, port, front_pids in targets:
            url = f"http://127.0.0.1:{port}"
            wrk.write_requests(requests_file, url, SECRET, samples.payment_stream(int(3000 * seconds)), 1)
            meter = cpu.Meter(workers, [], front_pids)
            with meter:
                run = wrk.run(url, requests_file, 16, seconds)
            attempts = run.requests_per_s * run.seconds
            measured[title].append(
                (
                    run.requests_per_s,
                    meter.used["workers"] / attempts * 1e6,
                    meter.used["front"] / attempts * 1e6,
                    run.non_2xx,
                )
            )
            print(f"[bench.fronts] {title}: {run.requests_per_s:.0f} deliveries/s", file=sys.stderr)
    return [
        [
            title,
            f"{statistics.median(m[0] for m in rows):.0f}",
            " / ".join(f"{m[0]:.0f}" for m in rows),
            f"{statistics.median(m[1] for m in rows):.0f}",
            "-" if title.startswith("gunicorn") else f"{statistics.median(m[2] for m in rows):.0f}",
            str(sum(m[3] for m in rows)),
        ]
        for title, rows in measured.items()
    ]


def behind_a_front(folder: Path, direct_port: int) -> dict[str, str]:
    """gunicorn's environment: its sockets in `folder`, as under `serve`, and 127.0.0.1:`direct_port`."""
    return {
        "WEBHOOK_FRONT_DIR": str(folder),
        # The front's scraper and console listeners, where nginx is rendered to listen.
        **servers.side_ports(),
        "GUNICORN_CMD_ARGS": f"--bind unix:{serving.socket_path(folder)} "
        f"--bind unix:{serving.metrics_socket_path(folder)} "
        f"--bind unix:{serving.admin_socket_path(folder)} --bind 127.0.0.1:{direct_port}",
    }


@contextlib.contextmanager
def gunicorn(env: dict[str, str], direct_port: int, log_path: Path):
    """gunicorn.conf.py on the socket, the direct port and the metrics port.

    Yields its pid once it answers.
    """
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"],
            cwd=servers.ROOT,
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            servers.wait_healthy(proc, f"http://127.0.0.1:{direct_port}", log_path)
            yield proc.pid
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fronts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=4, help="wrk's window per front and round")
    parser.add_argument(
        "--database", default=os.environ.get("DATABASE_URL") or "postgresql://root@127.0.0.1:5432/test"
    )
    args = parser.parse_args(argv)
    for tool in ("nginx", "haproxy", "wrk"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin") is None:
            parser.error(f"{tool} is not installed (apt-get install {tool})")
    folder = serving.make_folder(Settings.from_env())
    direct_port = servers.free_port()
    env = {
        "STRIPE_WEBHOOK_SECRET": SECRET,
        "WEBHOOK_REQUEST_READ_TIMEOUT_SECONDS": str(TIMEOUT_S),
        **behind_a_front(folder, direct_port),
    }
    with servers.private_schema(args.database) as url:
        env["DATABASE_URL"] = url
        with gunicorn(env, direct_port, folder / "gunicorn.log") as pid:
            fronts = _fronts(Settings.from_env({**os.environ, **env}), folder)
            try:
                behaviour = {front.title: hostile(front) for front in fronts}
                costs = cost(fronts, direct_port, cpu.children(pid), args.rounds, args.seconds, folder)
            finally:
                for front in fronts:
                    front.stop()
    shutil.rmtree(folder, ignore_errors=True)
    cases = list(next(iter(behaviour.values())))
    print(f"$ python -m bench.fronts {' '.join(argv if argv is not None else sys.argv[1:])}\n")
    print(
        markdown_table(
            ["hostile input", *behaviour],
            [[case, *(answers[case] for answers in behaviour.values())] for case in cases],
        )
    )
    print()
    print(
        markdown_table(
            [
                "served by",
                "deliveries/s",
                "per round",
                "CPU µs/delivery: gunicorn workers",
                "front",
                "non-2xx",
            ],
            costs,
        )
    )
    print(
        f"\n{os.cpu_count()} cores; gunicorn.conf.py defaults (gthread); wrk, 16 connections, K=1, "
        f"{args.rounds} rounds of {args.seconds} s per row, interleaved; timeouts {TIMEOUT_S} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
