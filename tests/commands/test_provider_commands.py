"""`events`, `replay` and `loadtest` with `--provider`, against a served stack for each provider."""

import pytest

from tests.commands.test_ledger_cli import run  # noqa: F401  (the in-process `python -m webhooks` fixture)
from tests.commands.test_loadtest import _run
from tests.support.senders import GITHUB, SENDERS, STANDARD
from tests.support.shopify import SHOPIFY_SECRET


@pytest.fixture
def server(gunicorn):
    return gunicorn(WEB_CONCURRENCY=2)


def _command(server, database_url, sender, *args):
    return _run(
        database_url, "webhooks", *args, "--provider", sender.provider, "--url", server.url + sender.path
    )


@pytest.mark.parametrize("sender", SENDERS, ids=lambda s: s.provider)
def test_loadtest_as_each_provider_passes_its_audit(server, database_url, db, sender):
    done = _command(server, database_url, sender, "loadtest", "-n", "40", "-k", "4", "-c", "8")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("PASS") >= 3 and "FAIL" not in done.stdout
    rows = db.execute("SELECT provider, status, count(*) FROM webhook_events GROUP BY 1, 2").fetchall()
    assert rows == [(sender.provider, "completed", 40)]


def test_loadtest_whose_every_delivery_is_refused_names_the_cause_in_one_line(server, database_url):
    done = _command(
        server,
        database_url,
        STANDARD,
        "loadtest",
        "-n",
        "3",
        "-k",
        "1",
        "--secret",
        STANDARD.foreign_secret,
        "--retry-budget",
        "1",
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: loadtest: no delivery to {server.url}/webhooks/standard was accepted: "
        "400 invalid_signature (3 times); the service's STANDARD_WEBHOOKS_SECRET is not the one signed with "
        "(--secret, STANDARD_WEBHOOKS_SECRET)"
    ]


@pytest.mark.parametrize("sender", SENDERS, ids=lambda s: s.provider)
def test_replay_from_the_ledger_is_signed_as_the_provider_signs(server, database_url, client, sender):
    body, outgoing = sender.event("issues")
    assert sender.post(client, body, outgoing).status_code == 200
    done = _command(server, database_url, sender, "replay", "--id", outgoing.event_id, "--times", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:3] for line in lines] == [[outgoing.event_id, f"#{n}:", "200"] for n in (1, 2)]
    assert all("(Idempotent-Replayed)" in line for line in lines)


def test_replay_refuses_files_for_another_provider(server, database_url, tmp_path):
    path = tmp_path / "event.json"
    path.write_text("{}")
    done = _command(server, database_url, GITHUB, "replay", str(path))
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "error: replay: files are Stripe events; select github's from the ledger (--id, --type, --since)"
    )


@pytest.fixture
def failed_once(make_app, db):
    """A GitHub ping that failed (the handler's table missing), then one that completed."""
    db.execute("CREATE TABLE provider_effects (provider text, event_id text)")
    client = make_app().test_client()
    body, outgoing = GITHUB.event("test.effect")
    db.execute("ALTER TABLE provider_effects RENAME TO gone")
    assert GITHUB.post(client, body, outgoing).status_code == 500
    db.execute("ALTER TABLE gone RENAME TO provider_effects")
    return outgoing


def test_reprocess_runs_the_providers_handler_from_the_stored_body(run, failed_once, db):  # noqa: F811
    code, out = run("events", "reprocess", failed_once.event_id, "--provider", "github")
    assert code == 0, out
    assert out.splitlines()[-1] == f'200 {{"event_id":"{failed_once.event_id}","outcome":"effected"}}'
    assert db.execute("SELECT provider, event_id FROM provider_effects").fetchall() == [
        ("github", failed_once.event_id)
    ]
    code, out = run("events", "list", "--provider", "github")
    assert failed_once.event_id in out and "effected" in out
    assert run("events", "list", "--provider", "standard")[1].count("\n") == 1  # the header only
    code, out = run("events", "show", failed_once.event_id, "--provider", "github")
    assert code == 0 and "octocat/Hello-World" in out


def test_reprocess_of_a_standard_event_reads_its_id_and_type(run, client, db):  # noqa: F811
    db.execute("CREATE TABLE provider_effects (provider text, event_id text)")
    body, outgoing = STANDARD.event("test.effect")
    STANDARD.post(client, body, outgoing)
    code, out = run("events", "reprocess", outgoing.event_id, "--provider", "standard")
    assert code == 0 and "(already completed: stored answer)" in out


def test_loadtest_as_shopify_through_a_served_stack_passes_its_audit(gunicorn, database_url, db):
    server = gunicorn(WEB_CONCURRENCY=2, SHOPIFY_WEBHOOK_SECRET=SHOPIFY_SECRET)
    done = _run(
        database_url,
        "webhooks",
        "loadtest",
        "--provider",
        "shopify",
        "-n",
        "40",
        "-k",
        "4",
        "-c",
        "8",
        "--secret",
        SHOPIFY_SECRET,
        "--url",
        server.url + "/webhooks/shopify",
    )
    assert done.returncode == 0, done.stderr
    assert "each order fulfilled once" in done.stdout and "FAIL" not in done.stdout
    fulfilled = db.execute("SELECT count(*), count(DISTINCT (shop, order_id)) FROM shopify_fulfilments")
    orders = fulfilled.fetchone()
    assert orders[0] == orders[1] > 0
