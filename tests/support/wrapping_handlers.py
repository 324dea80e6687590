"""A shop's module that keeps a built-in handler's effect and adds its own (the README's example).

Loaded with WEBHOOK_HANDLER_MODULES; the test creates `receipts` in its schema.
"""

from webhooks import fulfilment


def register(registry, settings):
    builtin = registry.handler("stripe", "checkout.session.completed")

    def fulfil_and_send_receipt(conn, event):
        outcome = builtin(conn, event)
        if outcome == fulfilment.FULFILLED:
            conn.execute("INSERT INTO receipts (session_id) VALUES (%s)", [event.object["id"]])
        return outcome

    registry.add("stripe", ["checkout.session.completed"], fulfil_and_send_receipt)
