"""`python -m webhooks serve` (bin/serve, the Procfile's `web:`): migrate, then nginx in front of gunicorn.

nginx listens on HOST:PORT, on METRICS_HOST:METRICS_PORT (the scraper's,
for /metrics) and on ADMIN_HOST:ADMIN_PORT (the operator console's), and
hands gunicorn whole requests over a Unix socket for each
(webhooks/web/front.py); `serve` tallies the requests the front refused,
for /metrics (webhooks/web/refusals.py). Without nginx,
gunicorn alone serves 127.0.0.1 only, and the command says so: exposed by
itself, a thread-per-request server is held by any client that sends slowly.

With DATABASE_URL unset it starts the embedded PostgreSQL, and stops it
again on exit if it was this command that started it.

Started as root, it changes nothing outside the front's folder it makes:
the users, the folders they must read and the embedded database's are the
install step's (`python -m webhooks install`, webhooks/commands/install.py),
and a start that finds it not done stops with a line naming it. Behind the
front, gunicorn runs as the service's user from the start: it listens on
Unix sockets only, so nothing of it needs root (docs/serving.md, "Who owns
what").
"""

from __future__ import annotations

import argparse
import collections
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import structlog

from webhooks import bootstrap
from webhooks.infra import embedded, install, migrate, privilege
from webhooks.infra.config import SettingError, Settings, serving
from webhooks.web import front, refusals

from .errors import CommandError

log = structlog.get_logger(__name__)

# Debian puts nginx in /usr/sbin, which is not on every user's PATH.
_NGINX_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
_LOOPBACK = "127.0.0.1"
_START_TIMEOUT_S = 30.0
# gunicorn's graceful_timeout (gunicorn.conf.py) and a margin, for each process to stop.
_STOP_TIMEOUT_S = 25.0


def nginx_binary(settings: Settings) -> str | None:
    return shutil.which(settings.nginx, path=_NGINX_PATH)


def check_port_free(host: str, port: int, setting: str = "PORT") -> int:
    """Fail before any start-up work if another process listens there; the port, or
    for 0 one the kernel finds free (nginx and gunicorn are each told one port)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        # As nginx and gunicorn bind: a port left in TIME_WAIT by a stopped server is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CommandError(
                    f"port {port} is already in use on {host}: stop what listens there, or set {setting}"
                ) from None
            raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        return int(sock.getsockname()[1])


class Served:
    """gunicorn, and nginx in front of it when `nginx` is given: started together, stopped together.

    `env` is gunicorn's environment, and the settings the front is rendered from; gunicorn
    writes its log to `output` (default: this process's stdout and stderr). Started as
    root, gunicorn behind the front runs as the service's user.
    """

    def __init__(self, env: dict[str, str], nginx: str | None, output=None):
        self.env, self.nginx, self.output = dict(env), nginx, output
        settings = Settings.from_env(self.env)
        self._as = (
            privilege.as_user(privilege.service_account(settings)) if nginx and privilege.as_root() else {}
        )
        self.front_dir: Path | None = None
        self._procs: list[tuple[str, subprocess.Popen]] = []
        self._front_said: collections.deque[str] = collections.deque(maxlen=1)
        self._tallying = threading.Event()

    def __enter__(self) -> Served:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self) -> None:
        if not self.nginx:
            self._gunicorn()
            return
        front_dir = self.front_dir = front.make_folder(Settings.from_env(self.env))
        self.env["WEBHOOK_FRONT_DIR"] = str(front_dir)
        # Rendered first: a setting nginx would refuse stops everything before anything starts.
        settings = Settings.from_env(self.env)
        config = front.write_config(front_dir, front.nginx_config(settings, front_dir))
        self._until(
            lambda: front.socket_path(front_dir).exists(),
            self._gunicorn(),
            "gunicorn exited before it listened (its log is above)",
        )
        fitted = front.fitted_connections(settings.front_connections)
        if fitted < settings.front_connections:
            log.warning(
                "front_connections_lowered",
                connections=fitted,
                wanted=settings.front_connections,
                reason="the open-file limit holds two descriptors per connection",
            )
        proxy = self._spawn(
            "nginx", [self.nginx, "-p", str(front_dir), "-c", str(config)], stderr=subprocess.PIPE
        )
        threading.Thread(target=self._relay, args=(proxy.stderr,), daemon=True).start()
        address = (_LOOPBACK if settings.host in ("0.0.0.0", "::") else settings.host, settings.port)
        self._until(
            lambda: _accepts(address),
            proxy,
            lambda: f"nginx did not start: {''.join(self._front_said) or 'no reason given'}",
        )
        tally = refusals.Tally(
            front_dir,
            lambda: proxy.send_signal(signal.SIGUSR1),  # nginx's "reopen your logs"
            lambda: refusals.with_children(proxy.pid),
        )
        threading.Thread(target=tally.run, args=(self._tallying,), daemon=True).start()

    def _gunicorn(self) -> subprocess.Popen:
        return self._spawn(
            "gunicorn",
            [
                sys.executable,
                "-m",
                "gunicorn",
                "--config",
                str(embedded.ROOT / "gunicorn.conf.py"),
                "wsgi:app",
            ],
            stdout=self.output,
            stderr=self.output,
            **self._as,
        )

    def process(self, name: str) -> subprocess.Popen:
        """The started "gunicorn" or "nginx"."""
        return next(proc for started, proc in self._procs if started == name)

    def _spawn(self, name: str, argv: list[str], **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(argv, cwd=embedded.ROOT, env=self.env, **kwargs)
        self._procs.append((name, proc))
        return proc

    def _relay(self, stream) -> None:
        """nginx's own lines (crit and worse) as our JSON lines."""
        for raw in stream:
            line = raw.decode(errors="replace").strip()
            self._front_said.append(line)
            log.error("front_error", message=line)

    @staticmethod
    def _until(ready, proc: subprocess.Popen, failure) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                time.sleep(0.1)  # the relay thread's last line
                raise CommandError(failure() if callable(failure) else failure)
            time.sleep(0.05)

    def wait(self) -> int:
        """Until Ctrl-C or TERM (0), or until one of the processes exits on its own (1)."""
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        while not stop.wait(0.2):
            for name, proc in self._procs:
                if proc.poll() is not None:
                    log.error("process_exited", process=name, code=proc.returncode)
                    return 1
        return 0

    def stop(self) -> None:
        """The front first, letting it finish what it has sent on; then gunicorn; then the front's folder."""
        self._tallying.set()
        for name, proc in reversed(self._procs):
            # QUIT is nginx's graceful stop; TERM is gunicorn's.
            proc.send_signal(signal.SIGQUIT if name == "nginx" else signal.SIGTERM)
            try:
                proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()
        if self.front_dir is not None:
            shutil.rmtree(self.front_dir, ignore_errors=True)


def _accepts(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=1).close()
        return True
    except OSError:
        return False


def _database(settings: Settings):
    """The URL, and the embedded folder to stop at exit if this command started its server."""
    if settings.database_url:
        return settings.database_url, None
    folder = embedded.pgdata(settings.data_dir)
    started_here = not embedded.running(folder)
    log.info(
        "embedded_database_starting" if started_here else "embedded_database_found", data_dir=str(folder)
    )
    url = embedded.url(folder)
    log.info("embedded_database_ready", data_dir=str(folder), url=url, psql="python -m webhooks db psql")
    return url, folder if started_here else None


# The shop's handler modules imported as the workers import them, in a process of the service's user.
_IMPORT_HANDLERS = """
import sys
from webhooks import bootstrap
from webhooks.infra.config import SettingError, serving
try:
    bootstrap.handlers(serving()[0])
except SettingError as exc:
    sys.exit(str(exc))
"""


def _check_handlers(settings: Settings, service: privilege.Account | None) -> None:
    """The workers import the shop's handler modules too: a typo is one line here, not a dead gunicorn.

    Started as root, they are imported as the service's user, as the workers
    import them: root runs none of the shop's code, which may lie in a folder
    another user can write.
    """
    if service is None:
        bootstrap.handlers(settings)
        return
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_HANDLERS],
        **privilege.as_user(service),
        cwd=os.getcwd(),
        capture_output=True,
        text=True,
    )
    if done.returncode:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        if not said.startswith("WEBHOOK_HANDLER_MODULES: "):
            said = f"WEBHOOK_HANDLER_MODULES: importing them as {service.name} failed: {said}"
        raise SettingError(said)


def _serve(args: argparse.Namespace) -> int:
    # gunicorn's settings too: a bad one is this command's one line, not a dead gunicorn.
    settings, process = serving()
    port = settings.port if args.port is None else args.port
    nginx = nginx_binary(settings)
    if nginx:
        front.check(settings)
    host = settings.host
    if nginx is None and host != _LOOPBACK:
        print(
            f"serve: nginx is not installed ({front.INSTALL}), so gunicorn alone serves "
            f"{_LOOPBACK}:{port} only, not {host}:{port}",
            file=sys.stderr,
        )
        host = _LOOPBACK
    service = install.check(settings, process, front=nginx is not None) if privilege.as_root() else None
    _check_handlers(settings, service)
    port = check_port_free(host, port)
    check_port_free(settings.metrics_host, settings.metrics_port, "METRICS_PORT")
    check_port_free(settings.admin_host, settings.admin_port, "ADMIN_PORT")
    url, started = _database(settings)
    try:
        applied = migrate.migrate(url)
        log.info("migrations_applied", applied=applied, latest=migrate.latest_version())
        # gunicorn inherits the resolved URL, so it never starts a second embedded server.
        env = {**os.environ, "DATABASE_URL": url, "HOST": host, "PORT": str(port)}
        with Served(env, nginx) as served:
            shown = "localhost" if host in ("0.0.0.0", "::") else host
            base = f"http://{shown}:{port}"
            log.info(
                "serving",
                url=base,
                webhook=f"{base}/webhooks/stripe",
                front="nginx" if nginx else None,
                metrics=f"http://{settings.metrics_host}:{settings.metrics_port}/metrics",
                admin=f"http://{settings.admin_host}:{settings.admin_port}/admin"
                if settings.admin_token
                else None,
            )
            return served.wait()
    finally:
        if started is not None:
            embedded.stop(started)
            log.info("embedded_database_stopped", data_dir=str(started))


def register(commands) -> None:
    serve = commands.add_parser(
        "serve",
        help="migrate and serve: nginx in front of gunicorn "
        "(an embedded PostgreSQL in <project>/.data/pg when DATABASE_URL is unset)",
    )
    serve.add_argument("--port", type=int, help="listen port, 0 for any free one (default: $PORT or 8000)")
    serve.set_defaults(func=_serve)
