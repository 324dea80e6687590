"""A shop's replacement of a built-in handler, loaded with WEBHOOK_HANDLER_MODULES.

It fails while the payment intent's metadata says `receipt_down`, like a
receipt service that is down, so the event is left failed for `reprocess`.
"""

from webhooks import fulfilment


@fulfilment.handles("payment_intent.succeeded")
def fulfil_and_send_receipt(conn, event):
    intent = event.object
    if intent.get("metadata", {}).get("receipt_down"):
        raise RuntimeError("receipt service down")
    return fulfilment.fulfil_payment(conn, event, intent["id"], intent["amount"], intent["currency"])
