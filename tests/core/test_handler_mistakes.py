"""A shop's handler module that could never run as meant is refused when a process starts, in one line;
a handler's PublicError text is what an operator reads where the failure is recorded."""

import contextlib
import io
import json
import subprocess
import sys
import textwrap
import uuid

import pytest

from tests import conftest
from tests.conftest import post_event
from tests.support.admin import on_console_listener
from webhooks import bootstrap
from webhooks import commands as cli
from webhooks.core.registry import HandlerMistake, Registry
from webhooks.infra.config import SettingError, Settings
from webhooks.providers import stripe
from webhooks.traffic import samples


@pytest.fixture
def shop(workers_tmp, monkeypatch):
    """Write a handler module (a fresh name each time) and return its name: in a folder the service's
    user can read, as `serve` started as root imports the modules as that user."""
    monkeypatch.syspath_prepend(str(workers_tmp))
    monkeypatch.setenv("PYTHONPATH", str(workers_tmp))  # for a process that imports them

    def write(source: str) -> str:
        name = f"shop_{uuid.uuid4().hex[:8]}"
        (workers_tmp / f"{name}.py").write_text("from webhooks import fulfilment\n" + textwrap.dedent(source))
        return name

    return write


def _started(module: str) -> None:
    """What every process does first with its settings (no database is reached)."""
    env = conftest.service_env(conftest.LOCAL_SERVER, WEBHOOK_HANDLER_MODULES=module)
    bootstrap.handlers(Settings.from_env(env))


NOT_CALLABLE = """
def register(registry, settings):
    registry.add("stripe", ["checkout.session.completed"], None)
"""
TYPO = """
@fulfilment.handles("checkout.session.complete")
def ship(conn, event):
    return fulfilment.FULFILLED
"""
LOOKUP_TYPO = """
def register(registry, settings):
    builtin = registry.handler("stripe", "checkout.session.complete")
    registry.add("stripe", ["checkout.session.completed"], builtin)
"""
MEANT = "stripe sends no event type 'checkout.session.complete'; did you mean 'checkout.session.completed'?"
LOOKUP_UNHANDLED = """
def register(registry, settings):
    registry.handler("stripe", "customer.created")
"""


@pytest.mark.parametrize(
    ("source", "line"),
    [
        (NOT_CALLABLE, "the handler of stripe checkout.session.completed is NoneType, not a function"),
        (TYPO, MEANT),
        (LOOKUP_TYPO, MEANT),
        (LOOKUP_UNHANDLED, "no handler of stripe 'customer.created' to look up: none is added"),
    ],
    ids=["not-callable", "type-typo", "lookup-typo", "lookup-unhandled"],
)
def test_a_handler_mistake_is_refused_at_start_naming_the_module(shop, source, line):
    module = shop(source)
    with pytest.raises(SettingError) as refused:
        _started(module)
    assert str(refused.value) == f"WEBHOOK_HANDLER_MODULES: {module}: {line}"


def test_serve_refuses_a_typo_in_one_line_before_anything_starts(shop, database_url, monkeypatch):
    module = shop(TYPO)
    for name, value in conftest.service_env(database_url, WEBHOOK_HANDLER_MODULES=module).items():
        monkeypatch.setenv(name, value)
    with contextlib.redirect_stderr(io.StringIO()) as err:
        assert cli.main(["serve"]) == 1
    assert err.getvalue().splitlines() == [
        f"error: WEBHOOK_HANDLER_MODULES: {module}: stripe sends no event type "
        "'checkout.session.complete'; did you mean 'checkout.session.completed'?"
    ]


def test_a_type_stripe_does_not_list_is_taken_when_named_unlisted_and_a_listed_one_always(shop):
    module = shop(
        """
        @fulfilment.handles("shop.own_type", unlisted=True)
        def own(conn, event):
            return "own"

        @fulfilment.handles("customer.created")
        def welcome(conn, event):
            return "welcomed"
        """
    )
    _started(module)


def test_every_built_in_stripe_type_is_in_the_shipped_list():
    registry = Registry()
    registry.vocabulary(stripe.NAME, stripe.EVENT_TYPES)
    with pytest.raises(HandlerMistake, match="did you mean 'invoice.paid'"):
        registry.add(stripe.NAME, ["invoice.payed"], lambda conn, event: "x")
    # bootstrap's registry held every domain to the list: it built.
    _ = bootstrap.handlers(Settings.from_env(conftest.service_env(conftest.LOCAL_SERVER)))


def test_the_shipped_list_is_the_installed_stripe_librarys():
    done = subprocess.run(
        [sys.executable, str(conftest.ROOT / ".ci" / "stripe-event-types"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert {"checkout.session.completed", "v1.payment_intent.succeeded"} <= stripe.EVENT_TYPES


PUBLIC = """
@fulfilment.handles("customer.created")
def welcome(conn, event):
    raise fulfilment.PublicError("data.object.metadata.shop_id: missing; set it when creating the customer")
"""


def test_a_handlers_public_error_is_shown_by_events_show_its_json_and_admin(
    shop, database_url, make_app, monkeypatch
):
    module = shop(PUBLIC)
    app = make_app(WEBHOOK_HANDLER_MODULES=module, WEBHOOK_ADMIN_TOKEN="t" * 32)
    evt = samples.event("customer.created", {"id": "cus_123", "object": "customer", "email": "a@example.com"})
    assert post_event(app.test_client(), evt).status_code == 500
    said = "PublicError: data.object.metadata.shop_id: missing; set it when creating the customer"
    for name, value in conftest.service_env(database_url, WEBHOOK_HANDLER_MODULES=module).items():
        monkeypatch.setenv(name, value)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert cli.main(["events", "show", evt["id"]]) == 0
    assert said in out.getvalue()
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert cli.main(["events", "show", evt["id"], "--json"]) == 0
    [failure] = json.loads(out.getvalue())["failures"]
    assert failure["error_message"] == said.removeprefix("PublicError: ")
    page = on_console_listener(app).get(
        f"/admin/events/stripe/{evt['id']}", headers={"Authorization": "Bearer " + "t" * 32}
    )
    assert page.status_code == 200 and said in page.get_data(as_text=True)
