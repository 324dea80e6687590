-- Who has access, as one rule a shop's code reads: the `subscription_access`
-- view (contract). It is `subscription_access_at(now())`; the function takes
-- the time so tests and operators can ask about any moment.
--
-- The two spans come from the service's settings (WEBHOOK_SUBSCRIPTION_GRACE,
-- WEBHOOK_SUBSCRIPTION_RENEWAL_MARGIN), written here when the service starts,
-- so the view gives the same answer to any connection.
CREATE TABLE subscription_access_settings (
    only_row       boolean  PRIMARY KEY DEFAULT true CHECK (only_row),
    grace          interval NOT NULL DEFAULT interval '3 days',
    renewal_margin interval NOT NULL DEFAULT interval '2 hours',
    updated_at     timestamptz NOT NULL DEFAULT now()
);
INSERT INTO subscription_access_settings DEFAULT VALUES;

-- The rule's first definition: webhooks/domains/stripe/access.sql replaces
-- it on every migrate. It stays here because the view is made of it, and
-- migration 0023 reads the view before the rule files are applied.
--
-- The first branch that matches decides (`reason` names it):
--   canceled / unpaid / incomplete_expired / paused   no access, whatever was paid
--   collection_paused   pause_collection with behavior `void`: no access
--   active / trialing   access (Stripe keeps `active` through a renewal's
--                       draft hour and a delayed payment method's settlement)
--   past_due_grace      past_due, until `grace` after the unpaid period began
--   paid_through        the last paid invoice's period end, plus `renewal_margin`
--   incomplete / grace_expired / period_ended   no access
CREATE FUNCTION subscription_access_at(at timestamptz)
RETURNS TABLE (subscription_id text, account text, has_access boolean, reason text,
               access_until timestamptz)
LANGUAGE sql STABLE
AS $$
SELECT s.subscription_id, s.account,
       d.reason IN ('active', 'trialing', 'past_due_grace', 'paid_through'),
       d.reason,
       CASE d.reason
           WHEN 'past_due_grace' THEN greatest(d.grace_end, d.paid_end)
           WHEN 'paid_through' THEN d.paid_end
           WHEN 'active' THEN d.scheduled_end
           WHEN 'trialing' THEN d.scheduled_end
       END
FROM subscriptions s
CROSS JOIN subscription_access_settings c
CROSS JOIN LATERAL (
    SELECT coalesce(s.current_period_start, s.paid_through) + c.grace AS grace_end,
           s.paid_through + c.renewal_margin AS paid_end,
           coalesce(s.cancel_at, CASE WHEN s.cancel_at_period_end THEN s.current_period_end END)
               AS scheduled_end
) e
CROSS JOIN LATERAL (
    SELECT e.*, CASE
        WHEN s.revoked_at IS NOT NULL THEN 'canceled'
        WHEN s.status IN ('canceled', 'unpaid', 'incomplete_expired', 'paused') THEN s.status
        WHEN s.pause_behavior = 'void' THEN 'collection_paused'
        WHEN s.status IN ('active', 'trialing') THEN s.status
        WHEN s.status = 'past_due' AND at < e.grace_end THEN 'past_due_grace'
        WHEN at < e.paid_end THEN 'paid_through'
        WHEN s.status = 'incomplete' THEN 'incomplete'
        WHEN s.status = 'past_due' THEN 'grace_expired'
        ELSE 'period_ended'
    END AS reason
) d
$$;

CREATE VIEW subscription_access AS
SELECT subscription_id, account, has_access, reason, access_until
FROM subscription_access_at(now());
