-- The article's ledger of keys, keyed here by the Stripe event id, and the
-- unique index on the payment id it asks for underneath.
CREATE TABLE idempotency_keys (
  key         text PRIMARY KEY,
  endpoint    text        NOT NULL,
  request_fp  text        NOT NULL,
  status      text        NOT NULL CHECK (status IN ('in_progress','completed')),
  response    jsonb,
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE fulfilments (
  id          bigserial   PRIMARY KEY,
  payment_id  text        NOT NULL,
  event_id    text        NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX fulfilments_payment_id ON fulfilments (payment_id);
