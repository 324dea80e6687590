-- The outbox's log, pgqueuer_log, becomes partitioned by month of created,
-- as webhook_payloads is (0044): retention detaches and drops its months
-- whole instead of deleting its rows one by one (webhooks/core/partitions.py).
-- Its columns stay pgqueuer's: every statement pgqueuer and the outbox run
-- on it (INSERT, the roll-up's UPDATE ... SET aggregated, reads by job_id)
-- reads and writes a partitioned table the same way. There is no default
-- partition: a log row whose month is missing fails its statement, and its
-- transaction with it (a claim and its enqueue, a job's completion), so the
-- months are made well ahead, as the payloads' are.
--
-- A running service survives this migration: the new table is filled
-- while pgqueuer and the outbox go on writing the old one, and the one lock
-- that stops them (LOCK TABLE, at the end) is then held only for the rows
-- logged or rolled up during the copy and for catalogue changes. A log row
-- deleted during the copy (by a prune of before this migration) comes back,
-- and goes with its month. The ids continue from the old table's sequence.
-- Prune with this migration's code only: the code of before it deletes the
-- log by place in the heap (ctid), which a partitioned table does not make unique.
-- migrations/down/0046_outbox_log_in_monthly_partitions.sql goes back.

-- The month holding `p_at` (UTC) as a partition of `p_parent`, made if
-- missing: its name (the parent's, then _pYYYYMM), or NULL when it was
-- there. Made as a table of its own, then attached: ATTACH PARTITION locks
-- the parent in a mode its writers never wait for (SHARE UPDATE EXCLUSIVE),
-- where CREATE TABLE ... PARTITION OF would stop them.
CREATE FUNCTION webhooks_month_partition(p_parent text, p_at timestamptz) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    first timestamp := date_trunc('month', p_at AT TIME ZONE 'UTC');
    name text := p_parent || '_p' || to_char(first, 'YYYYMM');
BEGIN
    IF to_regclass(name) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING STORAGE)', name, p_parent);
    PERFORM webhooks_month_settings(p_parent, name);
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   p_parent, name, first AT TIME ZONE 'UTC', (first + interval '1 month') AT TIME ZONE 'UTC');
    RETURN name;
END $$;

-- A month's own storage settings: a partitioned table holds none for its
-- partitions. The outbox log's month takes a row or more per delivery and
-- has each of them updated once (pgqueuer's roll-up sets aggregated): it is
-- vacuumed after a small share has changed rather than the default fifth,
-- so each vacuum is short and the month does not grow with dead rows.
CREATE FUNCTION webhooks_month_settings(p_parent text, p_month text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_parent = 'pgqueuer_log' THEN
        EXECUTE format('ALTER TABLE %I SET (autovacuum_vacuum_scale_factor = 0.02, '
                       'autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_insert_scale_factor = 0.05, '
                       'autovacuum_analyze_scale_factor = 0.05)', p_month);
    END IF;
END $$;

-- What the code of before this migration calls, until it is replaced.
CREATE OR REPLACE FUNCTION webhooks_payload_partition(p_at timestamptz) RETURNS text LANGUAGE sql AS $$
    SELECT webhooks_month_partition('webhook_payloads', p_at)
$$;

-- Under a name of its own until the old table goes, at the end; pgqueuer's
-- columns, and an identity of its own that takes over the old one's count.
CREATE TABLE pgqueuer_log_by_month (
    LIKE pgqueuer_log INCLUDING DEFAULTS INCLUDING IDENTITY,
    CONSTRAINT pgqueuer_log_by_month_pkey PRIMARY KEY (id, created)
) PARTITION BY RANGE (created);
CREATE INDEX pgqueuer_log_by_month_job_id_status ON pgqueuer_log_by_month USING btree (job_id, created DESC);
CREATE INDEX pgqueuer_log_by_month_not_aggregated ON pgqueuer_log_by_month USING btree ((1)) WHERE (NOT aggregated);

-- Every month that holds a log row, and this month and the next two (UTC
-- months, as 0044 counts them).
SELECT webhooks_month_partition('pgqueuer_log_by_month', month AT TIME ZONE 'UTC')
FROM generate_series(
    date_trunc('month', least((SELECT min(created) FROM pgqueuer_log), now()) AT TIME ZONE 'UTC'),
    (now() AT TIME ZONE 'UTC') + interval '2 months', interval '1 month') AS month;

-- The copy, while the outbox goes on logging into the old table.
INSERT INTO pgqueuer_log_by_month (id, created, job_id, status, priority, entrypoint, traceback, aggregated)
SELECT id, created, job_id, status, priority, entrypoint, traceback, aggregated FROM pgqueuer_log;

-- From here until COMMIT, nothing logs: the rows logged or rolled up during the copy, then the catalogue.
LOCK TABLE pgqueuer_log IN ACCESS EXCLUSIVE MODE;

-- A row the copy did not see was written by a transaction that began at
-- most a delivery's length before this migration's: an hour bounds that by
-- far, through the old table's index on created.
INSERT INTO pgqueuer_log_by_month (id, created, job_id, status, priority, entrypoint, traceback, aggregated)
SELECT o.id, o.created, o.job_id, o.status, o.priority, o.entrypoint, o.traceback, o.aggregated
FROM pgqueuer_log o
WHERE o.created >= now() - interval '1 hour'
  AND NOT EXISTS (SELECT 1 FROM pgqueuer_log_by_month n WHERE n.id = o.id AND n.created = o.created);

-- Rows the roll-up counted during the copy are not counted again.
UPDATE pgqueuer_log_by_month n SET aggregated = true
FROM pgqueuer_log o
WHERE NOT n.aggregated AND o.id = n.id AND o.aggregated;

SELECT setval(pg_get_serial_sequence('pgqueuer_log_by_month', 'id'), last_value, is_called)
FROM pgqueuer_log_id_seq;

DROP TABLE pgqueuer_log;
ALTER TABLE pgqueuer_log_by_month RENAME TO pgqueuer_log;
ALTER SEQUENCE pgqueuer_log_by_month_id_seq RENAME TO pgqueuer_log_id_seq;
ALTER TABLE pgqueuer_log RENAME CONSTRAINT pgqueuer_log_by_month_pkey TO pgqueuer_log_pkey;
ALTER INDEX pgqueuer_log_by_month_job_id_status RENAME TO pgqueuer_log_job_id_status;
ALTER INDEX pgqueuer_log_by_month_not_aggregated RENAME TO pgqueuer_log_not_aggregated;
-- The months and their indexes, named as webhooks_month_partition names them from now on.
DO $$
DECLARE
    made text;
BEGIN
    FOR made IN SELECT c.relname FROM pg_class c
                WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'pgqueuer_log'::regclass)
                  AND c.relkind IN ('r', 'i') AND c.relname LIKE 'pgqueuer\_log\_by\_month\_%'
    LOOP
        EXECUTE format('ALTER TABLE %I RENAME TO %I', made, replace(made, 'pgqueuer_log_by_month_', 'pgqueuer_log_'));
    END LOOP;
    FOR made IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                WHERE i.inhparent = 'pgqueuer_log'::regclass
    LOOP
        PERFORM webhooks_month_settings('pgqueuer_log', made);
    END LOOP;
END $$;

-- pgqueuer_log_created went: its one reader was retention's batches along
-- time, and retention now drops the log's months instead. pgqueuer's
-- dashboard reads the log by time too, and the service never runs it.
COMMENT ON INDEX pgqueuer_log_pkey IS
    'a log row''s identity, which a partitioned table must key with its month; no query reads the log by id';
COMMENT ON INDEX pgqueuer_log_job_id_status IS
    'a job''s last error (outbox list) and pgqueuer''s job status by job id';
COMMENT ON INDEX pgqueuer_log_not_aggregated IS
    'pgqueuer''s roll-up of the log into pgqueuer_statistics (rows not yet aggregated)';
