"""`python -m webhooks events list|show|reprocess` against a real ledger."""

import contextlib
import io
import json
import re

import pytest

from tests import conftest
from tests.conftest import load_json, post_event, scripted_event, table_counts
from webhooks import commands as cli
from webhooks.traffic import samples


@pytest.fixture
def run(database_url, monkeypatch):
    for name, value in conftest.service_env(database_url).items():
        monkeypatch.setenv(name, value)

    def run_command(*argv) -> tuple[int, str]:
        # Not capsys: structlog keeps the stream it was configured with, and
        # capsys closes its stream after the test.
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = cli.main(list(argv))
        return code, out.getvalue()

    return run_command


@pytest.fixture
def ledger(client):
    """One paid event completed, one scripted event that failed twice."""
    paid = samples.payment_events()[1]
    failing = scripted_event(fail_attempts=5)
    assert post_event(client, paid).status_code == 200
    for _ in range(2):
        assert post_event(client, failing).status_code == 500
    return paid, failing


def test_list_shows_completed_and_failed_events_newest_first(run, ledger):
    paid, failing = ledger
    code, out = run("events", "list")
    assert code == 0
    lines = out.splitlines()[1:]
    assert [line.split()[1] for line in lines] == [failing["id"], paid["id"]]
    assert "failed" in lines[0].split() and lines[0].split()[-1] == "2"
    assert "completed" in lines[1].split() and "fulfilled" in lines[1].split()


def test_list_filters_by_status_type_and_since(run, ledger, db):
    paid, failing = ledger
    assert failing["id"] in run("events", "list", "--status", "failed")[1]
    assert paid["id"] not in run("events", "list", "--status", "failed")[1]
    by_type = run("events", "list", "--type", "payment_intent.succeeded")[1]
    assert paid["id"] in by_type and failing["id"] not in by_type
    db.execute("UPDATE webhook_events SET received_at = now() - interval '2 hours'")
    recent = run("events", "list", "--since", "1h")[1]
    assert failing["id"] in recent and paid["id"] not in recent


def test_show_prints_outcome_attempts_failures_and_payload(run, ledger):
    paid, failing = ledger
    code, out = run("events", "show", failing["id"])
    assert code == 0
    assert "status    failed" in out
    assert out.count("ScriptedFailure: scripted failure") == 2
    assert "attempts  2 (2 failed)" in out
    assert f'"id": "{failing["id"]}"' in out
    code, out = run("events", "show", paid["id"])
    assert "outcome   fulfilled" in out and "attempts  1 (0 failed)" in out


def test_show_names_each_failures_class_and_where_the_handler_raised_it(run, client):
    # Its text may quote the customer, so it is withheld; its class and place are not.
    evt = scripted_event(fail_quoting="jane.doe@example.com")
    assert post_event(client, evt).status_code == 500
    code, out = run("events", "show", evt["id"])
    assert code == 0 and "  LookupError: text not shown" in out
    [raised] = [line.strip() for line in out.splitlines() if line.strip().startswith("raised at ")]
    assert re.fullmatch(r"raised at tests\.support\.handlers:scripted:\d+", raised)
    code, out = run("events", "show", evt["id"], "--json")
    [failure] = json.loads(out)["failures"]
    place = raised.removeprefix("raised at ")
    assert (failure["error_class"], failure["raised_at"]) == ("LookupError", place)
    assert "jane.doe" not in out


def test_show_of_an_unknown_event_fails(run):
    assert run("events", "show", "evt_unknown")[0] == 1


def test_reprocess_runs_a_failed_event_through_the_claim_once(run, client, db):
    # Fails twice, then fulfils: the provider gave up, the operator re-runs it.
    evt = scripted_event(fail_attempts=2, payment_id="pi_reprocessed")
    for _ in range(2):
        assert post_event(client, evt).status_code == 500
    assert table_counts(db)["fulfilments"] == 0

    code, out = run("events", "reprocess", evt["id"])
    assert code == 0
    assert out.startswith('200 {"event_id"') and '"outcome":"fulfilled"' in out
    assert table_counts(db) == {"webhook_events": 1, "webhook_failures": 2, "fulfilments": 1}

    code, out = run("events", "reprocess", evt["id"])  # twice: the claim holds
    assert code == 0 and "already completed" in out
    assert table_counts(db)["fulfilments"] == 1
    redelivered = post_event(client, evt)  # and so does the provider's own retry
    assert redelivered.headers["Idempotent-Replayed"] == "true"
    assert load_json(redelivered)["outcome"] == "fulfilled"


def test_reprocess_of_a_still_failing_event_records_another_failure(run, ledger, db):
    _, failing = ledger
    code, out = run("events", "reprocess", failing["id"])
    # The failure is logged (JSON, on stdout too); the answer is the last line.
    assert code == 1 and out.splitlines()[-1] == '500 {"error":"fulfilment_failed"}'
    assert table_counts(db)["webhook_failures"] == 3


def _personal_payment() -> dict:
    """A paid event carrying what Stripe can carry of a person: receipt email, card, free text."""
    evt = samples.payment_events()[1]
    obj = evt["data"]["object"]
    obj["receipt_email"] = "jane.doe@example.com"
    obj["description"] = "Deliver to 12 Main Street; call +1 415-555-2671"
    obj["metadata"] = {"contact": "jane.doe@example.com", "order_ref": "ord_77"}
    obj["payment_method_details"] = {"card": {"brand": "visa", "last4": "4242", "exp_month": 8}}
    return evt


PERSONAL = ("jane.doe@example.com", "12 Main Street", "415-555-2671", "4242")


def test_show_and_its_json_redact_personal_data_by_default(run, client):
    evt = _personal_payment()
    assert post_event(client, evt).status_code == 200
    for argv in (("events", "show", evt["id"]), ("events", "show", evt["id"], "--json")):
        code, out = run(*argv)
        assert code == 0 and evt["id"] in out and "ord_77" in out
        assert [text for text in PERSONAL if text in out] == []


def test_show_personal_shows_it_and_logs_who_asked_for_which_event(run, client):
    evt = _personal_payment()
    assert post_event(client, evt).status_code == 200
    with contextlib.redirect_stderr(io.StringIO()) as err:
        code, out = run("events", "show", evt["id"], "--json", "--show-personal")
    assert code == 0 and all(text in out for text in PERSONAL)
    assert json.loads(out)["event_id"] == evt["id"]  # stdout stays one JSON document
    [audit] = [json.loads(line) for line in err.getvalue().splitlines()]
    assert (audit["event"], audit["event_id"], audit["command"]) == (
        "personal_data_shown",
        evt["id"],
        "events show",
    )
    assert audit["user"] and audit["level"] == "warning"


def test_list_searches_by_an_id_in_the_payload_and_pages_by_keyset(run, client, db):
    paid = samples.payment_events()[1]
    others = [scripted_event() for _ in range(3)]
    for evt in (paid, *others):
        assert post_event(client, evt).status_code == 200
    code, out = run("events", "list", "--search", paid["data"]["object"]["id"])
    assert code == 0 and [line.split()[1] for line in out.splitlines()[1:]] == [paid["id"]]
    db.execute("UPDATE webhook_events SET received_at = '2026-01-02T03:04:05Z'")
    seen, argv = [], ["events", "list", "--type", "test.scripted", "--limit", "2"]
    while True:
        code, out = run(*argv)
        *rows, last = out.splitlines()[1:]
        if not last.startswith("next page: "):
            seen += [line.split()[1] for line in (*rows, last)]
            break
        seen += [line.split()[1] for line in rows]
        argv = [*argv[:6], "--after", last.split("'")[1]]
    assert sorted(seen) == sorted(evt["id"] for evt in others)


@pytest.mark.parametrize(
    "argv",
    [("--search", "pi_%"), ("--after", "yesterday"), ("--limit", "0"), ("--limit", "501")],
)
def test_list_refuses_a_search_a_cursor_or_a_page_that_means_nothing(run, argv):
    with contextlib.redirect_stderr(io.StringIO()) as err:
        code, out = run("events", "list", *argv)
    assert code != 0 and out == "" and len(err.getvalue().strip().splitlines()) == 1
