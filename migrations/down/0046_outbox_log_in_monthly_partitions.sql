-- Back to before migrations/0046_outbox_log_in_monthly_partitions.sql: the
-- outbox's log one table again, its rows and ids intact (those of the
-- months dropped meanwhile stay gone). Run it with the service stopped: it
-- copies every log row. Then deploy the code of before 0046.
LOCK TABLE pgqueuer_log IN ACCESS EXCLUSIVE MODE;
CREATE TABLE pgqueuer_log_whole (LIKE pgqueuer_log INCLUDING DEFAULTS INCLUDING IDENTITY);
INSERT INTO pgqueuer_log_whole (id, created, job_id, status, priority, entrypoint, traceback, aggregated)
SELECT id, created, job_id, status, priority, entrypoint, traceback, aggregated FROM pgqueuer_log;
SELECT setval(pg_get_serial_sequence('pgqueuer_log_whole', 'id'), last_value, is_called)
FROM pgqueuer_log_id_seq;
DROP TABLE pgqueuer_log;
ALTER TABLE pgqueuer_log_whole RENAME TO pgqueuer_log;
ALTER SEQUENCE pgqueuer_log_whole_id_seq RENAME TO pgqueuer_log_id_seq;
ALTER TABLE pgqueuer_log ADD CONSTRAINT pgqueuer_log_pkey PRIMARY KEY (id);
CREATE INDEX pgqueuer_log_created ON pgqueuer_log USING btree (created);
CREATE INDEX pgqueuer_log_job_id_status ON pgqueuer_log USING btree (job_id, created DESC);
CREATE INDEX pgqueuer_log_not_aggregated ON pgqueuer_log USING btree ((1)) WHERE (NOT aggregated);
COMMENT ON INDEX pgqueuer_log_created IS
    'retention''s batches along time (prune)';
COMMENT ON INDEX pgqueuer_log_job_id_status IS
    'a job''s last error (outbox list) and pgqueuer''s job status by job id';
COMMENT ON INDEX pgqueuer_log_not_aggregated IS
    'pgqueuer''s roll-up of the log into pgqueuer_statistics (rows not yet aggregated)';
ALTER TABLE pgqueuer_log SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05
);

CREATE OR REPLACE FUNCTION webhooks_payload_partition(p_at timestamptz) RETURNS text LANGUAGE plpgsql AS $$
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
DROP FUNCTION webhooks_month_partition(text, timestamptz);
DROP FUNCTION webhooks_month_settings(text, text);
DELETE FROM schema_migrations WHERE version = '0046_outbox_log_in_monthly_partitions';
