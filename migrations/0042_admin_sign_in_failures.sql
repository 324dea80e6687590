-- The operator console's refused sign-ins, for its rate limit
-- (webhooks/web/admin/sign_in.py): every gunicorn worker counts the same
-- ones. Rows older than the limit's window are deleted as new ones come.
CREATE TABLE admin_sign_in_failures (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    failed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX admin_sign_in_failures_failed_at ON admin_sign_in_failures (failed_at);
