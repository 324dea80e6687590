"""What makes every delivery fail is said at start, answered 503, and each refusal logged with its reason."""

import json
import time
import uuid

import psycopg
import pytest
import requests

from tests import conftest
from tests.conftest import Gunicorn, signed_headers
from tests.support.rows import count_rows
from webhooks.infra import migrate
from webhooks.traffic import samples


def log_lines(server: Gunicorn) -> list[dict]:
    return [json.loads(line) for line in server.output().splitlines() if line.startswith("{")]


def events_named(server: Gunicorn, name: str) -> list[dict]:
    return [line for line in log_lines(server) if line["event"] == name]


def post(server: Gunicorn, body: bytes, headers: dict) -> requests.Response:
    return requests.post(server.url + "/webhooks/stripe", data=body, headers=headers, timeout=30)


class Started(Gunicorn):
    """A gunicorn that is not expected to become ready: wait for its workers only."""

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            if self.output().count('"event":"app_ready"') >= self.workers:
                return
            time.sleep(0.1)
        raise TimeoutError(self.output())


@pytest.fixture
def unmigrated_url(server_url):
    """A schema of its own with no tables at all: the server was never migrated."""
    schema = f"t_unmigrated_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield psycopg.conninfo.make_conninfo(server_url, options=f"-c search_path={schema}")
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def started():
    servers = []

    def start(env: dict) -> Started:
        servers.append(Started({"WEB_CONCURRENCY": "1", **env}))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def test_an_unmigrated_database_is_logged_at_start_and_deliveries_get_a_retryable_503(
    unmigrated_url, started
):
    server = started(conftest.service_env(unmigrated_url))
    [logged] = events_named(server, "schema_not_current")
    assert logged["level"] == "error" and "python -m webhooks migrate" in logged["fix"]

    body = samples.encode(samples.payment_events()[1])
    answer = post(server, body, signed_headers(body))
    assert answer.status_code == 503 and answer.json() == {"error": "schema_not_current"}
    assert requests.get(server.url + "/readyz", timeout=10).json()["error"] == "schema_not_current"
    [delivery] = events_named(server, "delivery")
    assert delivery["error"] == "schema_not_current" and delivery["status"] == 503


def test_once_migrated_the_same_server_takes_deliveries(unmigrated_url, started):
    server = started(conftest.service_env(unmigrated_url))
    body = samples.encode(samples.payment_events()[1])
    assert post(server, body, signed_headers(body)).status_code == 503
    migrate.migrate(unmigrated_url)
    answer = post(server, body, signed_headers(body))
    assert answer.status_code == 200 and answer.json()["outcome"] == "fulfilled"


def test_a_missing_database_is_named_in_the_start_log(server_url, started):
    missing = psycopg.conninfo.make_conninfo(server_url, dbname=f"no_such_{uuid.uuid4().hex[:8]}")
    server = started(conftest.service_env(missing))
    [logged] = events_named(server, "database_unavailable")
    assert logged["level"] == "error" and "does not exist" in logged["error"]
    assert requests.get(server.url + "/readyz", timeout=10).status_code == 503


def test_without_a_secret_the_start_log_says_why_and_readyz_is_503(database_url, started, db):
    env = {**conftest.service_env(database_url), "STRIPE_WEBHOOK_SECRET": ""}
    server = started(env)
    [logged] = events_named(server, "webhook_secret_missing")
    assert logged["level"] == "error" and "STRIPE_WEBHOOK_SECRET" in logged["fix"]
    ready = requests.get(server.url + "/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json() == {"error": "webhook_secret_missing"}
    body = samples.encode(samples.payment_events()[1])
    answer = post(server, body, signed_headers(body))
    assert answer.status_code == 503 and answer.json() == {"error": "webhook_secret_missing"}
    assert count_rows(db, "webhook_events") == 0


def test_every_refused_delivery_is_logged_with_its_reason(gunicorn):
    server = gunicorn(WEB_CONCURRENCY=1, WEBHOOK_MAX_BODY_BYTES=4096)
    live = samples.payment_events()[1]
    live["livemode"] = True
    unsigned = samples.encode(samples.payment_events()[1])
    not_an_event = b'{"object": "list", "email": "jenny.rosen@example.com"}'
    cases = [
        (unsigned, {"Stripe-Signature": "t=1,v1=00"}, 400, "invalid_signature"),
        (not_an_event, signed_headers(not_an_event), 400, "invalid_event"),
        (samples.encode(live), signed_headers(samples.encode(live)), 400, "livemode_mismatch"),
        (b"x" * 5000, signed_headers(b"x" * 5000), 413, "body_too_large"),
    ]
    for body, headers, status, _ in cases:
        assert post(server, body, headers).status_code == status

    logged = events_named(server, "delivery")
    assert [(line["status"], line["error"]) for line in logged] == [
        (status, error) for _, _, status, error in cases
    ]
    assert all(line["outcome"] == "rejected" for line in logged)
    assert logged[0]["detail"] == "no v1 signature in Stripe-Signature is from a configured secret"
    assert logged[1]["detail"] == "body is not a Stripe event object"
    assert logged[2]["event_id"] == live["id"]
    assert "jenny.rosen" not in server.output()


def test_a_provider_without_a_secret_is_named_at_start_and_refused_at_its_url(database_url, started):
    env = {**conftest.service_env(database_url), "GITHUB_WEBHOOK_SECRET": ""}
    server = started(env)
    disabled = {line["provider"]: line for line in events_named(server, "provider_disabled")}
    assert sorted(disabled) == ["github", "shopify"]  # the test environment sets no Shopify secret
    logged = disabled["github"]
    assert "GITHUB_WEBHOOK_SECRET" in logged["fix"]
    assert logged["level"] == "warning"
    ready = requests.get(server.url + "/readyz", timeout=10).json()
    assert ready == {"status": "ready", "providers": ["standard", "stripe"]}
    answer = requests.post(
        server.url + "/webhooks/github",
        data=b"{}",
        timeout=30,
        headers={"X-GitHub-Event": "ping", "X-GitHub-Delivery": "d-1"},
    )
    assert answer.status_code == 503 and answer.json() == {"error": "webhook_secret_missing"}
