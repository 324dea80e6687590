"""Test-only handlers, registered when WEBHOOK_HANDLER_MODULES names this module.

`test.scripted` events carry their behaviour in data.object:
  sleep_s          hold the claim this long, idle in transaction, before anything else
  statement_s      hold it this long inside one statement (pg_sleep)
  hold_file        hold only in the attempt that creates this file, which writes
                   "<worker pid> <backend pid>" into it: a test learns who holds the
                   claim, and the provider's retry runs at full speed
  abort            run a failing statement first, leaving the transaction aborted
  fail_attempts    raise until this many failures of the event are recorded
  clash_payment_id insert a fulfilment of this payment without ON CONFLICT: a
                   handler bug that violates the unique index on every attempt
  clash_email      insert it into the test's `shop_customers` (email UNIQUE) without
                   ON CONFLICT: a handler whose unique violation quotes a customer's email
  fail_quoting     raise a LookupError whose text quotes this value (a customer's email)
  refuse_after_write  fulfil this payment id, then find the object's fields wrong (InvalidFields)
  payment_id       then fulfil this payment
"""

import os
import time

import psycopg

from tests.support.rows import count_rows
from webhooks import fulfilment
from webhooks.core import registry
from webhooks.core.events import InvalidFields


class ScriptedFailure(fulfilment.PublicError, RuntimeError):
    """Its text names no payload value, so it is shown where the failure is recorded."""


def _first_holder(conn: psycopg.Connection, path: str | None) -> bool:
    if path is None:
        return True
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as file:
        file.write(f"{os.getpid()} {conn.info.backend_pid}")
    return True


def _hold(conn: psycopg.Connection, script: dict) -> None:
    if not _first_holder(conn, script.get("hold_file")):
        return
    time.sleep(float(script.get("sleep_s", 0)))
    if script.get("statement_s"):
        conn.execute("SELECT pg_sleep(%s)", [float(script["statement_s"])])


@fulfilment.handles("test.scripted", unlisted=True)
def scripted(conn: psycopg.Connection, event) -> str:
    script = event.object
    _hold(conn, script)
    if script.get("abort"):
        try:
            conn.execute("SELECT 1 / 0")
        except psycopg.errors.DivisionByZero:
            pass  # the transaction is now aborted (25P02 for anything after)
        raise ScriptedFailure("aborted transaction")
    failed = count_rows(conn, "webhook_failures", "event_id = %s", [event.id])
    if failed < int(script.get("fail_attempts", 0)):
        raise ScriptedFailure(f"scripted failure {failed + 1}")
    if script.get("clash_payment_id"):
        conn.execute(
            "INSERT INTO fulfilments (payment_id, provider, event_id, event_type) "
            "VALUES (%s, 'stripe', %s, %s)",
            [script["clash_payment_id"], event.id, event.type],
        )
    if script.get("clash_email"):
        conn.execute("INSERT INTO shop_customers (email) VALUES (%s)", [script["clash_email"]])
    if script.get("fail_quoting"):
        raise LookupError(f"no shop account for {script['fail_quoting']}")
    if script.get("refuse_after_write"):
        fulfilment.fulfil_payment(conn, event, script["refuse_after_write"], 100, "usd")
        raise InvalidFields("data.object.refuse_after_write: a rule the handler checks itself")
    if script.get("payment_id"):
        return fulfilment.fulfil_payment(conn, event, script["payment_id"], 100, "usd")
    return "scripted"


def _effect(conn: psycopg.Connection, event) -> str:
    """One row per run, no ON CONFLICT: a second effect of one event is a second row.

    The test creates `provider_effects` in its schema before sending.
    """
    conn.execute(
        "INSERT INTO provider_effects (provider, event_id) VALUES (%s, %s)",
        [event.data.get("provider_under_test"), event.id],
    )
    return "effected"


for _provider in ("standard", "github"):
    registry.handles("test.effect", provider=_provider)(_effect)
