"""/admin as a console: an event's page, and its actions (reprocess one, reprocess failed ones, requeue).

Every action is a POST from a signed-in session with a CSRF token for that
session and action (or a script's Bearer header), runs the code its command
runs, and writes one audit line; a GET changes nothing.
"""

from __future__ import annotations

import html
import json
import re

import psycopg
import pytest
import requests

from tests.conftest import post_event, scripted_event, signed_headers, table_counts
from tests.support.admin import AUTH, TOKEN, csrf_of, on_console_listener, signed_in
from tests.support.dead_letters import dead_letter, status_of
from webhooks.core import bulk, outbox
from webhooks.traffic import samples
from webhooks.web import admin
from webhooks.web.admin import csrf
from webhooks.worker import loop


@pytest.fixture
def admin_client(make_app):
    return signed_in(make_app(WEBHOOK_ADMIN_TOKEN=TOKEN, WEBHOOK_REDACT_FIELDS="loyalty_number"))


def page(client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_data(as_text=True)


def failed_once(client) -> dict:
    """An event whose first attempt failed (500); the next attempt succeeds."""
    evt = scripted_event(fail_attempts=1)
    assert post_event(client, evt).status_code == 500
    return evt


def outcome(db, event_id: str) -> str | None:
    row = db.execute("SELECT outcome FROM webhook_events WHERE event_id = %s", [event_id]).fetchone()
    return row and row[0]


def test_the_lists_link_each_event_to_its_page(admin_client):
    evt = failed_once(admin_client)
    html = admin_client.get("/admin").get_data(as_text=True)
    link = f'href="/admin/events/stripe/{evt["id"]}"'
    # In the failed events and in the recent events.
    assert html.count(link) == 2
    detail = page(admin_client, f"/admin/events/stripe/{evt['id']}")
    assert "ScriptedFailure: scripted failure 1" in detail and "tests.support.handlers.scripted" in detail
    assert 'id="reprocess"' in detail


def test_an_unknown_event_is_404(admin_client):
    assert admin_client.get("/admin/events/stripe/evt_nothing").status_code == 404


def test_the_event_page_redacts_personal_fields_and_the_configured_ones(admin_client):
    evt = samples.payment_events()[1]
    evt["data"]["object"]["receipt_email"] = "jane.doe@example.com"
    evt["data"]["object"]["metadata"] = {
        "loyalty_number": "LN-554433",
        "order_ref": "ord_77",
        "contact": "jane.doe@example.com",
    }
    evt["data"]["object"]["description"] = "Deliver to 12 Main Street; ring +1 415-555-2671"
    evt["data"]["object"]["payment_method_details"] = {"card": {"last4": "4242", "exp_year": 2031}}
    assert post_event(admin_client, evt).status_code == 200
    html = page(admin_client, f"/admin/events/stripe/{evt['id']}")
    payload = re.search(r'<pre id="payload">(.*?)</pre>', html, re.S).group(1)
    for personal in ("jane.doe@example.com", "LN-554433", "12 Main Street", "415-555-2671", "4242", "2031"):
        assert personal not in html
    assert "Deliver to [redacted]; ring [redacted]" in payload
    assert "&#34;receipt_email&#34;: &#34;[redacted]&#34;" in payload
    assert "&#34;loyalty_number&#34;: &#34;[redacted]&#34;" in payload
    assert "ord_77" in payload and evt["data"]["object"]["id"] in payload


def test_the_event_page_lists_the_outbox_jobs_its_claim_made_and_no_other(admin_client):
    mine, other = samples.payment_events()[1], samples.payment_events()[1]
    mine["id"], other["id"] = "evt_mine_0001", "evt_other_0002"
    other["data"]["object"]["id"] = "pi_other_0002"
    for evt in (mine, other):
        assert post_event(admin_client, evt).status_code == 200
    html = page(admin_client, f"/admin/events/stripe/{mine['id']}")
    jobs = re.search(r'<table id="event-jobs">(.*?)</table>', html, re.S).group(1)
    assert f"order.fulfilled:{mine['data']['object']['id']}" in jobs
    assert "pi_other_0002" not in jobs


def session_of(client) -> str:
    with client.session_transaction("/admin") as session:
        return session["admin_session"]


@pytest.mark.parametrize(
    "forged",
    [
        lambda session, action: None,
        lambda session, action: "",
        lambda session, action: "not-a-token",
        # Signed with another admin token.
        lambda session, action: csrf.Tokens("another-admin-token").issue(session, action),
        # This session's, for another action.
        lambda session, action: csrf.Tokens(TOKEN).issue(session, "/admin/outbox/1/requeue"),
        # This action's, for another session.
        lambda session, action: csrf.Tokens(TOKEN).issue("another-session", action),
    ],
)
def test_an_action_without_its_csrf_token_is_refused_and_changes_nothing(admin_client, db, forged):
    evt = failed_once(admin_client)
    action = f"/admin/events/stripe/{evt['id']}/reprocess"
    presented = forged(session_of(admin_client), action)
    form = {} if presented is None else {"csrf": presented}
    response = admin_client.post(action, data=form)
    assert response.status_code == 403
    assert "CSRF" in response.get_data(as_text=True)
    assert outcome(db, evt["id"]) is None


def test_an_expired_csrf_token_is_refused(admin_client, db, monkeypatch):
    evt = failed_once(admin_client)
    token = csrf_of(page(admin_client, f"/admin/events/stripe/{evt['id']}"))
    monkeypatch.setattr(csrf, "MAX_AGE_S", -1)
    response = admin_client.post(f"/admin/events/stripe/{evt['id']}/reprocess", data={"csrf": token})
    assert response.status_code == 403 and outcome(db, evt["id"]) is None


def test_a_csrf_token_is_worth_nothing_after_signing_out(admin_client, db):
    evt = failed_once(admin_client)
    html = page(admin_client, f"/admin/events/stripe/{evt['id']}")
    admin = page(admin_client, "/admin")
    assert (
        admin_client.post("/admin/sign-out", data={"csrf": csrf_of(admin, "/admin/sign-out")}).status_code
        == 303
    )
    response = admin_client.post(f"/admin/events/stripe/{evt['id']}/reprocess", data={"csrf": csrf_of(html)})
    assert response.status_code == 401 and outcome(db, evt["id"]) is None


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}])
def test_an_action_without_the_admin_token_is_refused_even_with_a_csrf_token(admin_client, db, headers):
    evt = failed_once(admin_client)
    token = csrf_of(page(admin_client, f"/admin/events/stripe/{evt['id']}"))
    stranger = on_console_listener(admin_client.application)
    for path in (
        f"/admin/events/stripe/{evt['id']}/reprocess",
        "/admin/reprocess",
        "/admin/outbox/1/requeue",
    ):
        response = stranger.post(path, headers=headers, data={"csrf": token, "count": "1"})
        assert response.status_code == 401 and response.headers["WWW-Authenticate"] == "Bearer"
    assert outcome(db, evt["id"]) is None


def test_a_script_acts_with_the_bearer_header_alone(make_app, db):
    app = make_app(WEBHOOK_ADMIN_TOKEN=TOKEN)
    evt = failed_once(app.test_client())
    script = on_console_listener(app)
    response = script.post(f"/admin/events/stripe/{evt['id']}/reprocess", headers=AUTH)
    assert response.status_code == 200 and outcome(db, evt["id"]) == "scripted"


def test_a_get_changes_nothing(admin_client, db):
    evt = failed_once(admin_client)
    job_id = dead_letter(db, "test.effect:pi_dead")
    assert admin_client.get(f"/admin/events/stripe/{evt['id']}/reprocess").status_code == 405
    assert admin_client.get(f"/admin/outbox/{job_id}/requeue").status_code == 405
    page(admin_client, "/admin/reprocess")  # the count, not the action
    assert outcome(db, evt["id"]) is None
    assert outbox.pending(db)[0].status == outbox.DEAD


def test_reprocess_runs_a_failed_event_through_the_claim(admin_client, db):
    evt = failed_once(admin_client)
    token = csrf_of(page(admin_client, f"/admin/events/stripe/{evt['id']}"))
    response = admin_client.post(f"/admin/events/stripe/{evt['id']}/reprocess", data={"csrf": token})
    assert response.status_code == 200
    assert "200 scripted" in response.get_data(as_text=True)
    assert outcome(db, evt["id"]) == "scripted"


def test_reprocessing_a_completed_event_replays_its_answer_and_fulfils_nothing_again(admin_client, db):
    evt = samples.payment_events()[1]
    assert post_event(admin_client, evt).status_code == 200
    before = table_counts(db), outbox.depth(db)[0].jobs
    html = page(admin_client, f"/admin/events/stripe/{evt['id']}")
    assert 'id="reprocess"' not in html  # no button for it
    # Nothing on the page posts it; a request made by hand still meets the claim.
    response = admin_client.post(f"/admin/events/stripe/{evt['id']}/reprocess", headers=AUTH)
    assert "(already completed: stored answer)" in response.get_data(as_text=True)
    assert (table_counts(db), outbox.depth(db)[0].jobs) == before
    assert table_counts(db)["fulfilments"] == 1


def test_an_event_whose_handler_this_process_lacks_is_refused_not_closed(make_app, db):
    # The event failed in a process with the test handlers; this console has none for its type.
    failed = failed_once(make_app().test_client())
    console = signed_in(make_app(WEBHOOK_ADMIN_TOKEN=TOKEN, WEBHOOK_HANDLER_MODULES=""))
    token = csrf_of(page(console, f"/admin/events/stripe/{failed['id']}"))
    response = console.post(f"/admin/events/stripe/{failed['id']}/reprocess", data={"csrf": token})
    assert response.status_code == 409
    assert "no handler for test.scripted" in response.get_data(as_text=True)
    assert outcome(db, failed["id"]) is None


def count_shown(html: str) -> int:
    return int(re.search(r'<p id="count">(\d+) failed event', html).group(1))


def test_reprocess_failed_shows_the_count_first_then_runs_exactly_those(admin_client, db):
    failing = [failed_once(admin_client) for _ in range(3)]
    db.execute(
        "INSERT INTO webhook_failures (provider, event_id, event_type, error_class, payload)"
        " VALUES ('stripe', 'evt_other_type', 'charge.refunded', 'Boom', '{}')"
    )
    completed = scripted_event()
    assert post_event(admin_client, completed).status_code == 200

    confirm = page(admin_client, "/admin/reprocess?type=test.scripted&since=1h")
    assert count_shown(confirm) == 3
    assert all(evt["id"] in confirm for evt in failing)
    assert completed["id"] not in confirm and "evt_other_type" not in confirm
    assert [outcome(db, evt["id"]) for evt in failing] == [None] * 3  # counting ran nothing

    form = dict(re.findall(r'<input type="hidden" name="([a-z]+)" value="([^"]*)">', confirm))
    assert form["count"] == "3" and form["type"] == "test.scripted"
    job_page = started_job(admin_client, form)
    assert [outcome(db, evt["id"]) for evt in failing] == [None] * 3  # the request only started the job
    assert run_jobs(admin_client, db) == 3
    assert progress_of(page(admin_client, job_page)) == "3 of 3 done: 3 completed, 0 not."
    assert [outcome(db, evt["id"]) for evt in failing] == ["scripted"] * 3


def started_job(client, form: dict[str, str], action: str = "/admin/reprocess") -> str:
    """The confirmed form posted: a bulk job started, and the path of its progress page."""
    response = client.post(action, data=form)
    assert response.status_code == 303, response.get_data(as_text=True)
    path = response.headers["Location"]
    assert re.fullmatch(r"/admin/jobs/\d+", path), path
    return path


def run_jobs(client, db) -> int:
    """The bulk jobs run as the worker runs them; how many items ran."""
    service = client.application.extensions["webhooks.service"]
    return loop.run_bulk_jobs(service, db)


def progress_of(html: str) -> str:
    return re.search(r'<p id="progress">(.*?)</p>', html, re.S).group(1)


def test_reprocess_failed_with_a_count_that_no_longer_holds_runs_nothing_and_recounts(admin_client, db):
    first = failed_once(admin_client)
    confirm = page(admin_client, "/admin/reprocess")
    assert count_shown(confirm) == 1
    second = failed_once(admin_client)  # a new failure since the count was shown
    form = dict(re.findall(r'<input type="hidden" name="([a-z]+)" value="([^"]*)">', confirm))
    response = admin_client.post("/admin/reprocess", data=form)
    assert response.status_code == 409
    assert count_shown(response.get_data(as_text=True)) == 2
    assert outcome(db, first["id"]) is None and outcome(db, second["id"]) is None


def test_a_since_that_is_neither_a_span_nor_a_time_is_a_400(admin_client):
    response = admin_client.get("/admin/reprocess?since=yesterday")
    assert response.status_code == 400 and "since" in response.get_data(as_text=True)


def test_requeue_moves_a_dead_letter_back_to_queued_from_zero(admin_client, db):
    job_id = dead_letter(db, "test.effect:pi_dead")
    html = page(admin_client, "/admin")
    assert f'id="requeue-{job_id}"' in html
    token = csrf_of(html, f"/admin/outbox/{job_id}/requeue")
    response = admin_client.post(f"/admin/outbox/{job_id}/requeue", data={"csrf": token})
    assert response.status_code == 200
    assert status_of(db, job_id) == ("queued", 0)
    again = admin_client.post(f"/admin/outbox/{job_id}/requeue", data={"csrf": token})
    assert again.status_code == 409  # no longer a dead letter


def _audit_lines(output: str) -> list[dict]:
    lines = (json.loads(line) for line in output.splitlines() if line.startswith("{"))
    return [line for line in lines if line.get("event") == "admin_action"]


def test_each_action_writes_one_audit_line_with_ids_and_no_customer_data(gunicorn, db):
    server = gunicorn(WEB_CONCURRENCY=1, WEBHOOK_ADMIN_TOKEN=TOKEN)
    evt = scripted_event(fail_attempts=1, email="jane.doe@example.com")
    other = scripted_event(fail_attempts=1)
    for failing in (evt, other):
        body = samples.encode(failing)
        answer = requests.post(
            f"{server.url}/webhooks/stripe", data=body, headers=signed_headers(body), timeout=30
        )
        assert answer.status_code == 500
    job_id = dead_letter(db, "test.effect:pi_dead")
    session = requests.Session()
    signed = session.post(f"{server.admin_url}/admin/sign-in", data={"token": TOKEN}, timeout=30)
    assert signed.status_code == 200 and signed.url == f"{server.admin_url}/admin"
    # Each action, and the page its form is on.
    actions = {
        f"/admin/events/stripe/{evt['id']}/reprocess": f"/admin/events/stripe/{evt['id']}",
        "/admin/reprocess": "/admin/reprocess?since=1h",
        f"/admin/outbox/{job_id}/requeue": "/admin",
    }
    first = next(iter(actions))
    forged = session.post(f"{server.admin_url}{first}", data={"csrf": "forged"}, timeout=30)
    assert forged.status_code == 403
    for action, shown in actions.items():
        form = form_of(session.get(f"{server.admin_url}{shown}", timeout=30).text, action)
        answer = session.post(f"{server.admin_url}{action}", data=form, timeout=30)
        assert answer.status_code == 200, answer.text
    server.stop()
    lines = _audit_lines(server.output())
    actions = [line["action"] for line in lines]
    # The bulk reprocess is a job: its closing line, with the counts, is the worker's.
    assert actions == ["reprocess", "bulk_reprocess_started", "requeue"]
    assert lines[0]["event_ids"] == [evt["id"]] and lines[0]["completed"] is True
    # The bulk action's first line, its count and filter, before its events run.
    assert (lines[1]["count"], "since" in lines[1], "event_ids" in lines[1]) == (1, True, False)
    assert outcome(db, other["id"]) is None and isinstance(lines[1]["job_id"], int)
    assert lines[2]["job_ids"] == [job_id]
    assert all(line["actor"] == "admin_token" and line["level"] == "info" for line in lines)
    # Served alone, gunicorn's own socket names the client.
    assert {line["client"] for line in lines} == {"127.0.0.1"}
    assert "jane.doe" not in server.output()
    [refused] = [json.loads(line) for line in server.output().splitlines() if '"admin_refused"' in line]
    assert (refused["reason"], refused["level"]) == ("csrf", "warning")


def form_of(html: str, action: str) -> dict[str, str]:
    """The hidden fields of the page's form that posts to `action`."""
    form = re.search(rf'<form method="post" action="{re.escape(action)}">(.*?)</form>', html, re.S).group(1)
    return dict(re.findall(r'<input type="hidden" name="([a-z]+)" value="([^"]*)">', form))


def found_ids(html: str) -> list[str]:
    table = re.search(r'<table id="found">(.*?)</table>', html, re.S).group(1)
    return re.findall(r'href="/admin/events/[a-z]+/([^"]+)"', table)


def test_find_takes_any_id_an_operator_has(admin_client):
    paid = samples.payment_events()[1]
    order = scripted_event(customer="cus_Found0001", order_number=450789469, refund="re_Found0001")
    for evt in (paid, order):
        assert post_event(admin_client, evt).status_code == 200
    payment_id = paid["data"]["object"]["id"]
    for search, expected in [
        (paid["id"], [paid["id"]]),
        (payment_id, [paid["id"]]),
        ("cus_Found0001", [order["id"]]),
        ("re_Found0001", [order["id"]]),
        ("450789469", [order["id"]]),
        ("45078946", []),  # part of an id is not the id
        ("pi_nothing", []),
    ]:
        assert found_ids(page(admin_client, f"/admin/events?q={search}")) == expected, search


def test_find_filters_and_pages_by_keyset_without_repeating_a_row(admin_client, db, monkeypatch):
    monkeypatch.setattr("webhooks.web.admin.PAGE_SIZE", 2)
    completed = [scripted_event() for _ in range(3)]
    for evt in completed:
        assert post_event(admin_client, evt).status_code == 200
    failed = failed_once(admin_client)
    # All at one moment: the cursor's event id orders them.
    db.execute("UPDATE webhook_events SET received_at = '2026-01-02T03:04:05Z'")
    html = page(admin_client, "/admin/events?status=completed&provider=stripe&type=test.scripted")
    seen = found_ids(html)
    while 'id="next-page"' in html:
        html = page(
            admin_client, re.search(r'id="next-page" href="([^"]+)"', html).group(1).replace("&amp;", "&")
        )
        seen += found_ids(html)
    assert sorted(seen) == sorted(evt["id"] for evt in completed) and len(seen) == 3
    assert found_ids(page(admin_client, "/admin/events?status=failed")) == [failed["id"]]
    assert found_ids(page(admin_client, "/admin/events?since=2026-01-03T00:00:00Z&status=completed")) == []


@pytest.mark.parametrize(
    "query",
    ["q=a%25b", "q=" + "x" * 256, "status=lost", "provider=paypal", "since=yesterday", "after=nonsense"],
)
def test_a_search_or_filter_that_means_nothing_is_a_400(admin_client, query):
    response = admin_client.get(f"/admin/events?{query}")
    assert response.status_code == 400, query


def test_a_dead_letter_shows_no_oldest_waiting(admin_client, db):
    dead_letter(db, "test.effect:pi_dead")
    html = page(admin_client, "/admin")
    depth = re.search(r'<table id="outbox-depth">(.*?)</table>', html, re.S).group(1)
    assert "none: dead letters wait for a requeue" in depth and " s</td>" not in depth


def test_the_confirmation_and_the_outcome_show_the_count_and_the_first_page_only(
    admin_client, db, monkeypatch
):
    monkeypatch.setattr("webhooks.web.admin.PAGE_SIZE", 2)
    failing = [failed_once(admin_client) for _ in range(3)]
    confirm = page(admin_client, "/admin/reprocess")
    assert count_shown(confirm) == 3 and 'id="more">and 1 more' in confirm
    assert sum(evt["id"] in confirm for evt in failing) == 2
    job_page = started_job(admin_client, form_of(confirm, "/admin/reprocess"))
    assert progress_of(page(admin_client, job_page)) == "0 of 3 done: 0 completed, 0 not."
    # The first page of what did not complete: two of the three the handler now refuses.
    db.execute("UPDATE webhook_failures SET handler = 'elsewhere.handler'")
    assert run_jobs(admin_client, db) == 3
    done = page(admin_client, job_page)
    assert progress_of(done) == "3 of 3 done: 0 completed, 3 not."
    missed = re.search(r'<table id="missed">(.*?)</table>', done, re.S).group(1)
    assert missed.count("refused to reprocess") == 2 and "The first 2 only" in done


def test_the_bulk_audit_line_is_written_before_the_first_event_runs(admin_client, db, monkeypatch):
    failed_once(admin_client)
    service = admin_client.application.extensions["webhooks.service"]
    audited, audited_before_running = [], []
    audit, run = admin._audit, type(service).reprocess_each

    def watched(self, targets, *args):
        for result in run(self, targets, *args):
            audited_before_running.append(list(audited))
            yield result

    monkeypatch.setattr(
        admin, "_audit", lambda action, **what: (audited.append(action), audit(action, **what))
    )
    monkeypatch.setattr(type(service), "reprocess_each", watched)
    confirm = page(admin_client, "/admin/reprocess")
    started_job(admin_client, form_of(confirm, "/admin/reprocess"))
    assert (audited, audited_before_running) == (["bulk_reprocess_started"], [])
    assert run_jobs(admin_client, db) == 1
    assert audited_before_running == [["bulk_reprocess_started"]]


def test_a_bulk_job_page_shows_its_progress_and_a_cancel_stops_it_after_the_batch_in_flight(
    admin_client, db, monkeypatch
):
    failing = [failed_once(admin_client) for _ in range(3)]
    confirm = page(admin_client, "/admin/reprocess")
    job_page = started_job(admin_client, form_of(confirm, "/admin/reprocess"))
    running = page(admin_client, job_page)
    assert '<p id="job-status" class="status-running">running</p>' in running
    assert '<meta http-equiv="refresh"' in running  # it reloads itself until the job ends
    # One batch of one event, as a worker would take it.
    monkeypatch.setattr(bulk, "BATCH", 1)
    service = admin_client.application.extensions["webhooks.service"]
    with psycopg.connect(db.info.dsn, autocommit=True) as conn:
        assert len(service.run_bulk_batch(conn).ran) == 1
    assert progress_of(page(admin_client, job_page)) == "1 of 3 done: 1 completed, 0 not."
    cancel = f"{job_page}/cancel"
    response = admin_client.post(cancel, data={"csrf": csrf_of(running, cancel)})
    assert response.status_code == 303
    cancelled = page(admin_client, job_page)
    assert "status-cancelled" in cancelled and "2 not run" in cancelled
    assert '<meta http-equiv="refresh"' not in cancelled and 'id="cancel"' not in cancelled
    assert run_jobs(admin_client, db) == 0  # nothing more runs
    assert [outcome(db, evt["id"]) for evt in failing] == ["scripted", None, None]
    again = admin_client.post(cancel, data={"csrf": csrf_of(running, cancel)})
    assert again.status_code == 409


def test_dead_letters_are_requeued_in_bulk_by_kind_and_error_through_a_job(admin_client, db):
    refused = [dead_letter(db, f"test.effect:pi_refused_{n}", error="HTTP 500 from shop") for n in range(3)]
    timed_out = dead_letter(db, "test.effect:pi_timed_out", error="TimeoutError: ")
    other_kind = dead_letter(db, "test.other:pi_other", kind="test.other", error="HTTP 500 from shop")
    console = page(admin_client, "/admin")
    groups = re.search(r'<table id="dead-letter-groups">(.*?)</table>', console, re.S).group(1)
    assert re.search(r"<td>test.effect</td><td class=\"error\">HTTP 500 from shop</td><td>3</td>", groups)
    link = html.unescape(
        re.search(r'href="(/admin/requeue\?kind=test.effect&amp;error=HTTP[^"]*)"', groups).group(1)
    )
    confirm = page(admin_client, link)
    assert '<p id="count">3 dead letter(s) of test.effect' in confirm
    job_page = started_job(admin_client, form_of(confirm, "/admin/requeue"), "/admin/requeue")
    assert [status_of(db, job)[0] for job in refused] == ["failed"] * 3  # the request only started it
    assert run_jobs(admin_client, db) == 3
    assert progress_of(page(admin_client, job_page)) == "3 of 3 done: 3 requeued, 0 not."
    assert [status_of(db, job) for job in refused] == [("queued", 0)] * 3
    assert status_of(db, timed_out)[0] == status_of(db, other_kind)[0] == "failed"


def test_the_event_page_shows_the_failures_class_and_where_the_handler_raised(admin_client):
    # A handler's own error: its text may quote the payload, so it is withheld; its class and place are not.
    evt = scripted_event(fail_quoting="jane.doe@example.com")
    assert post_event(admin_client, evt).status_code == 500
    detail = page(admin_client, f"/admin/events/stripe/{evt['id']}")
    failures = re.search(r'<table id="event-failures">(.*?)</table>', detail, re.S).group(1)
    raised = re.search(r'<td class="raised-at">([^<]*)</td>', failures).group(1)
    assert re.fullmatch(r"tests\.support\.handlers:scripted:\d+", raised)
    assert "LookupError: text not shown" in failures and "jane.doe" not in failures
