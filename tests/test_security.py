"""Security properties checked on the code and on a full run's logs."""

from __future__ import annotations

import ast
import os
import re
import runpy
import threading
import time
from pathlib import Path

import gunicorn.config
import stripe._webhook
from psycopg.conninfo import make_conninfo

from tests.conftest import OTHER_SECRET, ROOT, SECRET, scripted_event, terminate_backends
from tests.support.hostile import CATALOGUE, send, signed
from tests.support.provider import Provider
from webhooks.providers import stripe as stripe_wire
from webhooks.traffic import samples

# A password the server never asks for (trust auth), so it can only reach
# the logs through the service.
DB_PASSWORD = "pg-password-never-logged"


def test_signatures_are_compared_by_the_stripe_librarys_constant_time_compare(monkeypatch):
    compared = []

    def spy(expected, given):
        compared.append(expected)
        return real(expected, given)

    real = stripe._webhook.secure_compare
    monkeypatch.setattr(stripe._webhook, "secure_compare", spy)
    body = samples.encode(samples.payment_events()[1])
    stripe_wire.verify(body, stripe_wire.sign(body, OTHER_SECRET), [SECRET, OTHER_SECRET], 300)
    assert len(compared) == 2  # one digest per configured secret, each through the library


def test_gunicorn_limits_request_line_header_count_and_header_size(server_url):
    # The config file sets variables for the workers it starts (the metrics
    # folder, the pool size); in this process they would leak into later tests.
    saved = dict(os.environ)
    try:
        # A database of the tests' own: as root, the embedded one must have been installed first.
        os.environ["DATABASE_URL"] = server_url
        conf = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
        conf["on_exit"](None)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    defaults = gunicorn.config.Config()
    # 0 would mean unlimited; above gunicorn's defaults would be looser than stock.
    for name in ("limit_request_line", "limit_request_fields", "limit_request_field_size"):
        assert 0 < conf[name] <= defaults.settings[name].default, name


def test_flask_caps_the_body_it_reads(make_app):
    app = make_app(WEBHOOK_MAX_BODY_BYTES=1000)
    assert app.config["MAX_CONTENT_LENGTH"] == 1001  # one byte of slack to see the overflow


def _is_fixed(node: ast.expr, fixed: set[str]) -> bool:
    """Text that only ever holds SQL written in the source: literals and what is built from them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.Name):
        return node.id in fixed
    if isinstance(node, ast.JoinedStr):  # an f-string splicing other fixed SQL
        return all(isinstance(part, ast.Constant) or _is_fixed(part.value, fixed) for part in node.values)
    if isinstance(node, ast.Dict):  # a table of statements
        return all(_is_fixed(value, fixed) for value in node.values)
    if isinstance(node, ast.Subscript):
        return _is_fixed(node.value, fixed)
    # psycopg.sql composes identifiers and literals with the server's quoting.
    return isinstance(node, ast.Call) and ast.unparse(node.func).startswith(("sql.", "SQL("))


def _fixed_names(tree: ast.Module) -> set[str]:
    """Module names bound to fixed SQL, and loop names drawn from a table of it."""
    fixed: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and _is_fixed(node.value, fixed):
            fixed.update(t.id for t in node.targets if isinstance(t, ast.Name))
    for node in ast.walk(tree):
        if not (isinstance(node, ast.For) and isinstance(node.iter, ast.Call)):
            continue
        method = node.iter.func
        if not (isinstance(method, ast.Attribute) and _is_fixed(method.value, fixed)):
            continue
        if method.attr == "items" and isinstance(node.target, ast.Tuple):
            value = node.target.elts[-1]
            if isinstance(value, ast.Name):
                fixed.add(value.id)
        elif method.attr == "values" and isinstance(node.target, ast.Name):
            fixed.add(node.target.id)
    return fixed


# Statements that are fixed but not visibly so where they run, each reviewed.
_EXECUTES_CODE = {
    # Migration files and the rule definitions beside the Python are
    # reviewed code, run as they are written.
    ("migrate.py", "path.read_text()"),
    ("migrate.py", "text"),
    # Handed on by a caller, which passes a module constant of its own.
    ("ledger.py", "query"),
    ("db.py", "query"),
    ("access.py", "claim_sql"),
    ("scope.py", "query"),
    # pgqueuer's own statements, passed through to its driver unchanged.
    ("loop.py", "query"),
    # A table of statements made from a fixed tuple of column names.
    ("orders.py", "_MARK[fact]"),
    # An f-string of this module's text and core.history's STATUS, a fixed expression.
    ("activity.py", "_COUNTS"),
    # Composed with psycopg.sql from this module's own constants.
    ("reconcile_local.py", "_query(_PRESENT, rows)"),
    ("reconcile_local.py", "_query(_RECENT, rows)"),
    # Retention's keyset batch, composed with psycopg.sql from its own table of names.
    ("prune.py", "query"),
}


def test_service_sql_is_fixed_text_with_parameters():
    """Every execute() in webhooks/ gets a literal, a module constant or psycopg.sql.

    Values go only as parameters.
    """
    built = []
    for path in sorted((ROOT / "webhooks").rglob("*.py")):
        tree = ast.parse(path.read_text())
        constants = _fixed_names(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in ("execute", "executemany") or not node.args:
                continue
            arg = node.args[0]
            if not _is_fixed(arg, constants) and (path.name, ast.unparse(arg)) not in _EXECUTES_CODE:
                built.append(f"{path.name}:{node.lineno}: {ast.unparse(arg)}")
    assert not built, built


def _terminate_once_held(db, app_name: str, hold_file: Path) -> None:
    deadline = time.monotonic() + 20
    while not hold_file.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    terminate_backends(db, app_name)


def test_a_full_run_at_debug_level_logs_no_secret_signature_or_password(
    gunicorn, database_url, db, tmp_path, workers_tmp
):
    app_name = f"security-{tmp_path.name[-12:]}"
    server = gunicorn(
        DATABASE_URL=make_conninfo(database_url, application_name=app_name, password=DB_PASSWORD),
        LOG_LEVEL="DEBUG",
        GUNICORN_LOG_LEVEL="debug",
        WEBHOOK_STATEMENT_TIMEOUT_MS=300,
    )
    sent = []
    for case in CATALOGUE:  # every refusal path
        request = case.make(samples.payment_events()[1])
        sent.append(request.headers.get("Stripe-Signature", ""))
        send(server.port, request)
    paid = samples.payment_events()[1]
    for evt in (
        paid,  # fulfilled
        paid,  # replayed
        scripted_event(abort=True),  # 500 with a traceback
        scripted_event(statement_s=2),  # 503: statement timeout
    ):
        request = signed(samples.encode(evt))
        sent.append(request.headers["Stripe-Signature"])
        send(server.port, request)
    # 503 for a connection terminated mid-claim, then fulfilled on the retry.
    hold_file = workers_tmp / "hold"
    killer = threading.Thread(target=_terminate_once_held, args=(db, app_name, hold_file))
    killer.start()
    lost = Provider(server.url, budget_s=20).deliver(
        scripted_event(sleep_s=2, hold_file=str(hold_file), payment_id="pi_lost_connection")
    )
    killer.join()
    server.stop()

    output = server.output()
    assert (lost.attempts[0].status, lost.attempts[-1].status) == (503, 200)
    assert '"status":500' in output and '"exception":{"type":"ScriptedFailure"' in output
    digests = {m for header in sent for m in re.findall(r"[0-9a-f]{64}", header)}
    leaked = [s for s in ("whsec_", SECRET, OTHER_SECRET, DB_PASSWORD, "v1=", *digests) if s in output]
    assert not leaked, leaked
