"""The operator console as its users reach it: on its own listener, signed in, or by a script's header."""

from __future__ import annotations

import re

import pytest
from flask import Flask
from flask.testing import FlaskClient
from playwright.sync_api import Page, sync_playwright

from webhooks.web import ADMIN, LISTENER

TOKEN = "admin-token-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def on_console_listener(app: Flask) -> FlaskClient:
    """A test client whose requests come in on the console's listener (served, gunicorn's socket says)."""
    client = app.test_client()
    client.environ_base[LISTENER] = ADMIN
    return client


def signed_in(app: Flask) -> FlaskClient:
    """A browser's session: the token POSTed once, the cookie kept."""
    client = on_console_listener(app)
    answer = client.post("/admin/sign-in", data={"token": TOKEN})
    assert answer.status_code == 303, answer.get_data(as_text=True)
    return client


def csrf_of(html: str, action: str | None = None) -> str:
    """The CSRF token of the page's form for `action` (its path), or of its first form."""
    forms = re.findall(
        r'<form method="post" action="([^"]+)">\s*<input type="hidden" name="csrf" value="([^"]+)">', html
    )
    return next(token for path, token in forms if action is None or path == action)


@pytest.fixture
def browser_page(chromium):
    """A page in Debian's chromium, driven by playwright; console messages kept, for the policy's refusals."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        page.console_messages = []
        page.on("console", lambda message: page.console_messages.append(message.text))
        page.set_default_timeout(30_000)
        yield page
        browser.close()


def sign_in(page: Page, server) -> None:
    """As an operator does: the console's address, the sign-in form, the token typed in."""
    page.goto(f"{server.admin_url}/admin")
    page.fill("input[name=token]", TOKEN)
    page.click("#sign-in")
    page.wait_for_selector("#sign-out")


def no_policy_refusals(page: Page) -> None:
    refused = [text for text in page.console_messages if "Content Security Policy" in text]
    assert refused == []
