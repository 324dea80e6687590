"""The outcome words the core answers with and every domain shares; each is stored on the event's ledger row.

A domain's own words live in its modules and come to the Registry with its
handlers (`Parts.outcomes`, core/parts.py); `Registry.outcomes` is the
whole vocabulary, and docs/events.md and docs/providers.md name each word.
"""

IGNORED = "ignored"  # no handler for the type
# Answered 422 for good, stored and recorded as a failure: the object's fields
# are not what the sender sends (core/events.py, InvalidFields).
INVALID_FIELDS = "invalid_fields"

# The vocabulary a shop's own handlers are given (webhooks/fulfilment.py),
# which the built-in domains speak too.
NOTIFIED = "notified"  # a thin event, claimed and recorded; nothing fetched
FULFILLED = "fulfilled"
ALREADY_FULFILLED = "already_fulfilled"
AWAITING_PAYMENT = "awaiting_payment"
# The event's type says paid, its object does not (a session's payment_status,
# a PaymentIntent's or an invoice's status): recorded, nothing moved.
NOT_PAID = "not_paid"
# The event is recorded but changed nothing: a newer event already set the
# state it carries (it arrived out of order).
SUPERSEDED = "superseded"

# Words more than one domain returns (Stripe's and Shopify's orders).
HELD = "held"  # refunded, disputed, cancelled or fraud-warned before its payment: held for review
REFUNDED = "refunded"  # the payment is refunded in full

CORE = (
    IGNORED,
    INVALID_FIELDS,
    NOTIFIED,
    FULFILLED,
    ALREADY_FULFILLED,
    AWAITING_PAYMENT,
    NOT_PAID,
    SUPERSEDED,
    HELD,
    REFUNDED,
)
