"""What a benchmark row runs against: a private schema and a gunicorn process."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import requests
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from webhooks.service import migrate

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def private_schema(server_url: str):
    """A migrated schema of our own; yields a conninfo whose search_path is it."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        options = conninfo_to_dict(server_url).get("options", "")
        url = make_conninfo(server_url, options=f"{options} -c search_path={schema}".strip())
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
    """The project's gunicorn.conf.py serving `app`; yields its base URL once it answers."""
    port = free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", app],
            cwd=ROOT,
            env={**os.environ, **env, "HOST": "127.0.0.1", "PORT": str(port)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_healthy(proc, url, log_path)
            yield url, proc.pid
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _wait_healthy(proc: subprocess.Popen, url: str, log_path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited:\n{log_path.read_text()}")
        try:
            if requests.get(url + "/healthz", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"gunicorn not healthy after {timeout} s:\n{log_path.read_text()}")
