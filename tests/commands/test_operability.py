"""A new user's mistakes and an operator's commands: one clear line, JSON logs, no leftovers."""

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import psycopg
import pytest
import requests

from tests import conftest
from tests.conftest import ROOT, post_event, scripted_event
from tests.support import ports
from tests.support.commands import command
from tests.support.downstream import Downstream, Worker, wait_until
from webhooks.core import outbox
from webhooks.infra import embedded


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def without_database_url() -> dict:
    return {"DATABASE_URL": ""}


@pytest.mark.parametrize(
    "argv",
    [
        ("migrate",),
        ("events", "list"),
        ("outbox", "list"),
        ("prune", "--older-than", "30d"),
        ("serve", "--port", "0"),
    ],
)
def test_a_database_url_naming_a_missing_database_is_one_line_and_exit_1(server_url, argv):
    missing = psycopg.conninfo.make_conninfo(server_url, dbname=f"no_such_{uuid.uuid4().hex[:8]}")
    # On loopback, so that serve has nothing to say about a missing nginx.
    ran = command(*argv, DATABASE_URL=missing, HOST="127.0.0.1", METRICS_PORT=str(ports.free_port()))
    assert ran.returncode == 1
    [line] = ran.stderr.splitlines()
    assert line.startswith("error: cannot use the database (DATABASE_URL's database no_such_")
    assert "does not exist" in line
    assert "Traceback" not in ran.stdout


def test_a_port_in_use_is_one_line_and_exit_1(database_url):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ran = command("serve", "--port", str(port), DATABASE_URL=database_url, HOST="127.0.0.1")
    assert ran.returncode == 1
    assert ran.stderr.splitlines() == [
        f"error: port {port} is already in use on 127.0.0.1: stop what listens there, or set PORT"
    ]


@pytest.mark.parametrize("name", ["no-such-event.json", "."])
def test_replay_of_a_file_that_cannot_be_read_is_one_line_and_exit_1(tmp_path, name):
    ran = command("replay", str(tmp_path / name), STRIPE_WEBHOOK_SECRET="whsec_test")
    assert ran.returncode == 1
    reason = "No such file or directory" if name != "." else "Is a directory"
    assert ran.stderr.splitlines() == [f"error: {tmp_path / name}: {reason}"]
    assert ran.stdout == ""


def test_the_embedded_database_is_the_same_from_any_working_directory(data_dir, tmp_path):
    from_root = command("db", "url", WEBHOOK_DATA_DIR=data_dir, **without_database_url())
    from_tests = command("db", "url", cwd=ROOT / "tests", WEBHOOK_DATA_DIR=data_dir, **without_database_url())
    from_elsewhere = command("db", "url", cwd=tmp_path, WEBHOOK_DATA_DIR=data_dir, **without_database_url())
    assert from_root.returncode == 0, from_root.stderr
    assert from_root.stdout == from_tests.stdout == from_elsewhere.stdout
    assert (ROOT / data_dir / "pg" / "PG_VERSION").exists()
    assert not (tmp_path / data_dir).exists() and not (ROOT / "tests" / data_dir).exists()
    # Nothing but the URL: no RuntimeDirWarning, no server chatter.
    assert from_elsewhere.stderr == "" and from_elsewhere.stdout.count("\n") == 1

    psql = command(
        "db", "psql", "-At", "-c", "SELECT 40 + 2", WEBHOOK_DATA_DIR=data_dir, **without_database_url()
    )
    assert psql.returncode == 0 and psql.stdout == "42\n", psql.stderr

    stop = command("db", "stop", WEBHOOK_DATA_DIR=data_dir, **without_database_url())
    assert stop.returncode == 0 and stop.stdout.startswith("stopped the embedded PostgreSQL in")
    assert not embedded.running(embedded.pgdata(data_dir))


# Said once on a machine, by the first start as root that needs it (webhooks/infra/privilege.py).
_MACHINE_SET_UP = {"user_made", "user_joined_group", "folder_opened_for_search"}


def test_bin_serve_says_each_step_and_stops_the_embedded_database_it_started(data_dir, tmp_path):
    log = open(tmp_path / "serve.log", "w")
    # Port 0: any free port, which the "serving" line names.
    serve = subprocess.Popen(
        [str(ROOT / "bin" / "serve"), "--port", "0"],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "DATABASE_URL": "",
            "WEBHOOK_DATA_DIR": data_dir,
            "HOST": "127.0.0.1",
            "METRICS_PORT": str(ports.free_port()),
            "ADMIN_PORT": str(ports.free_port()),
            "WEB_CONCURRENCY": "1",
            "STRIPE_WEBHOOK_SECRET": conftest.SECRET,
        },
    )
    try:
        url = wait_until(lambda: _serving_url(tmp_path / "serve.log"), 60, "serve to say where it serves")
        assert not url.endswith(":0")
        wait_until(lambda: _ready(url), 60, "serve to answer /readyz")
        assert embedded.running(embedded.pgdata(data_dir))
    finally:
        serve.send_signal(signal.SIGTERM)
        _, stderr = serve.communicate(timeout=60)
        log.close()
    assert serve.returncode == 0
    assert not embedded.running(embedded.pgdata(data_dir))
    said = [
        line["event"]
        for line in json_lines((tmp_path / "serve.log").read_text())
        if "pid" not in line and line["event"] not in _MACHINE_SET_UP
    ]
    assert said[:4] == [
        "embedded_database_starting",
        "embedded_database_ready",
        "migrations_applied",
        "serving",
    ]
    assert said[-1] == "embedded_database_stopped"
    # .venv is current (bin/test made it): reused without a word.
    assert "bin/setup" not in stderr
    assert "RuntimeDirWarning" not in stderr and "Traceback" not in stderr


def _serving_url(log: Path) -> str | None:
    lines = log.read_text().splitlines()
    return next((line["url"] for line in map(json.loads, lines) if line["event"] == "serving"), None)


def _ready(url: str) -> bool:
    try:
        return requests.get(f"{url}/readyz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def test_the_worker_on_the_embedded_database_logs_only_json_lines(data_dir):
    env = {"DATABASE_URL": "", "WEBHOOK_DATA_DIR": data_dir}
    unmigrated = command("worker", **env, WEBHOOK_OUTBOX_URL="http://127.0.0.1:9/")
    assert unmigrated.returncode == 1
    assert unmigrated.stderr.splitlines() == [
        f"error: the database is not migrated (the embedded PostgreSQL in {embedded.pgdata(data_dir)}): "
        "run `webhooks migrate` first"
    ]
    assert command("migrate", **env).returncode == 0
    downstream = Downstream()
    worker = Worker({**env, "WEBHOOK_OUTBOX_URL": downstream.url})
    try:
        worker.wait_started()
    finally:
        worker.stop()
        downstream.close()
    assert [line["event"] for line in json_lines(worker.output())] == ["outbox_worker_started"]


def test_a_dead_lettered_job_is_one_json_line_with_a_short_traceback(database_url, db):
    downstream = Downstream(status=500)
    with db.transaction():
        outbox.enqueue(db, "test.effect", {"key": "k"}, "test.effect:k")
    env = conftest.service_env(
        database_url,
        WEBHOOK_OUTBOX_URL=downstream.url,
        WEBHOOK_OUTBOX_MAX_ATTEMPTS=2,
        WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS=0.05,
        WEBHOOK_OUTBOX_POLL_SECONDS=1,
    )
    worker = Worker(env)
    try:
        wait_until(lambda: "outbox_dead" in worker.output(), 30, "the job to be dead-lettered")
        time.sleep(0.5)  # pgqueuer logs its own line just after ours
    finally:
        worker.stop()
        downstream.close()
    lines = json_lines(worker.output())  # every line is JSON, or this raises
    [traced] = [line for line in lines if "exception" in line]
    assert traced["exception"]["type"] == "DeliveryFailed"
    assert 0 < len(traced["exception"]["frames"]) <= 8
    assert [line["event"] for line in lines if line.get("job_id")] == ["outbox_retry", "outbox_dead"]


def test_a_failing_reprocess_logs_one_json_line_without_the_payloads_values(client, database_url):
    evt = scripted_event(fail_attempts=9, customer_email="jenny.rosen@example.com")
    assert post_event(client, evt).status_code == 500
    ran = command(
        "events",
        "reprocess",
        evt["id"],
        DATABASE_URL=database_url,
        WEBHOOK_HANDLER_MODULES="tests.support.handlers",
    )
    assert ran.returncode == 1 and ran.stderr == ""
    *logged, answer = ran.stdout.splitlines()
    assert answer == '500 {"error":"fulfilment_failed"}'
    [failure] = json_lines("\n".join(logged))
    assert failure["event"] == "delivery_failed" and failure["exception"]["type"] == "ScriptedFailure"
    assert "jenny.rosen" not in ran.stdout
