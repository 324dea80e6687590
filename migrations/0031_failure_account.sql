-- A failed attempt keeps the account its event came with (a Connect
-- account, a Shopify shop). Shopify names the shop only in an unsigned
-- header, so without it `events reprocess` could not read a failed
-- Shopify event's stored body back as the delivery it was.
ALTER TABLE webhook_failures ADD COLUMN account text;
