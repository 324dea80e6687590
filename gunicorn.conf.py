"""gunicorn settings for the webhook service (`gunicorn -c gunicorn.conf.py wsgi:app`).

`python -m webhooks serve` (bin/serve, the Procfile's `web:`) runs gunicorn
with these settings behind nginx, which buffers every request whole
(webhooks/web/front.py): gunicorn then listens on a Unix socket in the
front's folder. Alone, it listens on HOST:PORT, which is only safe behind a
router that buffers requests itself (README, "Serving").
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

from webhooks.infra import install, privilege
from webhooks.infra.config import SettingError, Settings, serving
from webhooks.infra.logs import configure as configure_logging
from webhooks.web.front import GUNICORN_KEEPALIVE_S, admin_socket_path, metrics_socket_path, socket_path


def _checked():
    """Every setting, and as root the install step and the folders the workers write, checked
    before gunicorn starts anything: what is wrong is one line and exit 1, and nothing changes."""
    settings, process = serving()
    # Started as root, the master stays root and the workers run as the
    # service's user (webhooks/infra/privilege.py); post_fork sets their groups.
    if privilege.as_root():
        return settings, process, install.check(settings, process, front=False)
    if process.metrics_dir:
        privilege.check_writable(None, process.metrics_dir, "PROMETHEUS_MULTIPROC_DIR")
    return settings, process, None


try:
    _settings, _process, _account = _checked()
except SettingError as exc:
    sys.exit(f"error: {exc}")
configure_logging(_process.log_level)
if _account:
    user, group = _account.uid, _account.gid
# The socket is its owner's and its group's (nginx's workers): 0660.
umask = 0o117
# Behind the front, a socket for the public listener, one for the
# scraper's and one for the operator console's, each handed whole requests
# by the front; alone, HOST:PORT, METRICS_HOST:METRICS_PORT and
# ADMIN_HOST:ADMIN_PORT. /metrics is served on the scraper's and /admin on
# the console's, and neither anywhere else.
if _settings.front_dir:
    bind = [
        f"unix:{path(_settings.front_dir)}" for path in (socket_path, metrics_socket_path, admin_socket_path)
    ]
else:
    bind = [
        f"{_settings.host}:{_settings.port}",
        f"{_settings.metrics_host}:{_settings.metrics_port}",
        f"{_settings.admin_host}:{_settings.admin_port}",
    ]
# Threads, not sync workers: a duplicate waiting on the winner's claim holds
# a thread and a pooled connection rather than a whole process, and
# keep-alive saves a connection per delivery. Stock gthread: the front reads
# each request whole, so no thread ever waits for a slow client.
workers = _process.workers
worker_class = _process.worker_class
threads = _process.threads
# The workers read their pool's size as `serving` settled it (one connection per thread).
os.environ["WEBHOOK_POOL_MAX_SIZE"] = str(_settings.pool_max_size)
timeout = _process.timeout_s
graceful_timeout = 20
keepalive = GUNICORN_KEEPALIVE_S
# Stripe's headers are small; refuse anything that is not a webhook early.
limit_request_line = 4094
limit_request_fields = 50
limit_request_field_size = 8190
# Several instances (tests, benchmarks, hosts) must be able to share a machine.
control_socket_disable = True
accesslog = None
errorlog = "-"
loglevel = _process.gunicorn_log_level
# gunicorn's own lines (start, workers booted and exited) as the same JSON
# lines as ours. A logger class, not logconfig_dict: any logging config
# makes gunicorn build an access-log line for every request, measured as
# extra worker CPU per delivery, even with no access log wanted.
logger_class = "webhooks.infra.logs.GunicornLogger"
# How often each worker writes its connection pool's figures for /metrics.
POOL_METRICS_S = 1.0

# prometheus-client's multi-process mode: each worker writes its metrics to
# files here and /metrics adds them up; without it a scrape would see only the
# one worker that answered. Set before any worker imports prometheus_client.
if not _process.metrics_dir:
    _OWN_METRICS_DIR = os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="webhooks-metrics-")
    if _account:
        os.chown(_OWN_METRICS_DIR, _account.uid, _account.gid)


def on_starting(server):
    # Resolve the database once in the master so that, with DATABASE_URL
    # unset, workers share one embedded server instead of racing to start it.
    from webhooks.infra.db import database_url

    os.environ["DATABASE_URL"] = database_url(Settings.from_env())
    # Counts left by an earlier server in a configured folder are not ours.
    for stale in Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).glob("*.db"):
        stale.unlink()


def post_fork(server, worker):
    # gunicorn sets a worker's gid, or with `initgroups` its groups, never both
    # (benoitc/gunicorn#2770): either way root's group stays. Both here, as
    # root still, before gunicorn drops the uid.
    if _account:
        os.setgroups(_account.groups())
        os.setgid(_account.gid)


def post_worker_init(worker):
    # Each worker's pool figures, for the scrapes another worker answers
    # (webhooks/web/metrics.py); an app without them (a benchmark's) has none.
    metrics = getattr(worker.wsgi, "extensions", {}).get("webhooks.metrics")
    if metrics is not None:
        metrics.observe_pool_every(POOL_METRICS_S)


def child_exit(server, worker):
    # A dead worker's gauges (pool size, ...) must stop counting in the sums.
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server):
    if "_OWN_METRICS_DIR" in globals():
        shutil.rmtree(_OWN_METRICS_DIR, ignore_errors=True)
