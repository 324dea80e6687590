"""`python -m webhooks serve` (what bin/serve runs): migrate, then gunicorn, saying each step.

With DATABASE_URL unset it starts the embedded PostgreSQL, and stops it
again when gunicorn exits if it was this command that started it.
"""
from __future__ import annotations

import argparse
import errno
import os
import signal
import socket
import subprocess
import sys

import structlog

from .errors import CommandError

from ..service import embedded, migrate
from ..service.config import Settings

log = structlog.get_logger(__name__)


def check_port_free(host: str, port: int) -> None:
    """Fail before any start-up work if another process listens there."""
    with socket.socket() as sock:
        # As gunicorn binds: a port left in TIME_WAIT by a stopped server is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CommandError(
                    f"port {port} is already in use on {host}: stop what listens there, or set PORT"
                ) from None
            raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def _database(settings: Settings):
    """The URL, and the embedded folder to stop at exit if this command started its server."""
    if settings.database_url:
        return settings.database_url, None
    folder = embedded.pgdata(settings.data_dir)
    started_here = not embedded.running(folder)
    log.info("embedded_database_starting" if started_here else "embedded_database_found",
             data_dir=str(folder))
    url = embedded.url(folder)
    log.info("embedded_database_ready", data_dir=str(folder), url=url,
             psql="python -m webhooks db psql")
    return url, folder if started_here else None


def _gunicorn(env: dict[str, str]) -> int:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--config", str(embedded.ROOT / "gunicorn.conf.py"),
         "wsgi:app"],
        cwd=embedded.ROOT, env=env,
    )

    def forward(signum, frame):
        proc.send_signal(signum)

    # Ctrl-C or a supervisor's TERM stops gunicorn gracefully; this process
    # waits for it so it can stop the database after the last request.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    return proc.wait()


def _serve(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    host = os.environ.get("HOST", "0.0.0.0")
    port = args.port or settings.port
    check_port_free(host, port)
    url, started = _database(settings)
    try:
        applied = migrate.migrate(url)
        log.info("migrations_applied", applied=applied, latest=migrate.latest_version())
        shown = "localhost" if host in ("0.0.0.0", "::") else host
        base = f"http://{shown}:{port}"
        log.info("serving", url=base, webhook=f"{base}/webhooks/stripe")
        # Workers inherit the resolved URL, so they never start a second embedded server.
        return _gunicorn({**os.environ, "DATABASE_URL": url, "HOST": host, "PORT": str(port)})
    finally:
        if started is not None:
            embedded.stop(started)
            log.info("embedded_database_stopped", data_dir=str(started))


def register(commands) -> None:
    serve = commands.add_parser(
        "serve",
        help="migrate and run the service under gunicorn "
        "(an embedded PostgreSQL in <project>/.data/pg when DATABASE_URL is unset)",
    )
    serve.add_argument("--port", type=int, help="listen port (default: $PORT or 8000)")
    serve.set_defaults(func=_serve)
