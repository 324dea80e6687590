"""`backfill`: the events Stripe kept, applied through the claim, only the missing ones."""

import threading
import time

from tests import conftest
from tests.conftest import post_event
from tests.support.commands import command
from tests.support.rows import count_rows
from tests.support.stripe_api import stand_in, stand_in_env  # noqa: F401  (fixtures)
from webhooks import bootstrap
from webhooks import commands as cli
from webhooks.commands import backfill
from webhooks.infra.config import Settings
from webhooks.traffic import samples

TWO_DAYS_AGO = int(time.time()) - 2 * 86400


def payments(count: int) -> list[dict]:
    """`count` payments' events, a minute apart, from two days ago on."""
    events = []
    for n in range(count):
        events += samples.payment_events(created=TWO_DAYS_AGO + 60 * n)
    return events


def effects(db) -> dict[str, int]:
    counts = conftest.table_counts(db)
    counts["outbox"] = count_rows(db, "pgqueuer")
    counts["payments"] = count_rows(db, "payments")
    return counts


def summary_row(output: str, name: str) -> list[int]:
    line = next(line for line in output.splitlines() if line.startswith(name + " "))
    return [int(cell) for cell in line.split()[-4:]]


def test_backfill_applies_only_the_missing_events_and_a_rerun_has_no_effect(
    stand_in_env, stand_in, client, db, capsys
):
    events = payments(90)  # 270 events: pages of 100, 100 and 70
    stand_in.add("events", *events)
    delivered = events[::3] + events[1::9]  # the ledger has these already
    for evt in delivered:
        assert post_event(client, evt).status_code == 200
    before = effects(db)

    assert cli.main(["backfill", "--since", "72h"]) == 0
    out = capsys.readouterr().out
    assert summary_row(out, "total") == [270, 270 - len(delivered), len(delivered), 0]
    assert len(stand_in.calls("/v1/events")) == 3
    after = effects(db)
    assert after["webhook_events"] == 270
    assert after["fulfilments"] == 90  # every payment once, whichever of its events came first
    assert after["outbox"] - before["outbox"] == 90 - before["fulfilments"]

    assert cli.main(["backfill", "--since", "72h"]) == 0
    assert summary_row(capsys.readouterr().out, "total") == [270, 0, 270, 0]
    assert effects(db) == after


def test_backfill_applies_oldest_first_and_filters_by_type(stand_in_env, stand_in, db, capsys):
    events = payments(3)
    stand_in.add("events", *events)
    assert cli.main(["backfill", "--since", "3d", "--types", "payment_intent.succeeded"]) == 0
    assert stand_in.calls("/v1/events")[0].query["types[0]"] == "payment_intent.succeeded"
    applied = [row[0] for row in db.execute("SELECT event_id FROM webhook_events ORDER BY id")]
    assert applied == [e["id"] for e in events if e["type"] == "payment_intent.succeeded"]


def test_dry_run_lists_what_would_be_new_and_writes_nothing(stand_in_env, stand_in, client, db, capsys):
    events = payments(2)
    stand_in.add("events", *events)
    post_event(client, events[0])
    before = effects(db)
    assert cli.main(["backfill", "--since", "72h", "--dry-run"]) == 0
    out = capsys.readouterr().out
    listed = [line.split()[3] for line in out.splitlines() if line.startswith("would apply")]
    assert sorted(listed) == sorted(e["id"] for e in events[1:])
    assert summary_row(out, "total") == [6, 5, 1, 0]
    assert effects(db) == before


def test_a_window_beyond_stripes_30_days_is_refused(stand_in_env, stand_in, capsys):
    assert cli.main(["backfill", "--since", "31d"]) == 2
    assert "Stripe keeps events for 30 days" in capsys.readouterr().err
    assert stand_in.requests == []


def test_a_failing_page_is_retried_by_the_client(stand_in_env, stand_in, db, capsys):
    stand_in.add("events", *payments(40))  # 120 events, 2 pages
    stand_in.fail(lambda path, query: "starting_after" in query, times=2)
    assert cli.main(["backfill", "--since", "72h"]) == 0
    assert len(stand_in.calls("/v1/events")) == 4  # page 2 asked three times
    assert effects(db)["webhook_events"] == 120


def test_a_page_failing_past_the_retries_is_reported_and_nothing_applied(stand_in_env, stand_in, db, capsys):
    stand_in.add("events", *payments(40))
    stand_in.fail(lambda path, query: "starting_after" in query, times=3)
    assert cli.main(["backfill", "--since", "72h"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("backfill: Stripe's API failed (500) through the retries")
    assert len(err.strip().splitlines()) == 1
    assert effects(db)["webhook_events"] == 0


def test_without_an_api_key_the_command_refuses_with_one_line(database_url):
    result = command("backfill", "--since", "1h", inherit=False, **conftest.service_env(database_url))
    assert result.returncode == 2
    assert result.stderr == "backfill: STRIPE_API_KEY is not set: this command reads Stripe's API\n"


def test_backfill_racing_live_deliveries_processes_each_event_once(stand_in_env, stand_in, make_app, db):
    events = payments(30)
    stand_in.add("events", *events)
    settings = Settings.from_env(stand_in_env)
    found = backfill.fetch_events(
        backfill.stripe_api.client(settings), settings, backfill.durations.instant("72h"), None, []
    )
    assert len(found) == 90
    live_clients = [make_app().test_client() for _ in range(3)]
    gate = threading.Barrier(len(live_clients) + 1)
    first_answers: list[str] = []
    backfilled: list[str] = []
    lock = threading.Lock()

    def live(client):
        gate.wait()
        for evt in events:
            while (response := post_event(client, evt)).status_code == 409:
                time.sleep(0.05)  # Stripe retries a 409
            assert response.status_code == 200
            if "Idempotent-Replayed" not in response.headers:
                with lock:
                    first_answers.append(evt["id"])

    def backfiller():
        service = bootstrap.build(settings, min_size=1, max_size=1)
        gate.wait()
        try:
            for evt in found:
                status, _ = backfill.apply(service, evt)
                backfilled.append(status)
                if status == "new":
                    with lock:
                        first_answers.append(evt["id"])
        finally:
            service.close()

    threads = [threading.Thread(target=live, args=(c,)) for c in live_clients]
    threads.append(threading.Thread(target=backfiller))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(first_answers) == sorted(e["id"] for e in events)
    # Every event went through the backfill too, none of them failed.
    assert len(backfilled) == 90 and "failed" not in backfilled
    assert effects(db)["webhook_events"] == 90
    assert effects(db)["fulfilments"] == 30
    assert effects(db)["outbox"] == 30


def test_connected_accounts_events_are_listed_with_stripe_account_and_keep_it(
    stand_in_env, stand_in, db, monkeypatch, capsys
):
    account = "acct_1RkT9sQm3HcW7bLd"
    monkeypatch.setenv("STRIPE_CONNECT_ACCOUNTS", account)
    platform, connected = payments(1), payments(1)
    stand_in.add("events", *platform)
    stand_in.add("events", *connected, account=account)
    assert cli.main(["backfill", "--since", "72h"]) == 0
    assert [c.headers.get("stripe-account") for c in stand_in.calls("/v1/events")] == [None, account]
    rows = dict(db.execute("SELECT payment_id, account FROM fulfilments").fetchall())
    assert rows == {
        samples.payment_id(platform[0]): "",
        samples.payment_id(connected[0]): account,
    }
