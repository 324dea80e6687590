"""`python -m webhooks loadtest` against a real gunicorn and database."""

import subprocess

import pytest

from tests import conftest
from tests.support.commands import command
from tests.support.rows import count_rows
from webhooks.traffic import sender
from webhooks.traffic import stripe as stripe_traffic


def run_command(server, database_url: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m webhooks ARGS` aimed at `server`, with the test's database and secrets."""
    return _run(database_url, "webhooks", *args, "--url", server.url + "/webhooks/stripe")


def _run(database_url: str, module: str, *args: str) -> subprocess.CompletedProcess:
    done = command(*args, module=module, inherit=False, **conftest.service_env(database_url))
    print(done.stdout, done.stderr)
    return done


@pytest.fixture
def server(gunicorn):
    return gunicorn()


def test_loadtest_with_duplicates_passes_its_audit(server, database_url, db):
    done = run_command(server, database_url, "loadtest", "--events", "200", "--duplicates", "4")
    assert done.returncode == 0
    assert done.stdout.count("PASS") == 7 and "FAIL" not in done.stdout
    statuses = db.execute("SELECT status, count(*) FROM webhook_events GROUP BY 1").fetchall()
    assert statuses == [("completed", 200)]
    # 200 events are 67 Checkout payments (the last one cut short after its session).
    assert count_rows(db, "fulfilments") == 67


def test_loadtest_signed_with_another_secret_fails_naming_the_setting(server, database_url):
    done = run_command(server, database_url, "loadtest", "-n", "6", "-k", "2", "--secret", "whsec_wrong")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines()[-1].endswith(
        "was accepted: 400 invalid_signature (12 times); "
        "the service's STRIPE_WEBHOOK_SECRET is not the one signed with (--secret, STRIPE_WEBHOOK_SECRET)"
    )


def _send(server, evt: dict, duplicates: int, budget: int) -> sender.Result:
    """`evt` `duplicates` times, each retried up to `budget` attempts, over as many connections."""
    return sender.deliver(
        server.url + "/webhooks/stripe",
        conftest.SECRET,
        sender.plan(stripe_traffic.sent([evt]), duplicates, together=True),
        concurrency=duplicates,
        retry=sender.Retry(budget=budget, base_s=0.01),
        progress=False,
    )


def test_failed_deliveries_are_retried_until_answered_2xx(server, db):
    result = _send(server, conftest.scripted_event(fail_attempts=2, payment_id="pi_retried"), 1, budget=4)
    assert [label for label, _ in result.attempts] == ["500", "500", "200"]
    assert result.dropped == 0
    assert count_rows(db, "fulfilments") == 1


def test_retries_stop_at_the_budget(server, db):
    result = _send(server, conftest.scripted_event(fail_attempts=5), 2, budget=2)
    assert sorted(label for label, _ in result.attempts) == ["500"] * 4
    assert result.dropped == 2
    assert count_rows(db, "webhook_events") == 0


def test_locustfile_load_passes_its_audit(server, database_url, db):
    done = _run(
        database_url,
        "locust",
        "-f",
        "locustfile.py",
        "--headless",
        "--only-summary",
        "-u",
        "8",
        "-r",
        "8",
        "-t",
        "3s",
        "--host",
        server.url,
    )
    assert done.returncode == 0
    assert done.stdout.count("PASS") == 7 and "FAIL" not in done.stdout
    assert count_rows(db, "fulfilments") > 0
