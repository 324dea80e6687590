"""A failure's text names fields and rules, never a payload value: no log line, `webhook_failures` row,
`events show` or /admin page quotes the data it tripped on (issues 24 and 32).

PostgreSQL puts the offending values in its error text: a unique violation's
`DETAIL:  Key (email)=(...) already exists.`, a JSON cast's `CONTEXT:  JSON
data, line 1: ...`, the value in `invalid input syntax for type ...`. A
handler's own exception can quote the payload too (`f"no account for
{email}"`), so only a PublicError's text is shown.
"""

import psycopg

from tests.commands.test_operability import json_lines
from tests.conftest import migrated_before, post_event, scripted_event
from tests.support.admin import on_console_listener
from tests.support.commands import called
from tests.support.stories import fixture
from webhooks.infra import migrate
from webhooks.infra.logs import public_message
from webhooks.traffic import samples

EMAIL = "jenny.rosen@example.com"
TOKEN = "admin-token-for-tests-0123456789"


def _leaks(text: str) -> bool:
    return EMAIL in text or "DETAIL" in text or "Key (email)" in text


def test_a_handlers_unique_violation_on_a_customers_email_is_recorded_without_the_email(
    make_app, db, database_url
):
    db.execute("CREATE TABLE shop_customers (email text UNIQUE)")
    db.execute("INSERT INTO shop_customers (email) VALUES (%s)", [EMAIL])
    admin = on_console_listener(make_app(WEBHOOK_ADMIN_TOKEN=TOKEN))
    evt = scripted_event(clash_email=EMAIL)
    assert post_event(admin, evt).status_code == 500

    [(error_class, message)] = db.execute(
        "SELECT error_class, error_message FROM webhook_failures"
    ).fetchall()
    assert error_class == "UniqueViolation"
    assert message == "SQLSTATE 23505 constraint shop_customers_email_key table shop_customers"

    env = dict(DATABASE_URL=database_url, WEBHOOK_HANDLER_MODULES="tests.support.handlers")
    reprocessed = called("events", "reprocess", evt["id"], **env)
    *logged, answer = reprocessed.stdout.splitlines()
    assert answer == '500 {"error":"fulfilment_failed"}'
    [failure] = json_lines("\n".join(logged))
    assert failure["exception"]["message"].startswith("SQLSTATE 23505")
    assert not _leaks(reprocessed.stdout + reprocessed.stderr)

    shown = called("events", "show", evt["id"], **env).stdout
    attempts, _payload = shown.split("\npayload\n")  # the payload is what was signed, shown as it came
    assert "UniqueViolation: SQLSTATE 23505" in attempts and not _leaks(attempts)

    page = admin.get("/admin", headers={"Authorization": f"Bearer {TOKEN}"}).get_data(as_text=True)
    assert evt["id"] in page and "UniqueViolation" in page and not _leaks(page)


def test_a_cast_error_quoting_a_value_is_described_by_its_sqlstate_alone(db):
    try:
        db.execute("SELECT %s::bigint", [EMAIL])
    except Exception as exc:  # noqa: BLE001  (whatever psycopg raises is what is described)
        assert EMAIL in str(exc)  # invalid input syntax for type bigint: "jenny..."
        assert public_message(exc) == "SQLSTATE 22P02"
    else:
        raise AssertionError("PostgreSQL took an email for a number")


def test_failures_recorded_before_keep_their_first_line_and_lose_the_detail(server_url, tmp_path):
    with migrated_before(server_url, "0025", tmp_path) as url, psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO webhook_failures (provider, event_id, error_class, error_message)"
            " VALUES ('stripe', 'evt_1', 'UniqueViolation', %s), ('stripe', 'evt_2', 'ScriptedFailure', %s)",
            [
                f'duplicate key value violates unique constraint "shop_customers_email_key"\n'
                f"DETAIL:  Key (email)=({EMAIL}) already exists.",
                "scripted failure 1",
            ],
        )
        migrate.migrate(url)
        assert conn.execute("SELECT error_message FROM webhook_failures ORDER BY id").fetchall() == [
            ('duplicate key value violates unique constraint "shop_customers_email_key"',),
            ("scripted failure 1",),
        ]


def _admin_page(admin) -> str:
    return admin.get("/admin", headers={"Authorization": f"Bearer {TOKEN}"}).get_data(as_text=True)


def test_a_handlers_error_quoting_a_customers_email_is_recorded_by_its_class_and_place_alone(
    make_app, db, database_url
):
    admin = on_console_listener(make_app(WEBHOOK_ADMIN_TOKEN=TOKEN))
    evt = scripted_event(fail_quoting=EMAIL)
    response = post_event(admin, evt)
    assert response.status_code == 500 and EMAIL not in response.get_data(as_text=True)

    [(error_class, message)] = db.execute(
        "SELECT error_class, error_message FROM webhook_failures"
    ).fetchall()
    assert error_class == "LookupError"
    assert message.startswith("text not shown, it may quote the payload: raised at handlers.py:")

    env = dict(DATABASE_URL=database_url, WEBHOOK_HANDLER_MODULES="tests.support.handlers")
    reprocessed = called("events", "reprocess", evt["id"], **env)
    [failure] = json_lines(reprocessed.stdout.splitlines()[0])
    assert failure["exception"]["type"] == "LookupError"
    assert not _leaks(reprocessed.stdout + reprocessed.stderr)
    attempts, _payload = called("events", "show", evt["id"], **env).stdout.split("\npayload\n")
    assert attempts.count("LookupError: text not shown") == 2 and not _leaks(attempts)
    page = _admin_page(admin)
    assert evt["id"] in page and "LookupError" in page and not _leaks(page)


def test_a_dispute_status_stripe_added_later_is_refused_naming_the_field_not_the_word(client, db):
    word = "jenny_rosen_example_com"  # whatever the word, it is a payload value
    evt = samples.event("charge.dispute.updated", {**fixture("charge.dispute.created")["data"]["object"]})
    evt["data"]["object"]["status"] = word
    response = post_event(client, evt)
    assert (response.status_code, response.get_json()["error"]) == (500, "unknown_value")
    [(error_class, message)] = db.execute(
        "SELECT error_class, error_message FROM webhook_failures"
    ).fetchall()
    assert error_class == "UnknownValue" and message.startswith("data.object.status: ")
    assert word not in message + response.get_data(as_text=True)


def test_only_a_public_errors_text_is_shown():
    assert public_message(ValueError(f"no account for {EMAIL}")) == "text not shown, it may quote the payload"
    assert public_message(
        UnicodeEncodeError("utf-8", "caf\ud800", 3, 4, "surrogates not allowed")
    ).startswith("text not shown")
    assert public_message(OSError(111, "Connection refused")) == "[Errno 111] Connection refused"
