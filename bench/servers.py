"""What a benchmark row runs against: a private schema, and gunicorn (alone, or behind nginx as
`python -m webhooks serve` runs it) or the seed's Node process.

Each server yields (its base URL, the pid whose children are its workers, the front's pids).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg
import requests
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from webhooks.commands.serve import Served, nginx_binary
from webhooks.infra import migrate
from webhooks.infra.config import Settings
from webhooks.web.front import INSTALL

from .cpu import children as cpu_children

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def private_schema(server_url: str, migrated: bool = True):
    """A schema of our own, migrated unless told; yields a conninfo whose search_path is it."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        options = conninfo_to_dict(server_url).get("options", "")
        url = make_conninfo(server_url, options=f"{options} -c search_path={schema}".strip())
        if migrated:
            migrate.migrate(url)
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def gunicorn(app: str, env: dict[str, str], log_path: Path):
    """The project's gunicorn.conf.py serving `app` alone, once it answers."""
    command = [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", app]
    with _served(command, ROOT, env, log_path) as served:
        yield served


def side_ports() -> dict[str, str]:
    """Free ports for the scraper's and the console's listeners, so servers can share a machine."""
    return {"METRICS_PORT": str(free_port()), "ADMIN_PORT": str(free_port())}


@contextlib.contextmanager
def front(env: dict[str, str], log_path: Path):
    """The service as `python -m webhooks serve` runs it, nginx in front of gunicorn, once it answers."""
    port = free_port()
    env = {**os.environ, **env, "HOST": "127.0.0.1", "PORT": str(port), **side_ports()}
    url = f"http://127.0.0.1:{port}"
    nginx = nginx_binary(Settings.from_env(env))
    if nginx is None:
        raise SystemExit(f"bench: nginx is not installed ({INSTALL})")
    with open(log_path, "w") as log, Served(env, nginx, log) as served:
        wait_healthy(served.process("gunicorn"), url, log_path)
        front = served.process("nginx").pid
        yield url, served.process("gunicorn").pid, [front, *cpu_children(front)]


@contextlib.contextmanager
def serve(env: dict[str, str], log_path: Path):
    """`python -m webhooks serve` as a process of its own, its output (nginx's lines too) in `log_path`."""
    env = {**env, **side_ports()}
    with _served([sys.executable, "-m", "webhooks", "serve"], ROOT, env, log_path) as served:
        yield served


@contextlib.contextmanager
def receiver(log_path: Path, delay_ms: int = 0, answer_bytes: int = 0):
    """bench.receiver, the outbox rows' receiver, in a process of its own, once it answers."""
    env = {"RECEIVER_DELAY_MS": str(delay_ms), "RECEIVER_ANSWER_BYTES": str(answer_bytes)}
    with _served([sys.executable, "-m", "bench.receiver"], ROOT, env, log_path) as served:
        yield served


SEED = ROOT / "bench" / "peers" / "seed"


@contextlib.contextmanager
def seed(env: dict[str, str], log_path: Path):
    """The seed article's Node handler; yields its base URL once it answers."""
    if not (SEED / "node_modules").exists():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], cwd=SEED, check=True, stdout=subprocess.DEVNULL
        )
    with _served(["node", "server.js"], SEED, env, log_path) as served:
        yield served


def seed_schema(conninfo: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute((SEED / "schema.sql").read_text())


def libpq_url(conninfo: str) -> str:
    """`conninfo` as a URL (node-postgres takes no key=value strings)."""
    params = conninfo_to_dict(conninfo)
    query = {k: v for k, v in params.items() if k in ("options", "application_name")}
    auth = params.get("user", "") + (f":{params['password']}" if params.get("password") else "")
    return (
        f"postgresql://{auth}@{params.get('host', '127.0.0.1')}:{params.get('port', 5432)}"
        f"/{params.get('dbname', '')}?{urlencode(query, quote_via=quote)}"
    )


@contextlib.contextmanager
def _served(command: list[str], cwd: Path, env: dict[str, str], log_path: Path):
    port = free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env={**os.environ, **env, "HOST": "127.0.0.1", "PORT": str(port)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(proc, url, log_path)
            yield url, proc.pid, []
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def wait_healthy(proc: subprocess.Popen, url: str, log_path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited:\n{log_path.read_text()}")
        try:
            if requests.get(url + "/healthz", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"server not healthy after {timeout} s:\n{log_path.read_text()}")
