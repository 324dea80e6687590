"""`GET /admin`: read-only, behind a token, and rendered by a real browser."""
import shutil
import subprocess

import pytest
import requests
from PIL import Image

from tests.conftest import post_event, scripted_event, signed_headers
from webhooks.ops import samples

TOKEN = "admin-token-for-tests-0123456789"


@pytest.fixture
def admin_client(make_app):
    return make_app(WEBHOOK_ADMIN_TOKEN=TOKEN).test_client()


def test_without_a_configured_token_there_is_no_admin_page(client):
    assert client.get("/admin").status_code == 404
    assert client.get("/admin?token=").status_code == 404


@pytest.mark.parametrize("headers, query", [
    ({}, ""),
    ({}, "?token=wrong"),
    ({"Authorization": "Bearer wrong"}, ""),
    ({"Authorization": f"Basic {TOKEN}"}, ""),
])
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


def _chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    browser = shutil.which("chromium")
    assert browser, "Debian's chromium package is needed (.ci/run installs it)"
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True, text=True, timeout=120,
    )


def test_headless_chromium_renders_the_page_with_its_events(gunicorn, tmp_path):
    server = gunicorn(WEBHOOK_ADMIN_TOKEN=TOKEN, WEB_CONCURRENCY=1)
    events = [samples.payment_events()[1], scripted_event(fail_attempts=9)]
    for evt in events:
        body = samples.encode(evt)
        requests.post(server.url + "/webhooks/stripe", data=body, headers=signed_headers(body), timeout=30)
    url = f"{server.url}/admin?token={TOKEN}"

    dom = _chromium(tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert all(evt["id"] in dom.stdout for evt in events)
    assert "ScriptedFailure" in dom.stdout

    png = tmp_path / "admin.png"
    shot = _chromium(tmp_path, f"--screenshot={png}", "--window-size=1200,800", url)
    assert shot.returncode == 0, shot.stderr[-2000:]
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (1200, 800)
        pixels = image.convert("RGB")
        colours = pixels.getcolors(maxcolors=1 << 16) or []
        # Text, table headers and status colours, not one blank background.
        assert len(colours) > 50
        dark = sum(count for count, (r, g, b) in colours if r + g + b < 200)
        assert dark > 2000
