"""`webhooks fulfil cs_...`: the return call from a shell, against a stand-in for Stripe's API."""

import json

import pytest
import structlog

from tests.support import checkout
from tests.support.stripe_api import stand_in, stand_in_env  # noqa: F401  (fixtures)
from webhooks import commands as cli
from webhooks.domains.stripe import returns


@pytest.fixture(autouse=True)
def _log_to_this_tests_stdout(monkeypatch):
    # The logger caches the stdout of its first use (logs.configure): an earlier test's, closed since.
    monkeypatch.setattr(returns, "log", structlog.get_logger(returns.__name__))


def _answer(out: str) -> dict:
    return json.loads(
        next(line for line in out.splitlines() if '"outcome"' in line and '"event"' not in line)
    )


def test_fulfil_ships_a_paid_session_once_and_prints_its_answer(stand_in_env, stand_in, db, capsys):  # noqa: F811
    obj, items = checkout.put(stand_in, count=12)
    assert cli.main(["fulfil", obj["id"]]) == 0
    first = _answer(capsys.readouterr().out)
    assert (first["outcome"], first["order_id"]) == ("fulfilled", obj["payment_intent"])
    assert [item["id"] for item in first["line_items"]] == [item["id"] for item in items]
    assert cli.main(["fulfil", obj["id"]]) == 0
    assert _answer(capsys.readouterr().out)["outcome"] == "already_fulfilled"
    assert len(checkout.order_jobs(db, obj["payment_intent"])) == 1


def test_fulfil_refused_is_one_line_and_a_non_zero_exit(stand_in_env, stand_in, monkeypatch, capsys):  # noqa: F811
    for argv, said in (
        (["fulfil", "pi_123"], "fulfil: 400 invalid_session_id"),
        (["fulfil", "cs_test_a1NoSuchSession0000000000"], "fulfil: 404 no_such_session"),
    ):
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(said), err
    monkeypatch.setenv("STRIPE_API_BASE", "http://127.0.0.1:1")
    assert cli.main(["fulfil", "cs_test_a1NoSuchSession0000000000"]) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith("fulfil: 503 stripe_unavailable: cannot reach Stripe's API") and "try again in" in err
    ), err
    monkeypatch.delenv("STRIPE_API_KEY")
    assert cli.main(["fulfil", "cs_test_a1NoSuchSession0000000000"]) == 1
    assert "STRIPE_API_KEY is not set" in capsys.readouterr().err
