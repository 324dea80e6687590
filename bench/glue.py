"""`python -m bench.glue`: one delivery's CPU in the app's own code, the work tree against a revision.

The service's WSGI app is called in-process, one delivery after another
(no gunicorn, no HTTP, no other thread), with the payment events `python -m
bench` sends; each delivery's CPU is read from the process itself and from
its PostgreSQL backend. With nothing else in the measured process, a change
to the glue (the WSGI layers, the log line, the metrics) or to the SQL shows
as a few microseconds that the HTTP rows' noise would hide.

Each side runs in a fresh process of its own, on a private schema its own
tree migrated: the revision's tree (`git archive`) and the work tree as it
is, uncommitted changes included, alternating round by round. The ratio is
taken within each round.

With `--instructions` each side runs under valgrind (callgrind, counting
only while the deliveries run): the web figure is then the instructions the
process executed per delivery, which other load on the machine does not
move, where its CPU time moves by several per cent between rounds of the
same code.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from webhooks.traffic.report import markdown_table

ROOT = Path(__file__).resolve().parent.parent
SECRET = "whsec_bench_0123456789"
WARM_UP = 300


def _environ(body: bytes, signature: str, sock: socket.socket) -> dict:
    """A delivery's WSGI environ as gunicorn builds it behind the front."""
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/webhooks/stripe",
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "localhost",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_STRIPE_SIGNATURE": signature,
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "wsgi.input_terminated": True,
        "gunicorn.socket": sock,
    }


def measure(database_url: str, deliveries: int, instructions: bool) -> tuple[float, float]:
    """(web CPU µs, PostgreSQL backend CPU µs) per delivery, in this process, on a private schema.

    With `instructions`, callgrind counts this process's instructions while
    the deliveries run (the parent reads them from its output file).
    """
    from psycopg.conninfo import make_conninfo

    # The tree measured's own (this file runs in either tree).
    from bench import cpu, servers
    from webhooks.providers import stripe as stripe_wire
    from webhooks.traffic import samples

    name = f"bench-glue-{os.getpid()}"
    with (
        servers.private_schema(database_url) as conninfo,
        tempfile.TemporaryDirectory() as tmp,
        socket.socket(socket.AF_UNIX) as listener,
    ):
        # A connection on a Unix socket, as the front hands each request to gunicorn.
        listener.bind(f"{tmp}/web.sock")
        listener.listen()
        client = socket.socket(socket.AF_UNIX)
        client.connect(f"{tmp}/web.sock")
        sock = listener.accept()[0]
        os.environ.update(
            DATABASE_URL=make_conninfo(conninfo, application_name=name),
            STRIPE_WEBHOOK_SECRET=SECRET,
            PROMETHEUS_MULTIPROC_DIR=tmp,
        )
        from webhooks.web.app import create_app

        app = create_app()

        def start_response(status: str, headers: list) -> None:
            if not status.startswith("200"):
                raise SystemExit(f"bench.glue: a delivery was answered {status}")

        def environs(count: int) -> list[dict]:
            bodies = [samples.encode(evt) for evt in samples.payment_stream(count)]
            return [_environ(body, stripe_wire.sign(body, SECRET), sock) for body in bodies]

        for environ in environs(WARM_UP):
            b"".join(app(environ, start_response))
        backends = cpu.backends(conninfo, name)
        batch = environs(deliveries)
        _callgrind(instructions, "on")
        web, postgres = cpu.own_seconds(), cpu.seconds(backends)
        for environ in batch:
            b"".join(app(environ, start_response))
        web, postgres = cpu.own_seconds() - web, cpu.seconds(backends) - postgres
        _callgrind(instructions, "off")
        client.close()
        sock.close()
    return web / deliveries * 1e6, postgres / deliveries * 1e6


def _callgrind(counting: bool, switch: str) -> None:
    if counting:
        subprocess.run(["callgrind_control", "-i", switch, str(os.getpid())], check=True, capture_output=True)


def _side(tree: Path, args: argparse.Namespace, scratch: Path) -> tuple[float, float]:
    """(web, PostgreSQL) per delivery of `tree`'s code: this file run there (a revision may predate it)."""
    child = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    command = [sys.executable, "-c", child, __file__, "--child", "--deliveries", str(args.deliveries)]
    counted = scratch / "callgrind.out"
    if args.instructions:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={counted}",
            *command,
            "--instructions",
        ]
    done = subprocess.run(
        command,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree), "DATABASE_URL": args.database_url, "LOG_LEVEL": "INFO"},
        stdout=subprocess.DEVNULL,  # the delivery log lines
        stderr=subprocess.PIPE,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"bench.glue: the run in {tree} failed: {done.stderr.strip().splitlines()[-1:]}")
    lines = [line for line in done.stderr.splitlines() if not line.startswith("==")]
    web, postgres = (float(v) for v in lines[-1].split())
    if args.instructions:
        summary = next(line for line in counted.read_text().splitlines() if line.startswith("totals:"))
        web = int(summary.split()[1]) / args.deliveries
    return web, postgres


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.glue", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--against", default="HEAD", help="the revision to compare with (default %(default)s)"
    )
    parser.add_argument(
        "--deliveries", type=int, help="per side and round (default 3000; 500 with --instructions)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="(default %(default)s)")
    parser.add_argument(
        "--instructions", action="store_true", help="count the web side's instructions under valgrind"
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or "postgresql://root@127.0.0.1:5432/test",
        help="server to create private schemas on (default: $DATABASE_URL or %(default)s)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.deliveries is None:
        args.deliveries = 500 if args.instructions else 3000
    if args.child:
        # The last line of stderr: what the parent reads.
        print(
            *(f"{v:.1f}" for v in measure(args.database_url, args.deliveries, args.instructions)),
            file=sys.stderr,
        )
        return 0
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind (Debian: apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        revision, scratch = Path(tmp) / "revision", Path(tmp)
        revision.mkdir()
        archive = subprocess.run(["git", "archive", args.against], cwd=ROOT, capture_output=True)
        if archive.returncode != 0:
            raise SystemExit(f"bench.glue: no revision {args.against!r} to compare with")
        subprocess.run(["tar", "-x", "-C", revision], input=archive.stdout, check=True)
        rounds = []
        for number in range(1, args.rounds + 1):
            # Each side goes first in every other round: neither always finds the machine warmer.
            order = [revision, ROOT] if number % 2 else [ROOT, revision]
            measured = {side: _side(side, args, scratch) for side in order}
            rounds.append((measured[revision], measured[ROOT]))
            print(f"[bench.glue] round {number}: {rounds[-1][0]} -> {rounds[-1][1]}", file=sys.stderr)
    web = "web, instructions (valgrind)" if args.instructions else "web, CPU µs"
    rows = []
    for index, label in enumerate((f"{web}: the app's WSGI call", "PostgreSQL backend, CPU µs")):
        base = [b[index] for b, _ in rounds]
        work = [w[index] for _, w in rounds]
        ratios = [w / b for b, w in zip(base, work, strict=True)]
        rows.append(
            [
                label,
                f"{statistics.median(base):.0f}",
                f"{statistics.median(work):.0f}",
                f"{statistics.median(work) - statistics.median(base):+.0f}",
                f"{statistics.median(ratios):.3f}",
                " / ".join(f"{r:.3f}" for r in ratios),
            ]
        )
    header = [
        "per delivery, one at a time",
        args.against,
        "work tree",
        "difference",
        "work tree / revision",
        "per round",
    ]
    print(f"$ python -m bench.glue {' '.join(argv if argv is not None else sys.argv[1:])}\n")
    print(markdown_table(header, rows))
    print(
        f"\n{os.cpu_count()} cores; {args.rounds} rounds of {args.deliveries} deliveries per side, "
        f"after {WARM_UP} to warm up; medians over rounds; PostgreSQL's CPU is read in clock ticks "
        f"({1000 // os.sysconf('SC_CLK_TCK')} ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
