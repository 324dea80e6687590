-- The subscription access rule (access.py), in its current definition:
-- `python -m webhooks migrate` re-applies this file after the numbered
-- migrations. The `subscription_access` view (migrations/0017) is this
-- function at now(); the shop's code reads the view, the handlers call the
-- function, so they decide alike. Pause and send_invoice rules:
-- migrations/0029.

-- The first branch that matches decides (`reason` names it):
--   canceled / unpaid / incomplete_expired / paused   no access, whatever was paid
--   cancel_at           no access once the scheduled cancellation passed
--                       (`cancel_at`, or the period end with
--                       `cancel_at_period_end`), before the deletion's event
--   active / trialing   access (Stripe keeps `active` through a renewal's
--                       draft hour, a delayed payment method's settlement,
--                       a send_invoice invoice's days until due and a pause
--                       of payment collection)
--   past_due_grace      past_due, until `grace` after the unpaid invoice was
--                       due (the period's start, plus days_until_due for send_invoice)
--   paid_through        the last paid invoice's period end, plus `renewal_margin`
--   incomplete / grace_expired / period_ended   no access
CREATE OR REPLACE FUNCTION subscription_access_at(at timestamptz)
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
    SELECT coalesce(s.current_period_start, s.paid_through)
               + make_interval(days => CASE WHEN s.collection_method = 'send_invoice'
                                            THEN coalesce(s.days_until_due, 0) ELSE 0 END)
               + c.grace AS grace_end,
           s.paid_through + c.renewal_margin AS paid_end,
           coalesce(s.cancel_at, CASE WHEN s.cancel_at_period_end THEN s.current_period_end END)
               AS scheduled_end
) e
CROSS JOIN LATERAL (
    SELECT e.*, CASE
        WHEN s.revoked_at IS NOT NULL THEN 'canceled'
        WHEN s.status IN ('canceled', 'unpaid', 'incomplete_expired', 'paused') THEN s.status
        WHEN at >= e.scheduled_end THEN 'cancel_at'
        WHEN s.status IN ('active', 'trialing') THEN s.status
        WHEN s.status = 'past_due' AND at < e.grace_end THEN 'past_due_grace'
        WHEN at < e.paid_end THEN 'paid_through'
        WHEN s.status = 'incomplete' THEN 'incomplete'
        WHEN s.status = 'past_due' THEN 'grace_expired'
        ELSE 'period_ended'
    END AS reason
) d
$$;
