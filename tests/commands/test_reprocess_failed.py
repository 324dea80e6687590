"""`webhooks events reprocess --status failed [--since] [--type] [--dry-run]`: every failed event selected.

The selection is /admin's (history.to_reprocess), and each event goes
through the claim as `events reprocess EVT` does: one that completed
meanwhile only replays its answer.
"""

from __future__ import annotations

import pytest

from tests.conftest import post_event, scripted_event, table_counts
from tests.support.commands import called
from webhooks.traffic import samples


@pytest.fixture
def reprocess(database_url):
    def run(*argv: str, modules: str = "tests.support.handlers"):
        return called(
            "events", "reprocess", *argv, DATABASE_URL=database_url, WEBHOOK_HANDLER_MODULES=modules
        )

    return run


def outcomes(db, events: list[dict]) -> list[str | None]:
    found = dict(db.execute("SELECT event_id, outcome FROM webhook_events").fetchall())
    return [found.get(evt["id"]) for evt in events]


def failed_once(client) -> dict:
    evt = scripted_event(fail_attempts=1)
    assert post_event(client, evt).status_code == 500
    return evt


def an_old_failure(db, event_id: str) -> None:
    """A failed event of another type, recorded two days ago."""
    db.execute(
        "INSERT INTO webhook_failures (provider, event_id, event_type, error_class, payload, failed_at)"
        " VALUES ('stripe', %s, 'test.scripted', 'Boom', '{}', now() - interval '2 days')",
        [event_id],
    )


def test_list_prints_the_count_and_ids_and_changes_nothing(reprocess, client, db):
    failing = [failed_once(client) for _ in range(2)]
    an_old_failure(db, "evt_two_days_old")
    before = table_counts(db)
    ran = reprocess("--status", "failed", "--since", "1d", "--type", "test.scripted", "--list")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [
        "would reprocess 2 failed event(s)",
        *(f"stripe {evt['id']} test.scripted" for evt in failing),
    ]
    assert table_counts(db) == before


def test_dry_run_prints_a_summary_by_provider_and_type_not_a_line_per_event(reprocess, client, db):
    for _ in range(2):
        failed_once(client)
    an_old_failure(db, "evt_two_days_old")
    db.execute(
        "INSERT INTO webhook_failures (provider, event_id, event_type, error_class, payload)"
        " VALUES ('github', 'guid-1', 'push', 'Boom', '{}')"
    )
    before = table_counts(db)
    ran = reprocess("--status", "failed", "--dry-run")
    assert ran.returncode == 0, ran.stderr
    assert [line.split() for line in ran.stdout.splitlines()] == [
        ["would", "reprocess", "4", "failed", "event(s)"],
        ["3", "stripe", "test.scripted"],
        ["1", "github", "push"],
    ]
    assert table_counts(db) == before


def test_it_runs_every_failed_event_selected_oldest_first_and_says_how_each_went(reprocess, client, db):
    failing = [failed_once(client) for _ in range(3)]
    paid = samples.payment_events()[1]
    assert post_event(client, paid).status_code == 200
    an_old_failure(db, "evt_two_days_old")

    ran = reprocess("--status", "failed", "--since", "1d")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.splitlines() == [
        *(f"stripe {evt['id']} 200 scripted" for evt in failing),
        "reprocessed 3 failed event(s): 3 completed, 0 not",
    ]
    assert outcomes(db, failing) == ["scripted"] * 3
    assert table_counts(db)["fulfilments"] == 1  # the completed payment was not selected, nor run again
    assert outcomes(db, [{"id": "evt_two_days_old"}]) == [None]


def test_an_event_it_must_not_run_is_named_and_the_rest_still_run(reprocess, client, db):
    failing = failed_once(client)
    ran = reprocess("--status", "failed", modules="")
    assert ran.returncode == 1
    first, summary = ran.stdout.splitlines()
    assert first.startswith(
        f"stripe {failing['id']} refused to reprocess {failing['id']}: no handler for test.scripted"
    )
    assert summary == "reprocessed 1 failed event(s): 0 completed, 1 not"
    assert outcomes(db, [failing]) == [None]


@pytest.mark.parametrize(
    "argv, said",
    [
        ((), "error: give an event id, or --status failed (or refused) to reprocess every such event"),
        (
            ("evt_1", "--dry-run"),
            "error: give an event id, or --status failed (or refused) with its filters, not both",
        ),
        (
            ("evt_1", "--status", "failed"),
            "error: give an event id, or --status failed (or refused) with its filters, not both",
        ),
    ],
)
def test_a_reprocess_that_names_no_event_nor_a_selection_is_one_line(reprocess, argv, said):
    ran = reprocess(*argv)
    assert (ran.returncode, ran.stdout, ran.stderr.splitlines()) == (1, "", [said])
