"""`webhooks outbox list|requeue|purge`: the outbox on the service's own database, one line per answer."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests import conftest
from tests.support.commands import called, command
from tests.support.dead_letters import dead_letter, status_of
from tests.support.downstream import Downstream, Worker, wait_until
from webhooks.core import outbox


@pytest.fixture
def outbox_command(database_url):
    def run(*argv: str):
        return called("outbox", *argv, DATABASE_URL=database_url)

    return run


def logged(db, job_id: int) -> list[str]:
    return [
        s
        for (s,) in db.execute(
            "SELECT status::text FROM pgqueuer_log WHERE job_id = %s ORDER BY id", [job_id]
        )
    ]


def test_list_shows_dead_letters_first_and_json_says_the_same(outbox_command, db):
    dead = dead_letter(db, "test.effect:pi_dead")
    with db.transaction():
        outbox.enqueue(db, "test.other", {"payment_id": "pi_live"}, "test.other:pi_live")
    table = outbox_command("list")
    assert table.returncode == 0, table.stderr
    header, _, first, second = table.stdout.splitlines()
    assert header.split() == ["id", "status", "kind", "attempts", "created", "idempotency", "key"]
    assert first.split()[:4] == [str(dead), "failed", "test.effect", "5"]
    assert second.split()[1:3] == ["queued", "test.other"]

    listed = json.loads(outbox_command("list", "--json", "--status", "failed").stdout)
    assert [(job["id"], job["status"], job["kind"], job["idempotency_key"]) for job in listed] == [
        (dead, "failed", "test.effect", "test.effect:pi_dead")
    ]


def test_requeue_names_what_it_moved_and_the_worker_then_delivers_it(outbox_command, database_url, db):
    job_id = dead_letter(db, "test.effect:pi_again")
    ran = outbox_command("requeue", str(job_id))
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, f"requeued 1 dead letter(s): {job_id}\n", "")
    assert status_of(db, job_id) == ("queued", 0) and logged(db, job_id)[-1] == "queued"

    # pgqueuer's own worker takes it as any queued job.
    downstream = Downstream()
    worker = Worker(
        conftest.service_env(database_url, WEBHOOK_OUTBOX_URL=downstream.url, WEBHOOK_OUTBOX_POLL_SECONDS=1)
    )
    try:
        wait_until(lambda: status_of(db, job_id) is None, 30, "the requeued job to be delivered")
    finally:
        worker.stop()
        downstream.close()
    assert [key for key, _ in downstream.received] == ["test.effect:pi_again"]


def test_requeue_selects_by_kind_and_leaves_the_rest(outbox_command, db):
    effect = dead_letter(db, "test.effect:pi_1")
    other = dead_letter(db, "test.other:pi_2", kind="test.other")
    dry = outbox_command("requeue", "--kind", "test.effect", "--dry-run")
    assert dry.stdout == f"would requeue 1 dead letter(s): {effect}\n"
    assert status_of(db, effect) == ("failed", 4)  # a dry run moves nothing
    assert outbox_command("requeue", "--kind", "test.effect").returncode == 0
    assert status_of(db, effect)[0] == "queued" and status_of(db, other) == ("failed", 4)


def test_requeue_selects_by_last_error_as_the_console_groups_them(outbox_command, db):
    refused = dead_letter(db, "test.effect:pi_refused", error="HTTP 500 Internal Server Error from shop")
    timed_out = dead_letter(db, "test.effect:pi_timed_out", error="TimeoutError: ")
    ran = outbox_command("requeue", "--error", "HTTP 500 Internal Server Error from shop")
    assert (ran.returncode, ran.stdout) == (0, f"requeued 1 dead letter(s): {refused}\n")
    assert status_of(db, refused)[0] == "queued" and status_of(db, timed_out) == ("failed", 4)


def test_a_dead_letter_whose_key_is_pending_again_stays_dead_and_says_so(outbox_command, db):
    job_id = dead_letter(db, "test.effect:pi_twice")
    with db.transaction():  # the same key enqueued anew since it died
        outbox.enqueue(db, "test.effect", {"payment_id": "pi_twice"}, "test.effect:pi_twice")
    ran = outbox_command("requeue", "--all")
    assert ran.returncode == 1
    assert ran.stdout == f"requeued 0 dead letter(s); 1 left dead, their keys pending again: {job_id}\n"
    assert status_of(db, job_id) == ("failed", 4)


@pytest.mark.parametrize("action", ["requeue", "purge"])
def test_naming_no_dead_letters_is_refused_in_one_line(outbox_command, db, action):
    job_id = dead_letter(db, "test.effect:pi_kept")
    ran = outbox_command(action, *(["--yes"] if action == "purge" else []))
    assert ran.returncode == 1 and ran.stdout == ""
    assert ran.stderr.splitlines() == [
        f"error: name the dead letters to {action}: job ids, --kind, --error, --older-than, or --all"
    ]
    assert status_of(db, job_id) == ("failed", 4)


def test_purge_needs_yes_or_dry_run_and_deletes_only_the_dead_letters_named(outbox_command, db):
    old = dead_letter(db, "test.effect:pi_old")
    db.execute("UPDATE pgqueuer SET created = now() - interval '10 days' WHERE id = %s", [old])
    young = dead_letter(db, "test.effect:pi_young")
    with db.transaction():
        outbox.enqueue(db, "test.effect", {"payment_id": "pi_live"}, "test.effect:pi_live")

    refused = outbox_command("purge", "--older-than", "7d")
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        "error: purge deletes dead letters for good: pass --yes, or --dry-run to see which"
    ]
    assert (
        outbox_command("purge", "--older-than", "7d", "--dry-run").stdout
        == f"would purge 1 dead letter(s): {old}\n"
    )
    assert status_of(db, old) == ("failed", 4)

    purged = outbox_command("purge", "--older-than", "7d", "--yes")
    assert (purged.returncode, purged.stdout) == (0, f"purged 1 dead letter(s): {old}\n")
    assert status_of(db, old) is None and logged(db, old)[-1] == "deleted"
    assert status_of(db, young) == ("failed", 4)
    assert [job.status for job in outbox.pending(db)] == ["failed", "queued"]


def test_a_span_that_is_not_one_is_a_usage_error(outbox_command):
    ran = outbox_command("purge", "--older-than", "lately", "--yes")
    assert ran.returncode == 2 and "'lately' is neither a span (1h) nor an ISO time" in ran.stderr


def test_on_the_embedded_database_the_commands_use_the_services_own_connection(data_dir):
    env = {"DATABASE_URL": "", "WEBHOOK_DATA_DIR": data_dir}
    assert command("migrate", **env).returncode == 0
    url = command("db", "url", **env).stdout.strip()
    with psycopg.connect(url, autocommit=True) as db:
        job_id = dead_letter(db, "test.effect:pi_embedded")
        listed = command("outbox", "list", "--json", **env)
        assert [job["id"] for job in json.loads(listed.stdout)] == [job_id]
        ran = command("outbox", "requeue", "--all", **env)
        assert ran.stdout == f"requeued 1 dead letter(s): {job_id}\n"
        assert status_of(db, job_id) == ("queued", 0)
