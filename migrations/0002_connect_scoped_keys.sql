-- Connect: a connected account's events and payments are its own. The account
-- joins the unique keys ('' for the platform, so the key never holds a NULL,
-- which would make every row distinct). Each key is dropped and re-made in
-- this one transaction, so there is no moment without it; the names stay so
-- `ON CONFLICT ON CONSTRAINT` and operators' queries keep working.
UPDATE webhook_events SET account = '' WHERE account IS NULL;
ALTER TABLE webhook_events
    ALTER COLUMN account SET DEFAULT '',
    ALTER COLUMN account SET NOT NULL,
    DROP CONSTRAINT webhook_events_provider_event_id_key,
    ADD CONSTRAINT webhook_events_provider_event_id_key UNIQUE (provider, event_id, account);

UPDATE fulfilments SET account = '' WHERE account IS NULL;
ALTER TABLE fulfilments
    ALTER COLUMN account SET DEFAULT '',
    ALTER COLUMN account SET NOT NULL;
DROP INDEX fulfilments_payment_id_key;
CREATE UNIQUE INDEX fulfilments_payment_id_key ON fulfilments (payment_id, account);
