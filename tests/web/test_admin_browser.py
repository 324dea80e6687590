"""The console's actions clicked in a real browser (Debian's chromium, driven by playwright), served.

Under the pages' Content-Security-Policy: a form that the policy refused to
submit, or a style it refused, would show up here as a console message.
"""

from __future__ import annotations

import pytest
import requests
from playwright.sync_api import Page, sync_playwright

from tests.conftest import scripted_event, signed_headers
from tests.support.dead_letters import dead_letter, status_of
from webhooks.traffic import samples

TOKEN = "admin-token-for-tests-0123456789"


@pytest.fixture
def browser_page(chromium):
    """A page in Debian's chromium; console messages kept, for the policy's refusals."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        page.console_messages = []
        page.on("console", lambda message: page.console_messages.append(message.text))
        page.set_default_timeout(30_000)
        yield page
        browser.close()


def deliver(server, evt: dict) -> int:
    body = samples.encode(evt)
    return requests.post(
        f"{server.url}/webhooks/stripe", data=body, headers=signed_headers(body), timeout=30
    ).status_code


def outcome(db, event_id: str) -> str | None:
    row = db.execute("SELECT outcome FROM webhook_events WHERE event_id = %s", [event_id]).fetchone()
    return row and row[0]


def no_policy_refusals(page: Page) -> None:
    refused = [text for text in page.console_messages if "Content Security Policy" in text]
    assert refused == []


@pytest.mark.system
def test_clicking_reprocess_on_a_failed_event_completes_it(browser_page, front, db):
    server = front(WEBHOOK_ADMIN_TOKEN=TOKEN, WEB_CONCURRENCY=1)
    # Its handler fails on the first attempt and succeeds on the next (tests/handlers.py).
    evt = scripted_event(fail_attempts=1)
    assert deliver(server, evt) == 500
    assert outcome(db, evt["id"]) is None

    page = browser_page
    page.goto(f"{server.url}/admin?token={TOKEN}")
    page.locator("#failures").get_by_role("link", name=evt["id"]).click()
    assert page.locator("#event-failures").inner_text().count("ScriptedFailure: scripted failure 1") == 1
    page.click("#reprocess")
    page.wait_for_selector("#summary")
    assert page.locator("#summary").inner_text() == "1 of 1 completed."
    assert "200 scripted" in page.locator("#results").inner_text()
    no_policy_refusals(page)
    assert outcome(db, evt["id"]) == "scripted"


@pytest.mark.system
def test_counting_then_reprocessing_failed_events_and_requeuing_a_dead_letter(browser_page, front, db):
    server = front(WEBHOOK_ADMIN_TOKEN=TOKEN, WEB_CONCURRENCY=1)
    failing = [scripted_event(fail_attempts=1) for _ in range(2)]
    assert [deliver(server, evt) for evt in failing] == [500, 500]
    job_id = dead_letter(db, "test.effect:pi_clicked")

    page = browser_page
    page.goto(f"{server.url}/admin?token={TOKEN}")
    page.fill("input[name=type]", "test.scripted")
    page.fill("input[name=since]", "1h")
    page.get_by_role("button", name="Count them first").click()
    assert (
        page.locator("#count")
        .inner_text()
        .startswith("2 failed event(s) of any provider, test.scripted, since")
    )
    assert [outcome(db, evt["id"]) for evt in failing] == [None, None]  # counting ran nothing
    page.click("#reprocess-all")
    page.wait_for_selector("#summary")
    assert page.locator("#summary").inner_text() == "2 of 2 completed."
    assert [outcome(db, evt["id"]) for evt in failing] == ["scripted", "scripted"]

    page.goto(f"{server.url}/admin?token={TOKEN}")
    page.click(f"#requeue-{job_id}")
    page.wait_for_selector("#requeued")
    no_policy_refusals(page)
    assert status_of(db, job_id) == ("queued", 0)
