-- What the shop was last told about each subscription's access (the
-- `subscription.access_changed` jobs), so that access which ends or starts
-- with time alone (a grace that runs out, a cancel_at that passes, a paid
-- period whose renewal never came) is told too: `python -m webhooks
-- subscriptions sweep`, and every outbox worker, compare it with the view.
ALTER TABLE subscriptions ADD COLUMN notified_access boolean;

-- Existing subscriptions start from what the view says now: a sweep right
-- after this migration tells nothing that no event had told.
UPDATE subscriptions s
SET notified_access = a.has_access
FROM subscription_access a
WHERE a.subscription_id = s.subscription_id;
