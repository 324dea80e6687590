"""`POST /stripe/checkout/sessions/<id>/fulfil`: the customer's return, against a stand-in for Stripe's API.

Stripe's "Fulfill orders" guide (https://docs.stripe.com/checkout/fulfillment):
the success page's trigger retrieves the session with `line_items` expanded
and fulfils it once; the webhook stays the one that must not be missed.
"""

import socket
import time

import pytest
import requests
import structlog
from prometheus_client.parser import text_string_to_metric_families
from werkzeug.test import Client

from tests.conftest import load_json
from tests.support import checkout
from tests.support.rows import count_rows
from tests.support.stripe_api import api_env, stand_in  # noqa: F401  (fixture)
from webhooks.domains.stripe import returns as return_rules

TOKEN = "fulfil-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def returns(make_app, stand_in):  # noqa: F811
    """A test client of an app with the return call on, pointed at the stand-in."""

    def make(**extra):
        env = {**api_env(stand_in), "WEBHOOK_FULFIL_TOKEN": TOKEN, **extra}
        return make_app(**env).test_client()

    return make


def call(client, session_id: str, headers=AUTH, **query):
    return client.post(f"/stripe/checkout/sessions/{session_id}/fulfil", headers=headers, query_string=query)


def test_the_route_does_not_exist_without_its_token_setting(make_app, stand_in):  # noqa: F811
    client = make_app(**api_env(stand_in)).test_client()
    obj, _ = checkout.put(stand_in)
    assert call(client, obj["id"]).status_code == 404
    assert stand_in.calls("/v1/checkout") == []


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": TOKEN}]
)
def test_a_call_without_the_bearer_token_is_refused_before_stripe_is_asked(returns, stand_in, headers):  # noqa: F811
    obj, _ = checkout.put(stand_in)
    response = call(returns(), obj["id"], headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert stand_in.calls("/v1/checkout") == []


def test_a_paid_session_ships_once_with_every_page_of_its_line_items(returns, stand_in, db):  # noqa: F811
    # 150 items: the expanded first handful, then two pages of the list (100, then 40).
    obj, items = checkout.put(stand_in, count=150)
    client = returns()
    response = call(client, obj["id"])
    assert response.status_code == 200, response.data
    body = load_json(response)
    assert body["outcome"] == "fulfilled"
    assert body["order_id"] == obj["payment_intent"]
    assert body["session_id"] == obj["id"]
    assert [item["id"] for item in body["line_items"]] == [item["id"] for item in items]
    first = body["line_items"][0]
    assert first == {
        "id": items[0]["id"],
        "price_id": items[0]["price"]["id"],
        "product_id": items[0]["price"]["product"]["id"],
        "product_name": "T-shirt 0",
        "quantity": 2,
        "unit_amount": 1099,
        "amount_total": 2198,
        "currency": "usd",
        "price_metadata": {"size": "M", "n": "0"},
        "product_metadata": {"sku": "TS-0", "warehouse": "north"},
    }
    pages = stand_in.calls(f"/v1/checkout/sessions/{obj['id']}/line_items")
    assert [page.query.get("starting_after") for page in pages] == [items[9]["id"], items[109]["id"]]
    [retrieved] = [r for r in stand_in.calls(f"/v1/checkout/sessions/{obj['id']}") if r not in pages]
    assert any(
        v == "line_items.data.price.product" for k, v in retrieved.query.items() if k.startswith("expand")
    )
    assert len(checkout.order_jobs(db, obj["payment_intent"])) == 1

    again = call(client, obj["id"])
    assert load_json(again)["outcome"] == "already_fulfilled"
    assert load_json(again)["order_id"] == obj["payment_intent"]
    assert len(checkout.order_jobs(db, obj["payment_intent"])) == 1


@pytest.mark.parametrize(
    ("session_id", "error"),
    [
        ("pi_3RkA4dNx4KqR2eZv5col1e3f", "invalid_session_id"),
        ("cs_test_a%27%3B--", "invalid_session_id"),
        ("cs_test_" + "a" * 4000, "invalid_session_id"),
        ("cs_test_\u00e9t\u00e9", "invalid_session_id"),
    ],
)
def test_an_id_that_is_not_a_checkout_session_is_a_400_and_stripe_is_not_asked(
    returns,
    stand_in,
    session_id,
    error,  # noqa: F811
):
    response = call(returns(), session_id)
    assert response.status_code == 400
    assert load_json(response)["error"] == error
    assert stand_in.requests == []


def test_a_session_stripe_does_not_know_is_a_404(returns, stand_in):  # noqa: F811
    response = call(returns(), "cs_test_a1NoSuchSession0000000000")
    assert response.status_code == 404
    assert load_json(response)["error"] == "no_such_session"


def test_a_session_of_the_other_mode_is_a_400(returns, stand_in, db):  # noqa: F811
    live_id = call(returns(), "cs_live_a1sQ4DmTmtR44Nr1uKtUYKbSV7NYsq4B")
    assert (live_id.status_code, load_json(live_id)["error"]) == (400, "livemode_mismatch")
    assert stand_in.requests == []
    # An id that does not say its mode, for which Stripe's answer does.
    obj, _ = checkout.put(stand_in, id="cs_a1sQ4DmTmtR44Nr1uKtUYKbSV7NYsq4B", livemode=True)
    response = call(returns(), obj["id"])
    assert (response.status_code, load_json(response)["error"]) == (400, "livemode_mismatch")
    assert checkout.order_jobs(db, obj["payment_intent"]) == []


def test_an_account_the_service_does_not_read_is_a_400_and_a_configured_one_is_asked(returns, stand_in):  # noqa: F811
    obj, _ = checkout.put(stand_in, account="acct_1Connected")
    client = returns(STRIPE_CONNECT_ACCOUNTS="acct_1Connected")
    unknown = call(client, obj["id"], account="acct_1Other")
    assert (unknown.status_code, load_json(unknown)["error"]) == (400, "unknown_account")
    response = call(client, obj["id"], account="acct_1Connected")
    assert load_json(response)["outcome"] == "fulfilled"
    assert {r.headers.get("stripe-account") for r in stand_in.calls("/v1/checkout")} == {"acct_1Connected"}
    # The platform's key alone does not find it: Stripe's 404.
    assert call(client, obj["id"]).status_code == 404


@pytest.mark.parametrize("status", ["open", "expired"])
def test_a_session_not_completed_is_a_409_and_nothing_ships(returns, stand_in, db, status):  # noqa: F811
    obj, _ = checkout.put(stand_in, status=status, payment_status="unpaid")
    response = call(returns(), obj["id"])
    assert (response.status_code, load_json(response)["error"]) == (409, "session_not_complete")
    assert checkout.order_jobs(db, obj["payment_intent"]) == []


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_stripe_unreachable_failing_or_slow_is_a_503_with_retry_after(returns, stand_in, db):  # noqa: F811
    obj, _ = checkout.put(stand_in)
    down = returns(STRIPE_API_BASE=_closed_port())
    stand_in.fail(lambda path, query: path.endswith("/line_items"), times=1, status=500)
    stand_in.stall(
        lambda path, query: "expand[0]" in query and stand_in.calls("/v1/checkout/sessions/") != []
    )
    slow = returns(WEBHOOK_FULFIL_STRIPE_TIMEOUT_SECONDS="0.5")
    for client in (down, slow):
        started = time.monotonic()
        response = call(client, obj["id"])
        assert response.status_code == 503, response.data
        assert load_json(response)["error"] == "stripe_unavailable"
        assert int(response.headers["Retry-After"]) > 0
        assert time.monotonic() - started < 5
    assert checkout.order_jobs(db, obj["payment_intent"]) == []


def test_no_customer_data_reaches_the_log(returns, stand_in, capsys, monkeypatch):  # noqa: F811
    # The logger caches the stdout of its first use (logs.configure): maybe an earlier test's.
    monkeypatch.setattr(return_rules, "log", structlog.get_logger(return_rules.__name__))
    obj, _ = checkout.put(stand_in)
    assert obj["customer_details"]["email"]
    client = returns()
    capsys.readouterr()
    assert call(client, obj["id"]).status_code == 200
    out, err = capsys.readouterr()
    assert "checkout_return" in out + err
    for value in (
        obj["customer_details"]["email"],
        obj["customer_details"]["name"],
        obj["client_reference_id"],
    ):
        assert value not in out + err


# A limit per client over time, timed: no other test runs beside it (`alone`).
@pytest.mark.alone
def test_the_front_limits_each_clients_return_calls_and_says_when_to_come_back(front, stand_in):  # noqa: F811
    server = front(
        WEBHOOK_FULFIL_TOKEN=TOKEN, WEBHOOK_FULFIL_RATE_PER_MINUTE=1, WEB_CONCURRENCY=1, **api_env(stand_in)
    )
    url = f"{server.url}/stripe/checkout/sessions/cs_test_a1NoSuchSession0000000000/fulfil"
    answers = [requests.post(url, headers=AUTH, timeout=10) for _ in range(4)]
    # One a minute, beyond a burst of one: the first two reach the app (Stripe knows no such session).
    assert [a.status_code for a in answers] == [404, 404, 429, 429]
    assert answers[-1].json() == {"error": "too_many_requests"}
    assert int(answers[-1].headers["Retry-After"]) > 0
    assert len(stand_in.calls("/v1/checkout")) == 2
    # Deliveries are not the return call's: they are not limited by it.
    assert requests.get(f"{server.url}/healthz", timeout=10).status_code == 200


@pytest.mark.parametrize("mode", ["subscription", "setup"])
def test_a_session_that_takes_no_one_off_payment_is_not_an_order(returns, stand_in, db, mode):  # noqa: F811
    obj, _ = checkout.put(stand_in, mode=mode, payment_intent=None)
    answer = load_json(call(returns(), obj["id"]))
    assert (answer["outcome"], answer["order_id"]) == ("not_an_order", None)
    assert count_rows(db, "pgqueuer") == 0


def test_each_answer_is_counted_by_outcome_or_error_and_status(returns, stand_in):  # noqa: F811
    client = returns()
    obj, _ = checkout.put(stand_in)
    call(client, obj["id"])
    call(client, obj["id"])
    call(client, "pi_123")
    call(client, obj["id"], headers={})
    page = (
        Client(client.application.extensions["webhooks.metrics"].wsgi).get("/metrics").get_data(as_text=True)
    )
    counted = {
        (s.labels["outcome"], s.labels["status"]): s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name == "webhook_checkout_returns_total"
    }
    assert counted == {
        ("fulfilled", "200"): 1,
        ("already_fulfilled", "200"): 1,
        ("invalid_session_id", "400"): 1,
        ("token_required", "401"): 1,
    }
