-- Shopify signs the body only: X-Shopify-Shop-Domain, X-Shopify-Topic and
-- X-Shopify-Event-Id are unsigned, so a captured delivery replayed with new
-- headers verified, and orders keyed by (shop header, order id) shipped the
-- same order once per invented shop. Shopify's order and refund ids are
-- global, so rows are keyed by the ids in the signed body; the shop is the
-- one first seen with the order, an attribute (scope_conflicts records a
-- delivery of the order under another shop, as for Stripe's Connect scope).
--
-- Existing rows of one order or refund under several shops are folded: the
-- first seen stays (its shop, its first fulfilment), the facts merge as the
-- handlers would have merged them, and every other shop is recorded in
-- scope_conflicts as `migration:0030:<shop>`.
INSERT INTO scope_conflicts (object_type, object_id, stored_account, event_account, event_id)
SELECT object_type, object_id, first_shop, shop, 'migration:0030:' || shop
FROM (
    SELECT 'shopify_order' AS object_type, order_id::text AS object_id, shop,
           first_value(shop) OVER (PARTITION BY order_id ORDER BY created_at, shop) AS first_shop
    FROM shopify_orders
    UNION ALL
    SELECT 'shopify_refund', refund_id::text, shop,
           first_value(shop) OVER (PARTITION BY refund_id ORDER BY recorded_at, shop)
    FROM shopify_refunds
) seen
WHERE shop <> first_shop
ON CONFLICT (object_type, object_id, event_id) DO NOTHING;

ALTER TABLE shopify_orders DROP CONSTRAINT shopify_orders_pkey;
WITH merged AS (
    SELECT order_id,
           (array_agg(ctid ORDER BY created_at, shop))[1] AS keep,
           min(paid_at) AS paid_at, min(refunded_at) AS refunded_at,
           min(cancelled_at) AS cancelled_at, min(held_at) AS held_at,
           (array_agg(name ORDER BY created_at, shop) FILTER (WHERE name IS NOT NULL))[1] AS name,
           (array_agg(customer_id ORDER BY created_at, shop)
                FILTER (WHERE customer_id IS NOT NULL))[1] AS customer_id
    FROM shopify_orders
    GROUP BY order_id
    HAVING count(*) > 1
), dropped AS (
    DELETE FROM shopify_orders o USING merged m WHERE o.order_id = m.order_id AND o.ctid <> m.keep
)
UPDATE shopify_orders o
SET paid_at = m.paid_at, refunded_at = m.refunded_at, cancelled_at = m.cancelled_at,
    held_at = m.held_at, name = m.name, customer_id = m.customer_id, updated_at = now()
FROM merged m
WHERE o.ctid = m.keep;
ALTER TABLE shopify_orders ADD PRIMARY KEY (order_id);

-- An order shipped under two shops keeps its first fulfilment: the unique
-- key is the order id alone from now on.
DELETE FROM shopify_fulfilments f
USING shopify_fulfilments earlier
WHERE earlier.order_id = f.order_id AND earlier.id < f.id;
ALTER TABLE shopify_fulfilments DROP CONSTRAINT shopify_fulfilments_order_key;
ALTER TABLE shopify_fulfilments ADD CONSTRAINT shopify_fulfilments_order_key UNIQUE (order_id);

ALTER TABLE shopify_refunds DROP CONSTRAINT shopify_refunds_pkey;
DELETE FROM shopify_refunds r
USING shopify_refunds earlier
WHERE earlier.refund_id = r.refund_id
  AND (earlier.recorded_at, earlier.shop) < (r.recorded_at, r.shop);
ALTER TABLE shopify_refunds ADD PRIMARY KEY (refund_id);
DROP INDEX shopify_refunds_order_idx;
CREATE INDEX shopify_refunds_order_idx ON shopify_refunds (order_id);

-- The compliance requests carry no id of their own but the data request's,
-- so a replay of one (its signed body under a new X-Shopify-Event-Id) is
-- known by the body's digest: each request is acted on once. Shopify's own
-- retries keep their event id and are answered from the ledger before this.
CREATE TABLE shopify_compliance_requests (
    body_sha256 text        PRIMARY KEY,
    topic       text        NOT NULL,
    shop        text        NOT NULL,
    event_id    text        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
