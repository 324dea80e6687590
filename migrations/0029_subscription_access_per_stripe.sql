-- Two access rules, brought to what Stripe's docs say: a pause of payment
-- collection keeps access whatever its behavior, and a send_invoice
-- subscription's grace runs from its invoice's due date. The rules are
-- subscription_access_at's (webhooks/domains/stripe/access.sql, which cites
-- the docs); the due date needs the subscription's collection method and
-- its days until due.
ALTER TABLE subscriptions
    ADD COLUMN collection_method text,
    ADD COLUMN days_until_due integer;
