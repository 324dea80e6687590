"""The benchmark's database ceiling replays what the service really writes, and its profile reads true."""

import os
import shutil
import subprocess
import sys

import psycopg
import pytest

from bench import cpu, outbox, pgbench, profile, run, scale
from tests.conftest import ROOT
from tests.support import machine
from tests.support.rows import count_rows
from webhooks.core import outbox as webhooks_outbox


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
    assert count_rows(db, "webhook_events") == 3 * payments
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


def test_the_outbox_drain_times_every_job_of_a_backlog_to_the_receiver(database_url, tmp_path):
    with outbox.running(database_url, 1, "whsec_test_bench", tmp_path) as running:
        done = running.drain(200)
    assert (done.jobs, done.arrived) == (200, 200)
    assert done.posts >= done.arrived
    # Each job is timed from the backlog's one commit to its own arrival.
    assert len(done.latencies_s) == 200 and 0 < done.latencies_s[-1] <= done.seconds


def test_the_notify_row_puts_pgqueuers_trigger_back_only_for_its_block(database_url, db):
    db.execute("LISTEN ch_pgqueuer")
    mine = db.info.backend_pid  # the channel is the database's: other schemas' tests notify on it too

    def notified() -> int:
        return sum(1 for n in db.notifies(timeout=1.0) if n.pid == mine)

    with pgbench.notify_trigger(database_url):
        webhooks_outbox.enqueue(db, "test.effect", {}, "key-notified")
        assert notified() == 1
    webhooks_outbox.enqueue(db, "test.effect", {}, "key-silent")
    assert notified() == 0


def _sweep_round(k1: dict[int, float], k4: dict[int, float]) -> dict[str, run.Measure]:
    return {
        **{run._swept("wrk_service", n): run.Measure(rate, rate, 1.0) for n, rate in k1.items()},
        **{run._swept("wrk_service_dup", n): run.Measure(rate, 4 * rate, 1.0) for n, rate in k4.items()},
    }


def test_the_sweep_prints_each_workers_share_against_the_fewest_in_the_same_round(monkeypatch):
    # Only the table is drawn: nothing runs wrk, so a machine without it passes too.
    monkeypatch.setattr(run.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    args = run.parse_args(["--sweep-workers", "4,1,2", "--rounds", "2"])
    assert args.sweep_workers == [1, 2, 4] and args.rows == ["wrk_service", "wrk_service_dup"]
    rounds = [
        _sweep_round({1: 100, 2: 200, 4: 300}, {1: 50, 2: 100, 4: 200}),
        # A slower round: its ratios are its own, not against the first round's.
        _sweep_round({1: 50, 2: 100, 4: 150}, {1: 25, 2: 50, 4: 100}),
    ]
    lines = run.render_sweep(args, rounds).splitlines()
    cells = [[cell.strip() for cell in line.strip("|").split("|")][:5] for line in lines[2:5]]
    assert cells == [
        ["1", "75", "100 %", "38", "100 %"],
        ["2", "150", "100 %", "75", "100 %"],
        ["4", "225", "75 %", "150", "100 %"],
    ]


COUNTS = "give numbers of workers, such as 1,2,4"


@pytest.mark.parametrize(
    "argv, error",
    [
        (["--sweep-workers", "1,2", "--rows", "seed"], "--sweep-workers runs its own rows: leave out --rows"),
        (["--sweep-workers", "1,x"], f"argument --sweep-workers: '1,x': {COUNTS}"),
        (["--sweep-workers", "0,2"], f"argument --sweep-workers: '0,2': {COUNTS}"),
    ],
)
def test_a_bad_sweep_is_refused_in_one_line(capsys, argv, error):
    with pytest.raises(SystemExit) as exit:
        run.parse_args(argv)
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"python -m bench: error: {error}"


def _cpu_round(service: float, seed: float, postgres: float) -> dict[str, run.Measure]:
    def measure(web: float) -> run.Measure:
        return run.Measure(100, 100, 1.0, cpu_us={"workers": web, "postgres": postgres, "front": 50.0})

    return {
        "wrk_service": measure(service),
        "seed": measure(seed),
        "wrk_service_dup": measure(service / 2),
        "seed_dup": measure(seed / 2),
        "wrk_service_front": measure(service),
    }


def test_cpu_per_delivery_by_process_is_a_ratio_to_the_seed_within_each_round(monkeypatch):
    monkeypatch.setattr(run.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(run, "nginx_binary", lambda settings: "/usr/sbin/nginx")
    args = run.parse_args(["--rows", "wrk_service,wrk_service_dup,wrk_service_front,seed,seed_dup"])
    # The second round is slower on both sides: its ratio is its own.
    rounds = [_cpu_round(600, 400, 500), _cpu_round(1200, 1000, 500)]
    text = run.render_by_process(args, rounds, "perf is not installed")
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()[2:]]
    assert cells[:3] == [
        ["K=1, µs CPU: web (gunicorn master + workers; the seed: its Node process)", "900", "700"]
        + ["**1.35**", "1.20-1.50", "1.50 / 1.20"],
        ["K=1, µs CPU: PostgreSQL backends", "500", "500", "**1.00**", "1.00-1.00", "1.00 / 1.00"],
        ["K=1, µs CPU: web + PostgreSQL", "1400", "1200", "**1.18**", "1.13-1.22", "1.22 / 1.13"],
    ]
    assert cells[3][0] == "K=4, µs CPU: web (gunicorn master + workers; the seed: its Node process)"
    assert cells[6][:2] == ["K=1, µs CPU: front (nginx, the service through it)", "50"]
    assert text.splitlines()[-1] == "Instructions per delivery: not counted, perf is not installed."


def test_instructions_are_read_from_perf_stat_or_reported_as_not_counted():
    assert cpu._instructions("1234567,,instructions,2000,100.00,,\n") == 1234567
    assert cpu._instructions("<not supported>,,instructions,0,100.00,,\n") is None
    reason = cpu.instructions_unsupported()
    assert reason is None or reason.startswith(("perf is not installed", "`perf stat -e instructions`"))


def test_the_glue_bench_refuses_a_revision_git_does_not_know_in_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "bench.glue", "--against", "no-such-revision", "--rounds", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "bench.glue: no revision 'no-such-revision' to compare with"


def test_the_return_call_row_ships_every_session_and_prices_its_cpu_against_a_delivery(server_url, capsys):
    argv = ["--rows", "service,return_call", "--rounds", "1", "--seconds", "1", "--database-url", server_url]
    assert run.main(argv) == 0
    out = capsys.readouterr().out
    [row] = [line for line in out.splitlines() if line.startswith("| return call: POST")]
    # Every call a new paid session, each shipped by its call.
    assert "HTTP 200 fulfilled: " in row and "HTTP 5" not in row and "HTTP 4" not in row
    [ratio] = [line for line in out.splitlines() if line.startswith("| return call's CPU per call")]
    assert float(ratio.split("|")[2]) > 0


def test_the_console_bench_times_every_page_against_a_seeded_backlog(database_url):
    done = subprocess.run(
        [sys.executable, "-m", "bench.console", "--events", "200", "--repeat", "1"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in done.stdout.splitlines()]
    pages = [row[0] for row in rows if len(row) == 6 and row[1].startswith("/admin")]
    assert pages == [
        "console",
        "bulk confirmation",
        "find: every event",
        "find: by payment id",
        "an event",
        "bulk job's progress",
    ]
    # The bulk job, whole and killed then resumed: every event done, none fulfilled twice or redone.
    # Killed once half its events were done, a batch of 100, so a batch was still to run.
    jobs = {row[0]: row for row in rows if row[0] == "whole job" or row[0].startswith("killed at ")}
    killed = next(name for name in jobs if name != "whole job")
    assert set(jobs) == {"whole job", killed}
    assert 100 <= int(killed.split()[2].rstrip(",")) < 200, killed
    for row in jobs.values():
        assert row[2] == "200/200" and row[8] == row[9] == "0", row
    assert jobs[killed][10] == "0"


def _rows_of(tables: str, events: str) -> list[list[str]]:
    """The cells of the markdown tables' rows for `events`."""
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in tables.splitlines()
        if line.startswith(f"| {events} ")
    ]


def test_the_scale_bench_fills_claims_and_removes_a_month_per_pause_and_schedule_by_its_partition(
    database_url, capsys
):
    argv = ["--load", "claims", "--events", "3000", "--seconds", "0.3", "--rounds", "1"]
    argv += ["--database-url", database_url]
    assert scale.main([*argv, "--pause", "0", "1"]) == 0
    claims, *removals = _rows_of(capsys.readouterr().out, "3,000")
    assert claims[5].endswith("×")
    # Bytes per event of each table, the partitioned ones' counted by their months.
    assert all(int(cell.replace(",", "")) > 0 for cell in claims[1:4]), claims
    # The idle row (nothing run: the machine's own noise), then one retention row per schedule and
    # pause, each removing the next-oldest month.
    idle, *paced = removals
    assert [row[1] for row in removals] == ["idle", "0, monthly", "1, monthly", "0, daily", "1, daily"]
    assert idle[4] == idle[5] == "—" and idle[6].endswith("×") and idle[7].endswith("×)"), idle
    for row in paced:
        # A month of twelve and a bit: about a twelfth of the events each, its ledger rows deleted
        # in the run (monthly) or all but its last day's before it (daily); their heap left for
        # reuse, its payloads and log dropped whole (partitions of some size).
        deleted, reusable = int(row[4].replace(",", "")), float(row[10])
        if "monthly" in row[1]:
            assert 150 < deleted < 300 and reusable > 0, row
        else:  # a day's rows: a few KiB, 0.00 MiB as shown
            assert 0 < deleted < 30 and reusable >= 0, row
        assert row[2] == "1" and float(row[5]) >= 0 and float(row[8]) > 0, row
        # The VACUUM that follows, timed and its claims counted.
        assert float(row[11]) >= 0 and row[12].endswith("×"), row


@pytest.mark.system
def test_the_scale_bench_measures_a_months_retention_by_the_deliveries_the_service_completes_meanwhile(
    database_url, capsys, monkeypatch
):
    """Signed deliveries over HTTP, as a shop's are, counted in the ledger: the windows' events are
    the deliveries the service completed, and no payment among them is fulfilled twice."""
    if shutil.which("wrk") is None:
        machine.lacking("WEBHOOKS_REQUIRE_WRK", "wrk not found: apt-get install wrk (.ci/run does)")
    monkeypatch.setenv("WEB_CONCURRENCY", "1")
    argv = ["--events", "3000", "--seconds", "0.5", "--rounds", "1", "--pause", "0", "--schedule", "monthly"]
    argv += ["--connections", "4", "--work-seconds", "2", "--database-url", database_url]
    assert scale.main(argv) == 0
    out = capsys.readouterr().out
    claims, idle, paced = _rows_of(out, "3,000")
    assert claims[5].endswith("×") and " / " in claims[7], claims
    assert [idle[1], paced[1]] == ["idle", "0, monthly"] and 150 < int(paced[4].replace(",", "")) < 300, paced
    # The windows' ratios and p99 are of deliveries that happened: none is 0 or missing.
    for ratio in (idle[6], paced[6], paced[12]):
        assert float(ratio.rstrip("×")) > 0, ratio
    assert "wrk connections delivering signed Stripe payment events" in out


def test_a_retention_row_gives_the_medians_of_its_runs_and_a_dash_for_what_they_did_not_measure():
    runs = [
        {"seconds": s, "per_s": r, "p99_before": 2.0, "p99": p, "p99_ratio": p / 2.0}
        for s, r, p in [(9.0, 0.90, 3.0), (7.0, 0.95, 2.4), (8.0, 1.00, 2.2)]
    ]
    row = scale._retention_row(5_000_000, "4", runs)
    assert row[:7] == ["5,000,000", "4", "3", "8.0", "—", "—", "0.95×"]
    assert row[7] == "2.0 → 2.4 (1.20×)" and row[8:] == ["—"] * 6


def test_the_scale_bench_refuses_more_runs_than_filled_months(capsys):
    assert scale.main(["--pause", "0", "2", "--repeat", "7", "--schedule", "monthly"]) == 2
    assert scale.main(["--pause", "0", "--repeat", "7"]) == 2
    assert capsys.readouterr().err.count("at most 12") == 2


def test_the_scale_bench_names_whether_the_data_is_on_a_file_system_that_discards_at_once(
    server_url, tmp_path
):
    """A month's DROP TABLE on a file system mounted with `discard` holds up commits while its
    blocks are discarded; the retention figures say which kind they were measured on."""
    if scale.data_mount(server_url).endswith("not readable from here"):
        pytest.skip("the server's data directory is not on this machine")
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/a / ext4 rw,relatime,discard 0 0\n/dev/b /var/lib ext4 rw,relatime 0 0\n")
    said = scale.data_mount(server_url, str(mounts))
    with psycopg.connect(server_url) as conn:
        (directory,) = conn.execute("SHOW data_directory").fetchone()
    if directory.startswith("/var/lib/"):
        assert said == "the server's data on ext4 at /var/lib, without `discard`"
    else:
        assert said == "the server's data on ext4 at /, with `discard`"
