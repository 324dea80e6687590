"""`GET /admin`: behind a token, sent hardened, and rendered by a real browser."""

import json
import re
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import requests
from PIL import Image

from tests import conftest
from tests.conftest import post_event, scripted_event, signed_headers
from tests.support.admin import AUTH, TOKEN, browser_page, no_policy_refusals, on_console_listener, sign_in
from tests.support.downstream import Downstream, Worker, wait_until
from tests.support.rows import count_rows
from tests.support.senders import STANDARD
from webhooks.core import outbox
from webhooks.traffic import samples
from webhooks.web.admin import sign_in as sign_ins

__all__ = ["browser_page"]  # the fixture, imported for pytest

BACKGROUND = (0xF6, 0xF7, 0xF9)  # the page's, from admin.html


@pytest.fixture
def admin_client(make_app):
    return on_console_listener(make_app(WEBHOOK_ADMIN_TOKEN=TOKEN))


def test_without_a_configured_token_there_is_no_admin_page(app):
    for client in (app.test_client(), on_console_listener(app)):
        assert client.get("/admin", headers=AUTH).status_code == 404
        assert client.get("/admin/sign-in").status_code == 404


def test_the_public_listener_has_no_console(make_app):
    public = make_app(WEBHOOK_ADMIN_TOKEN=TOKEN).test_client()
    for path in ("/admin", "/admin/sign-in", "/admin/events/stripe/evt_x"):
        assert public.get(path, headers=AUTH).status_code == 404
    assert public.post("/admin/sign-in", data={"token": TOKEN}).status_code == 404


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}],
)
def test_a_missing_or_wrong_token_is_refused(admin_client, headers):
    response = admin_client.get("/admin", headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"


def test_a_token_in_the_query_opens_nothing(admin_client):
    response = admin_client.get(f"/admin?token={TOKEN}")
    assert response.status_code == 401 and 'name="token"' in response.get_data(as_text=True)
    assert admin_client.get(f"/admin/sign-in?token={TOKEN}").headers.get("Set-Cookie") is None


def _cookie(response) -> dict[str, str]:
    [header] = response.headers.getlist("Set-Cookie")
    parts = [part.strip().partition("=") for part in header.split(";")]
    return {name.lower(): value for name, _, value in parts}


def test_signing_in_by_post_sets_a_strict_http_only_expiring_cookie(admin_client):
    response = admin_client.post("/admin/sign-in", data={"token": TOKEN})
    assert (response.status_code, response.headers["Location"]) == (303, "/admin")
    cookie = _cookie(response)
    assert {"webhooks_admin", "httponly", "expires"} <= cookie.keys()
    assert (cookie["samesite"], cookie["path"]) == ("Strict", "/admin")
    assert "secure" not in cookie  # plain HTTP: a Secure cookie would never come back
    assert admin_client.get("/admin").status_code == 200


def test_over_tls_the_cookie_is_secure(admin_client):
    behind_tls = admin_client.post(
        "/admin/sign-in", data={"token": TOKEN}, headers={"X-Forwarded-Proto": "https"}
    )
    direct_tls = admin_client.post("/admin/sign-in", data={"token": TOKEN}, base_url="https://localhost")
    assert "secure" in _cookie(behind_tls) and "secure" in _cookie(direct_tls)


def test_the_session_expires(admin_client, monkeypatch):
    admin_client.post("/admin/sign-in", data={"token": TOKEN})
    app = admin_client.application
    app.permanent_session_lifetime = timedelta(seconds=-1)
    assert admin_client.get("/admin").status_code == 401


def test_failed_sign_ins_are_limited_and_counted_in_metrics(admin_client, db):
    for _ in range(sign_ins.FAILURES):
        refused = admin_client.post("/admin/sign-in", data={"token": "guess"})
        assert refused.status_code == 401 and "wrong token" in refused.get_data(as_text=True)
    # The right token too, unchecked, until the window has passed.
    limited = admin_client.post("/admin/sign-in", data={"token": TOKEN})
    assert limited.status_code == 429 and limited.headers["Retry-After"] == "60"
    assert "Set-Cookie" not in limited.headers
    exposition = admin_client.application.extensions["webhooks.metrics"].exposition().decode()
    assert f'webhook_admin_sign_in_failures_total{{reason="wrong_token"}} {sign_ins.FAILURES}.0' in exposition
    assert 'webhook_admin_sign_in_failures_total{reason="rate_limited"} 1.0' in exposition
    db.execute("UPDATE admin_sign_in_failures SET failed_at = failed_at - interval '61 seconds'")
    assert admin_client.post("/admin/sign-in", data={"token": TOKEN}).status_code == 303
    assert count_rows(db, "admin_sign_in_failures") == 0  # the old ones forgotten


def test_sign_ins_from_many_workers_at_once_are_limited_exactly(admin_client, db):
    app = admin_client.application
    with ThreadPoolExecutor(8) as pool:
        answers = list(
            pool.map(
                lambda _: (
                    on_console_listener(app).post("/admin/sign-in", data={"token": "guess"}).status_code
                ),
                range(sign_ins.FAILURES + 6),
            )
        )
    assert sorted(answers) == [401] * sign_ins.FAILURES + [429] * 6


def test_the_page_lists_events_failures_and_the_outbox(admin_client, db):
    paid = samples.payment_events()[1]
    failing = scripted_event(fail_attempts=9)
    post_event(admin_client, paid)
    post_event(admin_client, failing)
    response = admin_client.get("/admin", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == "no-store"
    html = response.get_data(as_text=True)
    assert paid["id"] in html and failing["id"] in html
    assert "ScriptedFailure: scripted failure 1" in html
    assert f"order.fulfilled:{paid['data']['object']['id']}" in html  # its outbox job


def test_stored_text_is_escaped_not_rendered(admin_client, db):
    db.execute(
        "INSERT INTO webhook_failures (provider, event_id, event_type, error_class, error_message)"
        " VALUES ('stripe', 'evt_x', 'test.scripted', 'Boom', '<script>alert(1)</script>')"
    )
    html = admin_client.get("/admin", headers=AUTH).get_data(as_text=True)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def _policy(answer) -> dict[str, str]:
    directives = (d.strip().partition(" ") for d in answer.headers["Content-Security-Policy"].split(";"))
    return {name: value for name, _, value in directives}


def test_the_console_is_served_on_its_own_listener_hardened_through_the_front(front):
    server = front(WEBHOOK_ADMIN_TOKEN=TOKEN, WEB_CONCURRENCY=1)
    console = server.admin_url
    page = requests.get(f"{console}/admin", headers=AUTH, timeout=30)
    refused = requests.get(f"{console}/admin", timeout=30)
    missing = requests.get(f"{console}/admin/nothing-here", headers=AUTH, timeout=30)
    wrong_method = requests.delete(f"{console}/admin", headers=AUTH, timeout=30)
    statuses = [answer.status_code for answer in (page, refused, missing, wrong_method)]
    assert statuses == [200, 401, 404, 405]
    for answer in (page, refused, missing, wrong_method):
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.headers["Referrer-Policy"] == "no-referrer"
        assert answer.headers["X-Frame-Options"] == "DENY"
        assert answer.headers["Cache-Control"] == "no-store"
        policy = _policy(answer)
        assert re.fullmatch(r"'sha256-[A-Za-z0-9+/]{43}='", policy.pop("style-src"))
        assert policy == {
            "default-src": "'none'",
            "base-uri": "'none'",
            "form-action": "'self'",
            "frame-ancestors": "'none'",
        }
    # Neither listener serves the other's paths.
    assert requests.get(f"{server.url}/admin", headers=AUTH, timeout=30).status_code == 404
    assert requests.get(f"{console}/readyz", timeout=30).status_code == 404
    # Behind serve's nginx, the client is the front's peer, not an empty socket address.
    assert requests.post(f"{console}/admin/sign-in", data={"token": "guess"}, timeout=30).status_code == 401
    server.stop()
    [refused_line] = [json.loads(line) for line in server.output().splitlines() if '"admin_refused"' in line]
    assert (refused_line["reason"], refused_line["client"]) == ("wrong_token", "127.0.0.1")


def _dead_letter_with_a_long_error(database_url, db) -> int:
    """A job the real worker gave up on after 2 tries, its error naming a 400-character URL."""
    downstream = Downstream(status=500)
    with db.transaction():
        outbox.enqueue(db, "test.effect", {"payment_id": "pi_x"}, "test.effect:pi_x")
    env = conftest.service_env(
        database_url,
        WEBHOOK_OUTBOX_URL=f"{downstream.url}/{'x' * 400}",
        WEBHOOK_OUTBOX_MAX_ATTEMPTS=2,
        WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS=0.05,
        WEBHOOK_OUTBOX_POLL_SECONDS=1,
    )
    worker = Worker(env)
    try:
        wait_until(lambda: any(j.status == outbox.DEAD for j in outbox.pending(db)), 30, "a dead letter")
    finally:
        worker.stop()
        downstream.close()
    assert '"attempt":2,"error"' in worker.output() and '"event":"outbox_dead"' in worker.output()
    return outbox.pending(db)[0].id


def test_a_dead_letter_shows_the_workers_count_and_no_next_attempt(admin_client, database_url, db):
    job_id = _dead_letter_with_a_long_error(database_url, db)
    html = admin_client.get("/admin", headers=AUTH).get_data(as_text=True)
    row = re.search(rf'<tr id="job-{job_id}">(.*?)</tr>', html, re.S).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    assert cells[1] == "failed" and cells[4] == "2" and cells[5] == "none: dead letter"


def test_headless_chromium_renders_the_page_within_1280_px(browser_page, front, database_url, db, tmp_path):
    """Through the served stack and its Content-Security-Policy: the style applies, nothing is refused."""
    _dead_letter_with_a_long_error(database_url, db)
    server = front(WEBHOOK_ADMIN_TOKEN=TOKEN, WEB_CONCURRENCY=1)
    events = [samples.payment_events()[1], scripted_event(fail_attempts=9)]
    for evt in events:
        body = samples.encode(evt)
        requests.post(server.url + "/webhooks/stripe", data=body, headers=signed_headers(body), timeout=30)

    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 900})
    sign_in(page, server)
    dom = page.content()
    no_policy_refusals(page)
    assert all(evt["id"] in dom for evt in events)
    assert "ScriptedFailure" in dom and "x" * 400 in dom

    png = tmp_path / "admin.png"
    page.screenshot(path=str(png))
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (1280, 900)
        pixels = image.convert("RGB")
        colours = pixels.getcolors(maxcolors=1 << 16) or []
        # Text, table headers and status colours, not one blank background.
        assert len(colours) > 50
        dark = sum(count for count, (r, g, b) in colours if r + g + b < 200)
        assert dark > 2000
        # The tables are white on a grey page with a 24 px margin: a table
        # pushed wider than the window by the long error reaches the right edge.
        edge = {pixels.getpixel((x, y)) for x in range(1264, 1280) for y in range(900)}
        assert (255, 255, 255) not in edge, "a table overflows the 1280 px window"
        assert BACKGROUND in edge


def _section(html: str, provider: str) -> list[list[str]]:
    table = re.search(rf'<table id="provider-{provider}" class="provider">(.*?)</table>', html, re.S).group(1)
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    return [
        [" ".join(c.split()) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)] for row in rows
    ]


def test_each_provider_has_a_section_with_its_recent_counts(make_app, db):
    client = on_console_listener(make_app(WEBHOOK_ADMIN_TOKEN=TOKEN, GITHUB_WEBHOOK_SECRET=""))
    for _ in range(2):
        body, outgoing = STANDARD.event("invoice.paid")
        STANDARD.post(client, body, outgoing)
    post_event(client, samples.payment_events()[1])
    post_event(client, scripted_event(fail_attempts=9))
    html = client.get("/admin", headers=AUTH).get_data(as_text=True)
    assert _section(html, "standard") == [
        ["standard: POST /webhooks/standard, enabled"],
        ["completed", "ignored", "2"],
    ]
    assert _section(html, "stripe")[1:] == [["completed", "fulfilled", "1"], ["failed", "", "1"]]
    assert _section(html, "github") == [
        ["github: POST /webhooks/github, disabled (set GITHUB_WEBHOOK_SECRET)"],
        ["no events"],
    ]
