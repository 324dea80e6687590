"""`events reprocess` judges a stored refusal (422) again, by id or by filter, through its own ledger row."""

import importlib
import json
import sys
import textwrap
import uuid

import pytest

from tests import conftest
from tests.conftest import post_event
from tests.support.commands import called
from tests.support.payment_stories import jobs
from tests.support.rows import count_rows
from webhooks.core import ledger
from webhooks.core.events import InvalidFields
from webhooks.core.ingest import json_body
from webhooks.providers import stripe
from webhooks.traffic import samples

STRICT = """
from webhooks import fulfilment
from webhooks.core.events import InvalidFields


@fulfilment.handles("customer.created")
def welcome(conn, event):
    raise InvalidFields("data.object.metadata: a rule an earlier release held")
"""
LENIENT = """
from webhooks import fulfilment


@fulfilment.handles("customer.created")
def welcome(conn, event):
    conn.execute("INSERT INTO welcomed (customer_id) VALUES (%s)", [event.object["id"]])
    return "welcomed"
"""


@pytest.fixture
def shop(tmp_path, monkeypatch, database_url, db):
    """A handler module whose rules a test changes between deliveries (an upgrade), and the env to run it."""
    name = f"shop_{uuid.uuid4().hex[:8]}"
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    db.execute("CREATE TABLE welcomed (customer_id text PRIMARY KEY)")
    for key, value in conftest.service_env(database_url, WEBHOOK_HANDLER_MODULES=name).items():
        monkeypatch.setenv(key, value)

    def rules(source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        sys.modules.pop(name, None)
        importlib.invalidate_caches()
        return name

    yield rules
    sys.modules.pop(name, None)


def run(*argv) -> tuple[int, str]:
    """The command's exit status and its answer: its stdout less the JSON log lines among it."""
    done = called(*argv)
    return done.returncode, "".join(line for line in done.stdout.splitlines(True) if not line.startswith("{"))


def _customer_created() -> dict:
    return samples.event("customer.created", {"id": samples.stripe_id("cus"), "object": "customer"})


def _ledger(db, event_id: str) -> tuple:
    return db.execute(
        "SELECT id, status, response_status, outcome FROM webhook_events WHERE event_id = %s", [event_id]
    ).fetchone()


def test_a_refusal_stored_by_older_rules_is_judged_again_through_its_own_row(shop, make_app, db):
    module = shop(STRICT)
    evt = _customer_created()
    refused = post_event(make_app(WEBHOOK_HANDLER_MODULES=module).test_client(), evt)
    assert refused.status_code == 422
    ledger_id = _ledger(db, evt["id"])[0]
    shop(LENIENT)  # the upgrade
    code, out = run("events", "reprocess", evt["id"])
    assert (code, out.strip()) == (0, json_body(event_id=evt["id"], outcome="welcomed").join(["200 ", ""]))
    assert _ledger(db, evt["id"]) == (ledger_id, "completed", 200, "welcomed")  # the same row, never deleted
    assert count_rows(db, "welcomed") == 1
    # The refusal it replaced stays on record (events show), beside the new answer.
    assert db.execute("SELECT error_class FROM webhook_failures").fetchall() == [("InvalidFields",)]
    # From now on the new answer is the stored one: a redelivery and a second reprocess replay it.
    again = post_event(make_app().test_client(), evt)
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert run("events", "reprocess", evt["id"])[1].endswith("(already completed: stored answer)\n")
    assert count_rows(db, "welcomed") == 1


def test_a_refusal_the_current_rules_still_refuse_stays_as_stored(shop, make_app, db):
    module = shop(STRICT)
    evt = _customer_created()
    first = post_event(make_app(WEBHOOK_HANDLER_MODULES=module).test_client(), evt)
    before = _ledger(db, evt["id"])
    code, out = run("events", "reprocess", evt["id"])
    assert code == 1 and out.startswith(f"422 {first.get_data(as_text=True)}")
    assert _ledger(db, evt["id"]) == before
    assert count_rows(db, "welcomed") == 0


def test_every_stored_refusal_a_filter_selects_is_judged_again(shop, make_app, db):
    module = shop(STRICT)
    client = make_app(WEBHOOK_HANDLER_MODULES=module).test_client()
    refused = [_customer_created() for _ in range(2)]
    for evt in refused:
        assert post_event(client, evt).status_code == 422
    shop(LENIENT)
    code, out = run("events", "reprocess", "--status", "refused", "--dry-run")
    assert code == 0 and out.splitlines()[0] == "would reprocess 2 refused event(s)"
    code, out = run("events", "reprocess", "--status", "refused")
    assert code == 0 and out.splitlines()[-1] == "reprocessed 2 refused event(s): 2 completed, 0 not"
    assert count_rows(db, "welcomed") == 2
    assert run("events", "reprocess", "--status", "refused")[1].strip() == (
        "reprocessed 0 refused event(s): 0 completed, 0 not"
    )


def test_a_paid_intent_refused_by_an_earlier_release_ships_once_when_judged_again(
    database_url, db, monkeypatch
):
    """The refusal an earlier release stored (its rules refused a field the current ones accept)."""
    for key, value in conftest.service_env(database_url).items():
        monkeypatch.setenv(key, value)
    evt = samples.payment_events()[1]
    parsed = stripe.parse(samples.encode(evt).decode())
    refusal = InvalidFields("data.object.amount_received: a rule an earlier release held")
    stored = ledger.Stored(422, json_body(event_id=evt["id"], error=refusal.error, detail=str(refusal)))
    with db.transaction():
        ledger.claim(db, stripe.NAME, parsed, completed=(refusal.error, stored))
    with db.transaction():
        ledger.record_failure(db, stripe.NAME, parsed, refusal, None)
    code, out = run("events", "reprocess", evt["id"])
    assert code == 0 and json.loads(out.split(" ", 1)[1])["outcome"] == "fulfilled"
    assert count_rows(db, "fulfilments") == 1
    assert [kind for kind, _ in jobs(db)] == ["order.fulfilled"]
    # The job names the event that made it, as a claim's jobs do.
    assert db.execute("SELECT headers->>'event-id' FROM pgqueuer").fetchone() == (evt["id"],)
