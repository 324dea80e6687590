"""The benchmark's database ceiling replays what the service really writes, and its profile reads true."""

import subprocess
import sys

import pytest

from bench import pgbench, profile, run
from tests.conftest import ROOT


def test_pgbench_script_repeats_the_services_transactions_for_new_payments(database_url, db):
    outcome = pgbench.run(database_url, clients=2, seconds=2)
    assert outcome.deliveries_per_s > 0
    # The floor's database half: read from pgbench's own backends while they ran.
    assert outcome.postgres_cpu_us > 0
    outcomes = dict(
        db.execute(
            "SELECT outcome, count(*) FROM webhook_events WHERE status = 'completed' GROUP BY 1"
        ).fetchall()
    )
    # Every run of the script is one more payment: its session fulfils it,
    # its payment intent finds it fulfilled, its charge has no handler.
    payments = outcomes["fulfilled"]
    assert payments > 1
    assert outcomes == {"fulfilled": payments, "already_fulfilled": payments, "ignored": payments}
    assert db.execute("SELECT count(*) FROM webhook_events").fetchone()[0] == 3 * payments
    assert db.execute("SELECT count(*), count(DISTINCT payment_id) FROM fulfilments").fetchone() == (
        payments,
        payments,
    )


def test_the_ceiling_is_recorded_with_the_services_handlers_in_a_process_of_its_own(database_url):
    """`python -m bench` records in its own process, where nothing but the bench has run.

    In this test process conftest has built the web app; a recorder that
    relied on that would replay a payment's events as ignored claims.
    """
    recorded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from bench import pgbench; print(pgbench.script(pgbench.record(sys.argv[1])))",
            database_url,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout.count("webhooks_deliver_payment_succeeded") == 2  # the session's and the intent's


def test_profile_counts_threads_waiting_for_work_apart_from_work(tmp_path):
    stacks = tmp_path / "service.stacks"
    stacks.write_text(
        "process 1;_worker (concurrent/futures/thread.py:81) 6\n"
        "process 1;run (gunicorn/workers/gthread.py:426);EpollSelector.select (selectors.py:468) 2\n"
        "process 1;execute (psycopg/cursor.py:97);Connection.wait (psycopg/connection.py:495) 1\n"
        "process 1;serve (webhooks/web/app.py:70);verify (webhooks/providers/stripe.py:60) 1\n"
    )
    assert profile.summary(stacks).splitlines()[2:] == [
        "| waiting for work (thread pool, event loop)        | 80.0% |",
        "| waiting (database answer, pool)                   | 10.0% |",
        "| webhooks                                          | 10.0% |",
    ]


def test_profile_without_a_row_it_records_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit:
        run.parse_args(["--rows", "seed", "--profile", "/tmp/unused.stacks"])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "python -m bench: error: --profile records one of the rows service, wrk_service: none is in --rows"
    )
