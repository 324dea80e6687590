"""The console's sign-in and actions clicked in a real browser (Debian's chromium, by playwright), served.

Under the pages' Content-Security-Policy: a form that the policy refused to
submit, or a style it refused, would show up here as a console message.
"""

from __future__ import annotations

import pytest
import requests

from tests import conftest
from tests.conftest import scripted_event, signed_headers
from tests.support.admin import TOKEN, browser_page, no_policy_refusals, sign_in
from tests.support.dead_letters import dead_letter, status_of
from tests.support.downstream import Downstream, Worker
from webhooks.traffic import samples

__all__ = ["browser_page"]  # the fixture, imported for pytest


def deliver(server, evt: dict) -> int:
    body = samples.encode(evt)
    return requests.post(
        f"{server.url}/webhooks/stripe", data=body, headers=signed_headers(body), timeout=30
    ).status_code


def outcome(db, event_id: str) -> str | None:
    row = db.execute("SELECT outcome FROM webhook_events WHERE event_id = %s", [event_id]).fetchone()
    return row and row[0]


@pytest.mark.system
def test_clicking_reprocess_on_a_failed_event_completes_it(browser_page, front, db):
    server = front(WEBHOOK_ADMIN_TOKEN=TOKEN, WEB_CONCURRENCY=1)
    # Its handler fails on the first attempt and succeeds on the next (tests/support/handlers.py).
    evt = scripted_event(fail_attempts=1)
    assert deliver(server, evt) == 500
    assert outcome(db, evt["id"]) is None

    page = browser_page
    sign_in(page, server)
    page.locator("#failures").get_by_role("link", name=evt["id"]).click()
    assert page.locator("#event-failures").inner_text().count("ScriptedFailure: scripted failure 1") == 1
    page.click("#reprocess")
    page.wait_for_selector("#summary")
    assert page.locator("#summary").inner_text() == "1 of 1 completed."
    assert "200 scripted" in page.locator("#results").inner_text()
    no_policy_refusals(page)
    assert outcome(db, evt["id"]) == "scripted"


@pytest.fixture
def worker(database_url):
    """`python -m webhooks worker` beside the served app: it runs the bulk jobs the console starts."""
    downstream = Downstream()
    started = Worker(conftest.service_env(database_url, WEBHOOK_OUTBOX_URL=downstream.url))
    yield started
    started.proc.terminate()
    started.proc.wait(10)
    downstream.close()


@pytest.mark.system
def test_counting_then_reprocessing_failed_events_and_requeuing_a_dead_letter(
    browser_page, front, db, worker
):
    server = front(WEBHOOK_ADMIN_TOKEN=TOKEN, WEB_CONCURRENCY=1)
    failing = [scripted_event(fail_attempts=1) for _ in range(2)]
    assert [deliver(server, evt) for evt in failing] == [500, 500]
    job_id = dead_letter(db, "test.effect:pi_clicked")

    page = browser_page
    sign_in(page, server)
    page.fill("#count-failed input[name=type]", "test.scripted")
    page.fill("#count-failed input[name=since]", "1h")
    page.get_by_role("button", name="Count them first").click()
    assert (
        page.locator("#count")
        .inner_text()
        .startswith("2 failed event(s) of any provider, test.scripted, since")
    )
    assert [outcome(db, evt["id"]) for evt in failing] == [None, None]  # counting ran nothing
    page.click("#reprocess-all")
    page.wait_for_selector("#progress")
    # The worker runs the job; its page reloads itself until the job has finished.
    page.wait_for_selector("#job-status.status-finished", timeout=60_000)
    assert page.locator("#progress").inner_text() == "2 of 2 done: 2 completed, 0 not."
    assert [outcome(db, evt["id"]) for evt in failing] == ["scripted", "scripted"]
    worker.proc.terminate()  # so the requeued job waits to be seen, rather than be delivered at once
    worker.proc.wait(10)

    page.goto(f"{server.admin_url}/admin")
    page.click(f"#requeue-{job_id}")
    page.wait_for_selector("#requeued")
    no_policy_refusals(page)
    assert status_of(db, job_id) == ("queued", 0)


@pytest.mark.system
def test_a_bulk_job_is_watched_and_cancelled_from_its_page(browser_page, front, db):
    server = front(WEBHOOK_ADMIN_TOKEN=TOKEN, WEB_CONCURRENCY=1)
    failing = [scripted_event(fail_attempts=1) for _ in range(3)]
    assert [deliver(server, evt) for evt in failing] == [500] * 3

    page = browser_page
    sign_in(page, server)
    page.get_by_role("button", name="Count them first").click()
    page.click("#reprocess-all")
    # No worker is running: the job waits, its page says so and offers the cancel.
    assert page.locator("#job-status").inner_text() == "running"
    assert page.locator("#progress").inner_text() == "0 of 3 done: 0 completed, 0 not."
    page.click("#cancel")
    page.wait_for_selector("#job-status.status-cancelled")
    assert "3 not run" in page.locator("#ended").inner_text()
    page.goto(f"{server.admin_url}/admin")
    assert "cancelled" in page.locator("#bulk-jobs").inner_text()
    no_policy_refusals(page)
    assert [outcome(db, evt["id"]) for evt in failing] == [None] * 3


@pytest.mark.system
def test_signing_in_takes_the_token_by_post_once_and_a_wrong_one_is_refused(browser_page, front, db):
    server = front(WEBHOOK_ADMIN_TOKEN=TOKEN, WEB_CONCURRENCY=1)
    page = browser_page
    page.goto(f"{server.admin_url}/admin")
    page.fill("input[name=token]", "wrong-token")
    page.click("#sign-in")
    assert page.locator("#refused").inner_text() == "wrong token"
    page.fill("input[name=token]", TOKEN)
    page.click("#sign-in")
    page.wait_for_selector("#sign-out")
    assert page.url == f"{server.admin_url}/admin" and TOKEN not in page.url
    [cookie] = page.context.cookies()
    assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (
        "webhooks_admin",
        True,
        "Strict",
        "/admin",
    )
    assert cookie["expires"] > 0  # not a browser-session cookie: it expires
    # The public listener has no console, signed in or not.
    assert requests.get(f"{server.url}/admin", timeout=30).status_code == 404
    # What an operator sees of a customer: nothing personal, in the payload's keys or its free text.
    paid = samples.payment_events()[1]
    paid["data"]["object"]["description"] = "Deliver to 12 Main Street; ring +1 415-555-2671"
    paid["data"]["object"]["metadata"] = {"contact": "jane.doe@example.com"}
    assert deliver(server, paid) == 200
    page.goto(f"{server.admin_url}/admin/events/stripe/{paid['id']}")
    shown = page.locator("#payload").inner_text()
    assert "Deliver to [redacted]; ring [redacted]" in shown and '"contact": "[redacted]"' in shown
    assert "jane.doe" not in page.content()
    # Found by the payment's id, which only its payload holds.
    page.goto(f"{server.admin_url}/admin")
    page.fill("#find input[name=q]", paid["data"]["object"]["id"])
    page.click("#find-events")
    assert page.locator("#found").get_by_role("link").all_inner_texts() == [paid["id"]]
    page.goto(f"{server.admin_url}/admin")
    page.click("#sign-out")
    page.wait_for_selector("#sign-in")
    no_policy_refusals(page)
