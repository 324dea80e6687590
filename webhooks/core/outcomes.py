"""The outcome words a handler returns; each is stored on the event's ledger row."""

IGNORED = "ignored"  # no handler for the type
NOTIFIED = "notified"  # a thin event, claimed and recorded; nothing fetched
FULFILLED = "fulfilled"
ALREADY_FULFILLED = "already_fulfilled"
AWAITING_PAYMENT = "awaiting_payment"
PAYMENT_FAILED = "payment_failed"
# The event is recorded but changed nothing: a newer event already set the
# state it carries (it arrived out of order).
SUPERSEDED = "superseded"
REVOKED = "revoked"
ALREADY_REVOKED = "already_revoked"
# A connected account's event of the other Stripe mode (providers/stripe.py, mode_outcome).
IGNORED_OTHER_MODE = "ignored_other_mode"
# Answered 500, recorded as a failure: the handlers do not know this payload shape.
UNSUPPORTED_API_VERSION = "unsupported_api_version"
# Answered 422 for good, stored and recorded as a failure: the object's fields
# are not what the sender sends (core/events.py, InvalidFields).
INVALID_FIELDS = "invalid_fields"

# Why a payment that succeeded is not shipped (see webhooks/domains/stripe/orders.py).
HELD = "held"  # fully refunded, disputed or fraud-warned before its success: payment.review
INVOICE_PAYMENT = "invoice_payment"  # pays an invoice (subscription, Invoicing)
NOT_AN_ORDER = "not_an_order"  # no Checkout Session in payment mode, no order marker
SUBSCRIPTION_CHECKOUT = "subscription_checkout"  # its invoices are the billing side's
SETUP_CHECKOUT = "setup_checkout"  # takes no payment
# The event's type says paid, its object does not (a session's payment_status,
# a PaymentIntent's or an invoice's status): recorded, nothing moved.
NOT_PAID = "not_paid"

# Refunds (refunds.py): the refund's own status after the event.
REFUNDED = "refunded"  # the payment is refunded in full
PARTIALLY_REFUNDED = "partially_refunded"
REFUND_PENDING = "refund_pending"
REFUND_FAILED = "refund_failed"  # failed or canceled: no longer counted
# Before basil, what a partial capture or a cancellation released uncaptured
# came as a Refund: no money went back.
AUTHORIZATION_RELEASED = "authorization_released"

# Disputes (disputes.py).
DISPUTE_OPEN = "dispute_open"
DISPUTE_WON = "dispute_won"
DISPUTE_LOST = "dispute_lost"
DISPUTE_CLOSED = "dispute_closed"  # an inquiry closed, or a dispute prevented

# Radar early fraud warnings (fraud_warnings.py).
FRAUD_WARNING_REPORTED = "fraud_warning_reported"  # the order had shipped: payment.fraud_warning
FRAUD_WARNING_RECORDED = "fraud_warning_recorded"  # not shipped: its success will be held
FRAUD_WARNING_UPDATED = "fraud_warning_updated"  # a warning already known

# Subscriptions: the mirror took the event's snapshot; a trial's
# end was announced (customer.subscription.trial_will_end).
SUBSCRIPTION_UPDATED = "subscription_updated"
TRIAL_ENDING = "trial_ending"
