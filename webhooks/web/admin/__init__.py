"""`GET /admin`: a read-only operator page behind WEBHOOK_ADMIN_TOKEN.

Without a configured token the page does not exist (404), so a deployment
never exposes it by accident. The token is accepted as a Bearer header or,
for a browser, as `?token=`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from pathlib import Path

from flask import Blueprint, Flask, Response, render_template, request

from webhooks.core import history, outbox
from webhooks.infra import db
from webhooks.providers import Providers

from . import activity


def _style_source() -> str:
    """The page's one <style> element, as a CSP source: by its hash, so that no other style applies."""
    page = (Path(__file__).parent / "templates" / "admin.html").read_text()
    match = re.search(r"<style>(.*?)</style>", page, re.S)
    if match is None:
        raise RuntimeError("admin.html has no <style> element")
    return f"'sha256-{base64.b64encode(hashlib.sha256(match[1].encode()).digest()).decode()}'"


# On the page and on its refusal alike.
_HEADERS = {
    "Cache-Control": "no-store",
    # The token can be in the URL: never send it on in a Referer.
    "Referrer-Policy": "no-referrer",
    # The answer is what its Content-Type says, never sniffed into something else.
    "X-Content-Type-Options": "nosniff",
    # No frame may hold the page (clickjacking): the old header, and CSP's own.
    "X-Frame-Options": "DENY",
    # Nothing loads, runs or submits: the page is its HTML and its own style.
    "Content-Security-Policy": "; ".join(
        [
            "default-src 'none'",
            f"style-src {_style_source()}",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    ),
}


def _presented_token() -> str:
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials:
        return credentials.strip()
    return request.args.get("token", "")


def install(app: Flask, token: str | None, pool, providers: Providers, enabled: list[str]) -> None:
    """The page, if `token` is set; `enabled` names the providers with a secret."""
    if not token:
        return
    # A blueprint, so the page's template travels with this module.
    page = Blueprint("admin", __name__, template_folder="templates")

    @page.get("/admin")
    def admin() -> Response:
        if not hmac.compare_digest(_presented_token().encode(), token.encode()):
            return Response(
                "admin token required\n",
                401,
                mimetype="text/plain",
                headers={**_HEADERS, "WWW-Authenticate": "Bearer"},
            )
        with db.connection(pool.get()) as conn:
            html = render_template(
                "admin.html",
                providers=activity.recent(conn, providers, enabled),
                window_hours=int(activity.WINDOW.total_seconds() // 3600),
                events=history.events(conn, limit=50),
                failures=history.events(conn, status="failed", limit=20),
                depth=outbox.depth(conn),
                jobs=outbox.pending(conn, limit=50),
            )
        return Response(html, mimetype="text/html", headers=_HEADERS)

    app.register_blueprint(page)
