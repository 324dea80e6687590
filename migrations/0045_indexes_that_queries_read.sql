-- Indexes that a query of the service reads, each named with it (COMMENT ON
-- INDEX, so schema.sql shows it), and autovacuum set for the hot tables.
--
-- webhook_events_type_idx went: every query that filters the ledger by event
-- type (events list, replay --type) filters it by provider or time too, and
-- no query orders it by type. pgqueuer_log_status went: only pgqueuer's
-- dashboard (failed jobs) filters the log by status, and the service never
-- runs it; the outbox's own pages read the log by job (job_id).
-- Dropping an index takes no scan: the lock is held for the catalogue only.
DROP INDEX webhook_events_type_idx;
DROP INDEX pgqueuer_log_status;

COMMENT ON INDEX webhook_events_provider_event_id_key IS
    'the claim (webhooks_claim, webhooks/core/ledger.sql): one row per provider and event id';
COMMENT ON INDEX webhook_events_pkey IS
    'the completion and re-opening of a claim by its id (webhooks_complete, ledger.reopen)';
COMMENT ON INDEX webhook_events_received_at_idx IS
    'retention''s batches along time (prune), the events list by time (history, /admin activity)';
COMMENT ON INDEX webhook_events_shopify_shop_idx IS
    'a Shopify shop''s stored payloads, for its compliance requests (domains/shopify/payloads.py)';
COMMENT ON INDEX webhook_payloads_pkey IS
    'a ledger row''s payload, joined by (ledger_id, received_at): one partition, one probe';
COMMENT ON INDEX webhook_failures_event_idx IS
    'an event''s failed attempts (events show, /admin, the events list''s failures)';
COMMENT ON INDEX webhook_failures_failed_at_idx IS
    'retention''s batches along time (prune), the failures of a window (/admin activity)';
COMMENT ON INDEX pgqueuer_log_created IS
    'retention''s batches along time (prune)';
COMMENT ON INDEX pgqueuer_log_job_id_status IS
    'a job''s last error (outbox list) and pgqueuer''s job status by job id';
COMMENT ON INDEX pgqueuer_log_not_aggregated IS
    'pgqueuer''s roll-up of the log into pgqueuer_statistics (rows not yet aggregated)';

-- The ledger and the outbox log take a row or more per delivery and lose
-- them to retention in bulk: vacuum them after a small share has changed
-- rather than the default fifth, so each vacuum is short and the free space
-- is reused by the next claims instead of growing the table.
ALTER TABLE webhook_events SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);
ALTER TABLE pgqueuer_log SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05
);
