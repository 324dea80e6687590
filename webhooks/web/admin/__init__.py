"""`/admin`: the operator's console behind WEBHOOK_ADMIN_TOKEN.

Without a configured token it does not exist (404), so a deployment never
exposes it by accident. The token is accepted as a Bearer header or, for a
browser, as `?token=`, which the console's own links and forms carry on.

The views are the module's functions on its blueprint, `bp`; `install`
registers it and leaves what they read (the token, the service) in the
app's extensions, where each request finds it.

Pages are GETs that change nothing: the lists, an event (its payload with
personal fields redacted, its ledger row, failures and outbox jobs) and the
count a bulk reprocess would run. Every action is a POST carrying a CSRF
token (`csrf.py`), runs the same code as its command (`events reprocess`,
`outbox requeue`), and writes one `admin_action` log line naming the
action and the event or job ids, never a payload.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from flask import Blueprint, Flask, Response, current_app, render_template, request

from webhooks import bootstrap
from webhooks.core import history, outbox
from webhooks.core.redaction import redact
from webhooks.infra import db
from webhooks.infra.config import parse_instant

from . import activity, csrf

log = structlog.get_logger(__name__)
# A blueprint, so the templates travel with this module.
bp = Blueprint("admin", __name__, template_folder="templates")


def _style_source() -> str:
    """The pages' one <style> element, as a CSP source: by its hash, so that no other style applies."""
    page = (Path(__file__).parent / "templates" / "base.html").read_text()
    match = re.search(r"<style>(.*?)</style>", page, re.S)
    if match is None:
        raise RuntimeError("base.html has no <style> element")
    return f"'sha256-{base64.b64encode(hashlib.sha256(match[1].encode()).digest()).decode()}'"


# On every page, answer and refusal alike.
_HEADERS = {
    "Cache-Control": "no-store",
    # The token can be in the URL: never send it on in a Referer.
    "Referrer-Policy": "no-referrer",
    # The answer is what its Content-Type says, never sniffed into something else.
    "X-Content-Type-Options": "nosniff",
    # No frame may hold the page (clickjacking): the old header, and CSP's own.
    "X-Frame-Options": "DENY",
    # Nothing loads or runs: the page is its HTML and its own style, and its
    # forms post back to this origin only.
    "Content-Security-Policy": "; ".join(
        [
            "default-src 'none'",
            f"style-src {_style_source()}",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    ),
}


def _presented_token() -> str:
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials:
        return credentials.strip()
    return request.args.get("token", "")


def _text(body: str, status: int, **headers: str) -> Response:
    return Response(body + "\n", status, mimetype="text/plain", headers={**_HEADERS, **headers})


def _page(template: str, status: int = 200, **context: Any) -> Response:
    # Links and forms carry the token on the way the page was reached: in the
    # query for a browser, nothing for a client that sends the header.
    query = {"token": request.args["token"]} if "token" in request.args else {}
    html = render_template(template, query=query, **context)
    return Response(html, status, mimetype="text/html", headers=_HEADERS)


def _audit(action: str, **what: Any) -> None:
    """One line per action: what was done to which ids, by whom (the admin token's holder, from where)."""
    log.info("admin_action", action=action, actor="admin_token", client=request.remote_addr, **what)


class BadFilter(ValueError):
    """A bulk reprocess's filter that means nothing (a 400)."""


class _Filter:
    """A bulk reprocess's selection as the forms carry it: provider, type, since (a span or an ISO time)."""

    def __init__(self, values: Any):
        self.provider = values.get("provider") or None
        self.type = values.get("type") or None
        since = values.get("since") or None
        try:
            self.since = parse_instant(since) if since else None
        except ValueError as exc:
            raise BadFilter(f"since: {exc}") from None

    def fields(self) -> dict[str, str]:
        """The selection fixed as it was counted: since as a moment, not a span that moves on."""
        found = {"provider": self.provider, "type": self.type, "since": self.since and self.since.isoformat()}
        return {name: value for name, value in found.items() if value}


@dataclass(frozen=True)
class _Console:
    """What the views read from the app they serve: set once by `install`."""

    token: str
    tokens: csrf.Tokens
    service: bootstrap.Service
    # The providers with a secret, and the payload keys never shown.
    enabled: list[str]
    hidden: frozenset[str]


def install(app: Flask, token: str | None, service: bootstrap.Service, enabled: list[str]) -> None:
    """The console, if `token` is set; `enabled` names the providers with a secret."""
    if not token:
        return
    hidden = service.registry.personal_fields() | frozenset(service.settings.redact_fields)
    app.extensions["webhooks.admin"] = _Console(token, csrf.Tokens(token), service, enabled, hidden)
    app.register_blueprint(bp)


def _console() -> _Console:
    console: _Console = current_app.extensions["webhooks.admin"]
    return console


def _render(template: str, status: int = 200, **context: Any) -> Response:
    return _page(template, status, csrf=_console().tokens.issue(), **context)


@bp.before_request
def authorised() -> Response | None:
    console = _console()
    if not hmac.compare_digest(_presented_token().encode(), console.token.encode()):
        return _text("admin token required", 401, **{"WWW-Authenticate": "Bearer"})
    if request.method == "POST" and not console.tokens.valid(request.form.get("csrf", "")):
        # The admin token without a page's CSRF token: a forged form, or a page left open too long.
        log.warning("admin_refused", reason="csrf", path=request.path, client=request.remote_addr)
        return _text("CSRF token missing, wrong or expired: reload the page and try again", 403)
    return None


@bp.get("/admin")
def admin() -> Response:
    console = _console()
    service = console.service
    with db.connection(service.pool.get()) as conn:
        return _render(
            "admin.html",
            providers=activity.recent(conn, service.providers, console.enabled),
            window_hours=int(activity.WINDOW.total_seconds() // 3600),
            events=history.events(conn, limit=50),
            failures=history.events(conn, status="failed", limit=20),
            depth=outbox.depth(conn),
            jobs=outbox.pending(conn, limit=50),
            providers_known=service.providers.names(),
        )


@bp.get("/admin/events/<provider>/<event_id>")
def event(provider: str, event_id: str) -> Response:
    console = _console()
    with db.connection(console.service.pool.get()) as conn:
        detail = history.event(conn, provider, event_id)
        jobs = outbox.pending(conn, None, outbox.Jobs(event=(provider, event_id)))
    if detail is None:
        return _text(f"no event {event_id} of {provider} in the ledger or its failures", 404)
    payload = redact(detail.payload, console.hidden) if detail.payload is not None else None
    return _render("event.html", event=detail, payload=history.readable(payload), jobs=jobs)


@bp.post("/admin/events/<provider>/<event_id>/reprocess")
def reprocess(provider: str, event_id: str) -> Response:
    [result] = _console().service.reprocess_each([(provider, event_id)])
    _audit("reprocess", event_ids=[event_id], provider=provider, completed=result.completed)
    return _render("done.html", 200 if result.completed else 409, action="reprocess", results=[result])


@bp.errorhandler(BadFilter)
def bad_filter(exc: BadFilter) -> Response:
    return _text(str(exc), 400)


def _selection(values: Any) -> tuple[_Filter, list[history.EventSummary]]:
    chosen = _Filter(values)
    with db.connection(_console().service.pool.get()) as conn:
        return chosen, history.to_reprocess(conn, chosen.since, chosen.type, chosen.provider)


@bp.get("/admin/reprocess")
def confirm() -> Response:
    chosen, selected = _selection(request.args)
    return _render("confirm.html", chosen=chosen, selected=selected)


@bp.post("/admin/reprocess")
def reprocess_failed() -> Response:
    chosen, selected = _selection(request.form)
    if str(len(selected)) != request.form.get("count"):
        # Failures came or went since the count was shown: show the new one.
        return _render("confirm.html", 409, chosen=chosen, selected=selected, changed=True)
    results = list(_console().service.reprocess_each((row.provider, row.event_id) for row in selected))
    _audit(
        "reprocess_failed",
        count=len(results),
        completed=sum(result.completed for result in results),
        event_ids=[result.event_id for result in results],
        **chosen.fields(),
    )
    return _render("done.html", action="reprocess failed events", results=results)


@bp.post("/admin/outbox/<int:job_id>/requeue")
def requeue(job_id: int) -> Response:
    with db.connection(_console().service.pool.get()) as conn:
        requeued = outbox.requeue(conn, outbox.Jobs(status=outbox.DEAD, ids=[job_id]))
    _audit("requeue", job_ids=requeued)
    if not requeued:
        return _text(f"job {job_id} is not a dead letter, or its key is pending again: nothing requeued", 409)
    return _render("done.html", action="requeue", requeued=requeued)
