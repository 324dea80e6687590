"""Test-only handlers, registered when WEBHOOK_HANDLER_MODULES names this module.

`test.scripted` events carry their behaviour in data.object:
  sleep_s          hold the claim this long before doing anything
  abort            run a failing statement first, leaving the transaction aborted
  fail_attempts    raise until this many failures of the event are recorded
  payment_id       then fulfil this payment
"""
import time

import psycopg

from webhooks import fulfilment


class ScriptedFailure(RuntimeError):
    pass


@fulfilment.handles("test.scripted")
def scripted(conn: psycopg.Connection, event) -> str:
    script = event.object
    time.sleep(float(script.get("sleep_s", 0)))
    if script.get("abort"):
        try:
            conn.execute("SELECT 1 / 0")
        except psycopg.errors.DivisionByZero:
            pass  # the transaction is now aborted (25P02 for anything after)
        raise ScriptedFailure("aborted transaction")
    failed = conn.execute(
        "SELECT count(*) FROM webhook_failures WHERE event_id = %s", [event.id]
    ).fetchone()[0]
    if failed < int(script.get("fail_attempts", 0)):
        raise ScriptedFailure(f"scripted failure {failed + 1}")
    if script.get("payment_id"):
        return fulfilment.fulfil_payment(conn, event, script["payment_id"], 100, "usd")
    return "scripted"
