"""`GET /admin`: behind a token, sent hardened, and rendered by a real browser."""

import re
import subprocess

import pytest
import requests
from PIL import Image

from tests import conftest
from tests.conftest import post_event, scripted_event, signed_headers
from tests.support.downstream import Downstream, Worker, wait_until
from tests.support.senders import STANDARD
from webhooks.core import outbox
from webhooks.traffic import samples

TOKEN = "admin-token-for-tests-0123456789"
BACKGROUND = (0xF6, 0xF7, 0xF9)  # the page's, from admin.html


@pytest.fixture
def admin_client(make_app):
    return make_app(WEBHOOK_ADMIN_TOKEN=TOKEN).test_client()


def test_without_a_configured_token_there_is_no_admin_page(client):
    assert client.get("/admin").status_code == 404
    assert client.get("/admin?token=").status_code == 404


@pytest.mark.parametrize(
    "headers, query",
    [
        ({}, ""),
        ({}, "?token=wrong"),
        ({"Authorization": "Bearer wrong"}, ""),
        ({"Authorization": f"Basic {TOKEN}"}, ""),
    ],
)
def test_a_missing_or_wrong_token_is_refused(admin_client, headers, query):
    response = admin_client.get("/admin" + query, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"


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
    html = admin_client.get(f"/admin?token={TOKEN}").get_data(as_text=True)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def _policy(answer) -> dict[str, str]:
    directives = (d.strip().partition(" ") for d in answer.headers["Content-Security-Policy"].split(";"))
    return {name: value for name, _, value in directives}


def test_the_page_and_its_refusal_are_sent_hardened_through_the_front(front):
    server = front(WEBHOOK_ADMIN_TOKEN=TOKEN, WEB_CONCURRENCY=1)
    page = requests.get(f"{server.url}/admin?token={TOKEN}", timeout=30)
    refused = requests.get(f"{server.url}/admin", timeout=30)
    assert (page.status_code, refused.status_code) == (200, 401)
    for answer in (page, refused):
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


def _run_chromium(browser: str, tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


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
    html = admin_client.get(f"/admin?token={TOKEN}").get_data(as_text=True)
    row = re.search(rf'<tr id="job-{job_id}">(.*?)</tr>', html, re.S).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    assert cells[1] == "failed" and cells[4] == "2" and cells[5] == "none: dead letter"


def test_headless_chromium_renders_the_page_within_1280_px(chromium, front, database_url, db, tmp_path):
    """Through the served stack and its Content-Security-Policy: the style applies, nothing is refused."""
    _dead_letter_with_a_long_error(database_url, db)
    server = front(WEBHOOK_ADMIN_TOKEN=TOKEN, WEB_CONCURRENCY=1)
    events = [samples.payment_events()[1], scripted_event(fail_attempts=9)]
    for evt in events:
        body = samples.encode(evt)
        requests.post(server.url + "/webhooks/stripe", data=body, headers=signed_headers(body), timeout=30)
    url = f"{server.url}/admin?token={TOKEN}"

    dom = _run_chromium(chromium, tmp_path, "--dump-dom", "--enable-logging=stderr", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "Content Security Policy" not in dom.stderr, dom.stderr[-2000:]
    assert all(evt["id"] in dom.stdout for evt in events)
    assert "ScriptedFailure" in dom.stdout and "x" * 400 in dom.stdout

    png = tmp_path / "admin.png"
    shot = _run_chromium(chromium, tmp_path, f"--screenshot={png}", "--window-size=1280,900", url)
    assert shot.returncode == 0, shot.stderr[-2000:]
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
    client = make_app(WEBHOOK_ADMIN_TOKEN=TOKEN, GITHUB_WEBHOOK_SECRET="").test_client()
    for _ in range(2):
        body, outgoing = STANDARD.event("invoice.paid")
        STANDARD.post(client, body, outgoing)
    post_event(client, samples.payment_events()[1])
    post_event(client, scripted_event(fail_attempts=9))
    html = client.get(f"/admin?token={TOKEN}").get_data(as_text=True)
    assert _section(html, "standard") == [
        ["standard: POST /webhooks/standard, enabled"],
        ["completed", "ignored", "2"],
    ]
    assert _section(html, "stripe")[1:] == [["completed", "fulfilled", "1"], ["failed", "", "1"]]
    assert _section(html, "github") == [
        ["github: POST /webhooks/github, disabled (set GITHUB_WEBHOOK_SECRET)"],
        ["no events"],
    ]
