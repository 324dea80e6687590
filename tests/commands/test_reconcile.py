"""`reconcile`: Stripe's objects against the local tables, drift reported, nothing written."""

import json
import time

import psycopg
import pytest

from tests.conftest import post_event
from tests.support.stripe_api import stand_in, stand_in_env  # noqa: F401  (fixtures)
from webhooks import commands as cli
from webhooks.commands import reconcile_local
from webhooks.traffic import samples

NOW = int(time.time())


def paid(stand_in, created: int = NOW - 3600) -> list[dict]:
    """One Checkout payment: its three events, its session and intent at the stand-in."""
    events = samples.payment_events(created=created)
    stand_in.add("checkout/sessions", events[0]["data"]["object"])
    stand_in.add("payment_intents", events[1]["data"]["object"])
    return events


def refund(stand_in, events: list[dict]) -> dict:
    charge = dict(events[2]["data"]["object"], amount_refunded=3000, refunded=True)
    stand_in.add(
        "refunds",
        {
            "id": samples.stripe_id("re"),
            "object": "refund",
            "amount": 3000,
            "currency": "usd",
            "charge": charge["id"],
            "payment_intent": charge["payment_intent"],
            "status": "succeeded",
            "created": NOW - 600,
        },
    )
    return samples.event("charge.refunded", charge, NOW - 600)


@pytest.fixture
def shop(stand_in, client, db):
    """Two payments recorded here, one (refunded) in full; a third Stripe has and we missed;
    one that succeeded before the window; a refund row Stripe never made."""
    kept, refunded, missed = paid(stand_in), paid(stand_in), paid(stand_in)
    older = paid(stand_in, created=NOW - 20 * 86400)
    for evt in [*kept, *refunded, refund(stand_in, refunded), *older]:
        assert post_event(client, evt).status_code == 200
    db.execute(
        "INSERT INTO refunds (refund_id, payment_id, event_id, status, status_rank)"
        " VALUES ('re_extra_local', %s, 'evt_x', 'succeeded', 2)",
        [kept[1]["data"]["object"]["id"]],
    )
    return {"missed": missed[1]["data"]["object"]["id"]}


def test_one_missed_payment_and_one_extra_refund_are_the_two_drift_rows(stand_in_env, shop, capsys):
    assert cli.main(["reconcile", "--since", "7d", "--json"]) == 1
    drift = json.loads(capsys.readouterr().out)
    assert [(d["kind"], d["drift"], d["id"]) for d in drift] == [
        ("payment", "missing_locally", shop["missed"]),
        ("refund", "missing_at_stripe", "re_extra_local"),
    ]


def test_the_drift_table_is_printed_and_exit_is_1(stand_in_env, shop, capsys):
    assert cli.main(["reconcile", "--since", "7d"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["kind", "drift", "id", "account", "detail"]
    assert [line.split()[:3] for line in lines[2:]] == [
        ["payment", "missing_locally", shop["missed"]],
        ["refund", "missing_at_stripe", "re_extra_local"],
    ]


def test_no_drift_exits_0(stand_in_env, stand_in, client, capsys):
    for evt in paid(stand_in):
        post_event(client, evt)
    capsys.readouterr()  # the deliveries' log lines
    assert cli.main(["reconcile", "--since", "7d"]) == 0
    assert capsys.readouterr().out.startswith("no drift since")


def test_a_fulfilled_payment_stripe_says_failed_is_a_state_difference(stand_in_env, stand_in, client, capsys):
    events = samples.payment_events(created=NOW - 20 * 86400)
    post_event(client, events[1])
    stand_in.add("payment_intents", dict(events[1]["data"]["object"], status="requires_payment_method"))
    capsys.readouterr()
    assert cli.main(["reconcile", "--since", "30d", "--json"]) == 1
    [drift] = json.loads(capsys.readouterr().out)
    assert (drift["drift"], drift["detail"]) == (
        "state_differs",
        "Stripe's payment_intent is requires_payment_method",
    )


def test_reconcile_reads_with_a_session_that_refuses_writes(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        reconcile_local.read_only(conn)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("DELETE FROM fulfilments")


def test_without_an_api_key_reconcile_refuses_with_one_line(stand_in_env, monkeypatch, capsys):
    monkeypatch.delenv("STRIPE_API_KEY")
    assert cli.main(["reconcile", "--since", "7d"]) == 2
    assert capsys.readouterr().err == (
        "reconcile: STRIPE_API_KEY is not set: this command reads Stripe's API\n"
    )
