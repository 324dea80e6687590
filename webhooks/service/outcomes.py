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
REFUNDED = "refunded"
PARTIALLY_REFUNDED = "partially_refunded"
DISPUTE_FLAGGED = "dispute_flagged"
ALREADY_FLAGGED = "already_flagged"
REVOKED = "revoked"
ALREADY_REVOKED = "already_revoked"

# Subscriptions (issue 11): the mirror took the event's snapshot; a trial's
# end was announced (customer.subscription.trial_will_end).
SUBSCRIPTION_UPDATED = "subscription_updated"
TRIAL_ENDING = "trial_ending"
