-- Subscriptions, keyed by the object id alone, and a mirror of each one.
--
-- Stripe ids are globally unique: invoices, invoice fulfilments and
-- subscriptions were keyed by (id, account), so one object seen under two
-- scopes (an organisation destination's `context`, a plain endpoint's none)
-- got two rows, and a deletion could miss the row that granted access. Each
-- set of such rows becomes one: the account first seen stays, every other is
-- recorded in scope_conflicts (the same record the handlers write), and the
-- facts merge the way the handlers would have merged them.

INSERT INTO scope_conflicts (object_type, object_id, stored_account, event_account, event_id)
SELECT object_type, object_id, first_account, account, 'migration:0016:' || account
FROM (
    SELECT 'invoice' AS object_type, invoice_id AS object_id, account,
           first_value(account) OVER (PARTITION BY invoice_id ORDER BY status_at, account) AS first_account
    FROM invoices
    UNION ALL
    SELECT 'subscription', subscription_id, account,
           first_value(account) OVER (PARTITION BY subscription_id ORDER BY updated_at, account)
    FROM subscriptions
) seen
WHERE account <> first_account
ON CONFLICT (object_type, object_id, event_id) DO NOTHING;

-- The old keys go first: a merged row takes an account another row of the
-- same object held until this statement deleted it.
ALTER TABLE invoices DROP CONSTRAINT invoices_pkey;
ALTER TABLE subscriptions DROP CONSTRAINT subscriptions_pkey;

-- Invoices: the newest status wins, under the first account.
WITH ranked AS (
    SELECT ctid AS row_id,
           row_number() OVER (PARTITION BY invoice_id ORDER BY status_at DESC, status_rank DESC, account) AS n,
           first_value(account) OVER (PARTITION BY invoice_id ORDER BY status_at, account) AS first_account,
           max(subscription_id) OVER (PARTITION BY invoice_id) AS any_subscription
    FROM invoices
), dropped AS (
    DELETE FROM invoices WHERE ctid IN (SELECT row_id FROM ranked WHERE n > 1)
)
UPDATE invoices i
SET account = r.first_account, subscription_id = coalesce(i.subscription_id, r.any_subscription)
FROM ranked r
WHERE i.ctid = r.row_id AND r.n = 1;

-- An invoice fulfilled twice (once per scope) keeps its first fulfilment.
DELETE FROM invoice_fulfilments f
USING invoice_fulfilments earlier
WHERE earlier.invoice_id = f.invoice_id AND earlier.id < f.id;

-- Subscriptions: paid-through is the latest, a revocation the earliest.
WITH merged AS (
    SELECT subscription_id,
           (array_agg(ctid ORDER BY n))[1] AS keep,
           max(paid_through) AS paid_through,
           min(revoked_at) AS revoked_at,
           (array_agg(revoked_reason ORDER BY revoked_at) FILTER (WHERE revoked_at IS NOT NULL))[1] AS revoked_reason
    FROM (
        SELECT s.*, ctid,
               row_number() OVER (PARTITION BY subscription_id ORDER BY updated_at, account) AS n
        FROM subscriptions s
    ) numbered
    GROUP BY subscription_id
    HAVING count(*) > 1
), dropped AS (
    DELETE FROM subscriptions s
    USING merged m
    WHERE s.subscription_id = m.subscription_id AND s.ctid <> m.keep
)
UPDATE subscriptions s
SET paid_through = m.paid_through, revoked_at = m.revoked_at, revoked_reason = m.revoked_reason
FROM merged m
WHERE s.ctid = m.keep;

ALTER TABLE invoices
    ADD PRIMARY KEY (invoice_id),
    -- A row is claimed (and locked) before its first status is known.
    ALTER COLUMN status DROP NOT NULL,
    ALTER COLUMN status_rank DROP NOT NULL,
    ALTER COLUMN status_at DROP NOT NULL;

DROP INDEX invoice_fulfilments_invoice_id_key;
CREATE UNIQUE INDEX invoice_fulfilments_invoice_id_key ON invoice_fulfilments (invoice_id);

-- The mirror: the latest snapshot of the subscription object, applied only
-- when its event is not older than the one that set the current snapshot
-- (status_at, then status_rank for events of the same second). A deletion
-- (revoked_at) is final. paid_through still only grows, from paid invoices.
ALTER TABLE subscriptions
    ADD PRIMARY KEY (subscription_id),
    ADD COLUMN status               text,
    ADD COLUMN status_rank          smallint,
    ADD COLUMN status_at            timestamptz,
    ADD COLUMN customer             text,
    ADD COLUMN cancel_at_period_end boolean,
    ADD COLUMN cancel_at            timestamptz,
    ADD COLUMN canceled_at          timestamptz,
    ADD COLUMN trial_end            timestamptz,
    ADD COLUMN pause_behavior       text,
    ADD COLUMN pause_resumes_at     timestamptz,
    ADD COLUMN current_period_start timestamptz,
    ADD COLUMN current_period_end   timestamptz,
    ADD COLUMN latest_invoice       text;

-- A subscription revoked before the mirror existed was deleted by Stripe.
UPDATE subscriptions
SET status = 'canceled', status_rank = 6, status_at = revoked_at, canceled_at = revoked_at
WHERE revoked_at IS NOT NULL;
