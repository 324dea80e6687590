-- Back to before migrations/0045_indexes_that_queries_read.sql.
CREATE INDEX webhook_events_type_idx ON webhook_events (event_type, received_at);
CREATE INDEX pgqueuer_log_status ON pgqueuer_log (status);
ALTER TABLE webhook_events RESET (
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor
);
ALTER TABLE pgqueuer_log RESET (
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor
);
DELETE FROM schema_migrations WHERE version = '0045_indexes_that_queries_read';
