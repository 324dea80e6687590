-- Shopify orders (webhooks/shopify/): what each order's events said, the
-- one fulfilment per order, refunds by id. Keyed by (shop, id): the shop is
-- the X-Shopify-Shop-Domain the event came with.

-- Every event of an order locks this row first (orders.note), so one
-- order's events apply one at a time, in one lock order. Each fact is only
-- ever set, never cleared: an order's state moves forward whatever order
-- its events arrive in. `customer_id` is the one customer datum kept, to
-- find the order's events when that customer is redacted; it is cleared then.
CREATE TABLE shopify_orders (
    shop         text        NOT NULL,
    order_id     bigint      NOT NULL,
    name         text,
    customer_id  bigint,
    paid_at      timestamptz,
    refunded_at  timestamptz,
    cancelled_at timestamptz,
    -- A refund or cancellation arrived before orders/paid: sent for review, never shipped.
    held_at      timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (shop, order_id)
);
CREATE INDEX shopify_orders_customer_idx ON shopify_orders (shop, customer_id)
    WHERE customer_id IS NOT NULL;

-- One row per shipped order. The unique key holds even if the ledger is
-- bypassed or pruned: a second orders/paid, under any event id, finds it.
CREATE TABLE shopify_fulfilments (
    id           bigserial   PRIMARY KEY,
    shop         text        NOT NULL,
    order_id     bigint      NOT NULL,
    event_id     text        NOT NULL,
    fulfilled_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT shopify_fulfilments_order_key UNIQUE (shop, order_id)
);

CREATE TABLE shopify_refunds (
    shop        text        NOT NULL,
    refund_id   bigint      NOT NULL,
    order_id    bigint      NOT NULL,
    event_id    text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (shop, refund_id)
);
CREATE INDEX shopify_refunds_order_idx ON shopify_refunds (shop, order_id);

-- The redaction requests (customers/redact, shop/redact) look up a shop's
-- stored payloads by the event's shop. Partial, so Stripe's claims do not
-- maintain it.
CREATE INDEX webhook_events_shopify_shop_idx ON webhook_events (account)
    WHERE provider = 'shopify';
