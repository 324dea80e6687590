-- The ledger splits in two: the claim stays a narrow row in webhook_events
-- (the event id's global uniqueness, its status, its stored answer), and the
-- payload, most of an event's bytes, moves to webhook_payloads, partitioned
-- by month of received_at, which retention detaches and drops whole instead
-- of deleting row by row (webhooks/core/partitions.py).
--
-- The stored answer (response_status, response_body) stays in the narrow
-- row: it is small, and a redelivery after its payload's month was dropped
-- is still answered from it.
--
-- A running service survives this migration: its deliveries call
-- webhooks_claim, redefined below in this same transaction, and the copy of
-- the payloads runs before the one lock that stops them (LOCK TABLE, at the
-- end), which is then held only for the rows claimed during the copy and
-- for catalogue changes: a delivery that meets it waits its lock_timeout
-- and is answered 409, which the provider retries. The payload column is dropped without a rewrite:
-- its bytes in the old rows go as retention deletes them.
-- migrations/down/0044_payloads_in_monthly_partitions.sql goes back.

CREATE TABLE webhook_payloads (
    ledger_id   bigint NOT NULL,
    received_at timestamptz NOT NULL,
    payload     text NOT NULL,
    redacted_at timestamptz,
    PRIMARY KEY (ledger_id, received_at)
) PARTITION BY RANGE (received_at);

-- The month holding `p_at` (UTC) as a partition, made if missing: its name,
-- or NULL when it was there. Made as a table of its own, then attached:
-- ATTACH PARTITION locks webhook_payloads in a mode claims never wait for
-- (SHARE UPDATE EXCLUSIVE), where CREATE TABLE ... PARTITION OF would stop them.
CREATE FUNCTION webhooks_payload_partition(p_at timestamptz) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    first timestamp := date_trunc('month', p_at AT TIME ZONE 'UTC');
    name text := 'webhook_payloads_p' || to_char(first, 'YYYYMM');
BEGIN
    IF to_regclass(name) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE webhook_payloads INCLUDING DEFAULTS INCLUDING STORAGE)', name);
    EXECUTE format('ALTER TABLE webhook_payloads ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   name, first AT TIME ZONE 'UTC', (first + interval '1 month') AT TIME ZONE 'UTC');
    RETURN name;
END $$;

-- Every month that holds a stored event, and this month and the next two:
-- the worker and `webhooks maintenance` keep months ahead from now on. The
-- months are counted in UTC wall time: a month added to a timestamptz is
-- added in the session's time zone, which would skip a UTC month.
SELECT webhooks_payload_partition(month AT TIME ZONE 'UTC')
FROM generate_series(
    date_trunc('month', least((SELECT min(received_at) FROM webhook_events), now()) AT TIME ZONE 'UTC'),
    (now() AT TIME ZONE 'UTC') + interval '2 months', interval '1 month') AS month;

-- The copy, while deliveries go on claiming (they still write the old column).
INSERT INTO webhook_payloads (ledger_id, received_at, payload, redacted_at)
SELECT id, received_at, payload, redacted_at FROM webhook_events;

-- From here until COMMIT, no claim: the rows claimed during the copy, then the catalogue.
-- A claim the copy did not see committed after the copy began, and was
-- received (its transaction began) at most a delivery's length before this
-- migration's transaction: an hour bounds that by far, through the index.
LOCK TABLE webhook_events IN ACCESS EXCLUSIVE MODE;

INSERT INTO webhook_payloads (ledger_id, received_at, payload, redacted_at)
SELECT e.id, e.received_at, e.payload, e.redacted_at FROM webhook_events e
WHERE e.received_at >= now() - interval '1 hour'
  AND NOT EXISTS (SELECT 1 FROM webhook_payloads p WHERE p.ledger_id = e.id AND p.received_at = e.received_at);

ALTER TABLE webhook_events DROP COLUMN payload, DROP COLUMN redacted_at;

-- The claim as webhooks/core/ledger.sql defines it from now on, here too so
-- that a delivery never meets the old definition without its column.
CREATE OR REPLACE FUNCTION webhooks_claim(
    p_provider text, p_event_id text, p_event_type text, p_account text, p_livemode boolean,
    p_created timestamptz, p_payload text, p_status text, p_outcome text,
    p_response_status smallint, p_response_body text
) RETURNS webhooks_claimed LANGUAGE plpgsql AS $$
DECLARE
    claimed webhooks_claimed;
    received timestamptz;
BEGIN
    INSERT INTO webhook_events
        (provider, event_id, event_type, account, livemode, event_created,
         status, outcome, response_status, response_body, completed_at)
    VALUES (p_provider, p_event_id, p_event_type, p_account, p_livemode, p_created,
            p_status, p_outcome, p_response_status, p_response_body,
            CASE WHEN p_status = 'completed' THEN now() END)
    ON CONFLICT (provider, event_id) DO NOTHING
    RETURNING id, received_at INTO claimed.ledger_id, received;
    IF claimed.ledger_id IS NOT NULL THEN
        INSERT INTO webhook_payloads (ledger_id, received_at, payload)
        VALUES (claimed.ledger_id, received, p_payload);
        PERFORM set_config('webhooks.event_provider', p_provider, true),
                set_config('webhooks.event_id', p_event_id, true);
    ELSE
        SELECT status, response_status, response_body, event_type
        INTO claimed.held_status, claimed.held_response_status, claimed.held_response_body,
             claimed.held_event_type
        FROM webhook_events
        WHERE provider = p_provider AND event_id = p_event_id;
    END IF;
    RETURN claimed;
END $$;
