"""Each bad setting the issue found serving now stops the process at start, in one line."""

import os
import subprocess
import sys

import pytest

from tests import conftest
from tests.support.commands import ROOT, command

# Nothing listens there: a process that got as far as the database would say so instead.
NOWHERE = "postgresql://127.0.0.1:1/nowhere"

BAD_SETTINGS = [
    ("WEBHOOK_POOL_MAX_SIZE", "-3"),
    ("WEBHOOK_POOL_TIMEOUT_SECONDS", "-1"),
    ("WEBHOOK_REQUEST_READ_TIMEOUT_SECONDS", "0"),
    ("WEB_CONCURRENCY", "0"),
    ("WEB_CONCURRENCY", "two"),
    ("GUNICORN_THREADS", "0"),
    ("STRIPE_WEBHOOK_SECRET", "not_a_signing_secret"),
]


def one_line_naming(ran: subprocess.CompletedProcess, variable: str) -> None:
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert ran.stderr.startswith(f"error: {variable}: ") and ran.stderr.count("\n") == 1, ran.stderr
    assert "Traceback" not in ran.stdout + ran.stderr and "serving" not in ran.stdout


@pytest.mark.parametrize(("variable", "value"), BAD_SETTINGS)
def test_serve_stops_before_serving_with_one_line(variable, value):
    env = {**conftest.service_env(NOWHERE), "PORT": "1", variable: value}
    one_line_naming(command("serve", **env), variable)


# gunicorn itself reads WEB_CONCURRENCY as a number when it is imported, before
# any config file: run alone, only its own traceback can answer "two".
@pytest.mark.parametrize(
    ("variable", "value"), [bad for bad in BAD_SETTINGS if bad != ("WEB_CONCURRENCY", "two")]
)
def test_gunicorn_alone_stops_before_serving_with_one_line(variable, value):
    env = {**os.environ, **conftest.service_env(NOWHERE), "PYTHONPATH": str(ROOT), variable: value}
    ran = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    one_line_naming(ran, variable)


def test_the_worker_stops_on_a_bad_setting_before_it_takes_a_job():
    env = {**conftest.service_env(NOWHERE), "WEBHOOK_OUTBOX_URL": "http://127.0.0.1:9/"}
    one_line_naming(command("worker", **env, WEBHOOK_OUTBOX_CONCURRENCY="0"), "WEBHOOK_OUTBOX_CONCURRENCY")
