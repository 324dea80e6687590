-- The payment side is keyed by Stripe's globally unique ids: the ledger by
-- (provider, event id), payments / fulfilments / refunds / disputes by their
-- object id. The Connect account stays a stored attribute, checked on every
-- event (webhooks/stripe/scope.py). Rows that the old keys let one object have
-- under two accounts are folded into the first one; each payment that had
-- two is written to scope_conflicts so an operator sees what was merged.

-- Ledger: one Stripe event is one row, whatever scope it came under.
DELETE FROM webhook_events e
USING webhook_events keep
WHERE keep.provider = e.provider AND keep.event_id = e.event_id AND keep.id < e.id;
ALTER TABLE webhook_events
    DROP CONSTRAINT webhook_events_provider_event_id_key,
    ADD CONSTRAINT webhook_events_provider_event_id_key UNIQUE (provider, event_id);

-- Fulfilments: the first one of a payment stays.
INSERT INTO scope_conflicts (object_type, object_id, stored_account, event_account, event_id)
SELECT 'payment', f.payment_id, keep.account, f.account, 'migration-0013'
FROM fulfilments f JOIN fulfilments keep ON keep.payment_id = f.payment_id AND keep.id < f.id
ON CONFLICT DO NOTHING;
DELETE FROM fulfilments f USING fulfilments keep
WHERE keep.payment_id = f.payment_id AND keep.id < f.id;
DROP INDEX fulfilments_payment_id_key;
CREATE UNIQUE INDEX fulfilments_payment_id_key ON fulfilments (payment_id);

-- Payments: the row that carries a status (else the oldest) stays, and takes
-- what the folded rows knew of refunds and disputes (both only grow here).
CREATE TEMPORARY TABLE payment_keep ON COMMIT DROP AS
SELECT DISTINCT ON (payment_id) payment_id, account
FROM payments
ORDER BY payment_id, status IS NULL, updated_at, account;
UPDATE payments p
SET amount_refunded = m.amount_refunded, refunded = m.refunded, disputed = m.disputed
FROM (SELECT payment_id, max(amount_refunded) AS amount_refunded, bool_or(refunded) AS refunded,
             bool_or(disputed) AS disputed
      FROM payments GROUP BY payment_id HAVING count(*) > 1) m
JOIN payment_keep k USING (payment_id)
WHERE p.payment_id = m.payment_id AND p.account = k.account;
INSERT INTO scope_conflicts (object_type, object_id, stored_account, event_account, event_id)
SELECT 'payment', p.payment_id, k.account, p.account, 'migration-0013'
FROM payments p JOIN payment_keep k USING (payment_id)
WHERE p.account <> k.account
ON CONFLICT DO NOTHING;
DELETE FROM payments p USING payment_keep k
WHERE p.payment_id = k.payment_id AND p.account <> k.account;
ALTER TABLE payments DROP CONSTRAINT payments_pkey, ADD PRIMARY KEY (payment_id);

-- Refunds and disputes: one row per object id, the oldest.
DELETE FROM refunds r USING refunds keep
WHERE keep.refund_id = r.refund_id AND (keep.created_at, keep.account) < (r.created_at, r.account);
ALTER TABLE refunds DROP CONSTRAINT refunds_pkey, ADD PRIMARY KEY (refund_id);
DROP INDEX refunds_payment_idx;
CREATE INDEX refunds_payment_idx ON refunds (payment_id);

DELETE FROM disputes d USING disputes keep
WHERE keep.dispute_id = d.dispute_id AND (keep.created_at, keep.account) < (d.created_at, d.account);
ALTER TABLE disputes DROP CONSTRAINT disputes_pkey, ADD PRIMARY KEY (dispute_id);
DROP INDEX disputes_payment_idx;
CREATE INDEX disputes_payment_idx ON disputes (payment_id);
