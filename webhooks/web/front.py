"""The front: nginx reads every request whole before gunicorn sees it.

A thread-per-request worker that reads its own requests is held for as long
as a client takes to send one, and framing parsed by code of ours was the
easiest way to take the service down (issue 23). gunicorn's deployment guide
puts a buffering proxy ahead of its workers; nginx is that proxy here. It
reads each request head and body (de-chunked, up to the body cap) on its
event loop, refuses malformed framing itself, and hands gunicorn's stock
gthread workers whole requests over a Unix socket; it also reads their
answers whole, so a client that does not read holds no thread either.

The front's config is rendered here, from the service's settings, and
nowhere else: `python -m webhooks serve` writes it into the front's folder
beside the front's log of the requests the app did not answer, which `serve`
tallies for /metrics (webhooks/web/refusals.py). gunicorn's sockets are in a
subfolder of it, the only part gunicorn may write (`make_folder`).

The front also serves the scraper's port, on a socket of gunicorn's own and
a few scrapes at a time, and the operator console's port, on a third;
admits a provider's deliveries only from the addresses it publishes, where
its allowlist is on; limits how often one client may make the return call
(each costs Stripe API calls); and, behind trusted proxies, takes the client
to be the address they pass on.
"""

from __future__ import annotations

import errno
import os
import resource
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from webhooks.infra import privilege
from webhooks.infra.config import SettingError, Settings, network

from . import RETURN_PREFIX, WEBHOOK_PREFIX

CONFIG = "nginx.conf"
# gunicorn's folder in the front's: its sockets, and nothing root opens.
SOCKETS = "sockets"
SOCKET = "gunicorn.sock"
# gunicorn's second socket, the scraper's: the front's metrics listener alone hands requests to it.
METRICS_SOCKET = "metrics.sock"
# gunicorn's third socket, the operator console's: the front's admin listener alone hands requests to it.
ADMIN_SOCKET = "admin.sock"
# One line per request the app did not answer: its status.
REFUSED_LOG = "refused.log"
INSTALL = "apt-get install nginx"
# gunicorn's keep-alive on the front's connections (gunicorn.conf.py); the
# front lets its idle ones go a second sooner, so it never sends a request
# on a connection that gunicorn is closing.
GUNICORN_KEEPALIVE_S = 5

# The statuses a request is refused with before the app sees it (by nginx,
# or by gunicorn's own parser), and the reason /metrics counts it under. The
# ones the front sends a body for get this word as their JSON `error`, as the
# app's refusals do.
REFUSALS = {
    400: "bad_request",
    403: "source_not_allowed",
    408: "request_timeout",
    413: "body_too_large",
    414: "request_line_too_long",
    429: "too_many_connections",
    431: "headers_too_large",
    499: "client_closed",
    500: "server_error",
    502: "upstream_unavailable",
    504: "upstream_timeout",
}
# nginx closes a timed-out or vanished client without an answer (408, 499),
# and a 500 here is gunicorn's own.
_ANSWERED_BY_FRONT = (400, 403, 413, 414, 429, 431, 502, 504)
# The nginx codes each of those answers stands for, where they differ.
# nginx answers a transfer coding it does not know with 501 and an HTTP
# version it does not speak with 505: neither is the server failing, and a
# 5xx would have the sender retry, for days, a request that will never be
# read. Its own code for a head over its buffers is 494, sent as a bare 400.
_NGINX_CODES = {400: ("400", "501 505 =400"), 431: ("494 =431",)}
# Descriptors nginx needs besides two per connection (client and gunicorn).
_OTHER_DESCRIPTORS = 64
# On stop, how long requests in flight get to finish: a delivery takes
# milliseconds, a duplicate waits at most the lock timeout. Clients still
# sending theirs are dropped then, and their senders retry.
_SHUTDOWN_S = 3.0
# Scrapes handed to gunicorn at once: each holds a thread for a database
# query, so however many the scraper's port is sent, deliveries keep the rest.
_SCRAPES_AT_ONCE = 4


@dataclass(frozen=True)
class Published:
    """Where a provider publishes its deliveries' addresses, and the setting that admits only those."""

    setting: str
    url: str
    # The list's key in the JSON document at `url`.
    key: str


ALLOWLISTS = {
    "stripe": Published(
        "STRIPE_WEBHOOK_ALLOWLIST", "https://stripe.com/files/ips/ips_webhooks.json", "WEBHOOKS"
    ),
    "github": Published("GITHUB_WEBHOOK_ALLOWLIST", "https://api.github.com/meta", "hooks"),
}
# The lists as shipped; WEBHOOK_ALLOWLIST_DIR names another folder.
ALLOWLIST_DIR = Path(__file__).parent / "allowlists"

_TEMPLATE = """\
# Rendered by `python -m webhooks serve` from the service's settings
# (webhooks/web/front.py): change the settings, not this file.
daemon off;
worker_processes 1;
%(user)s
pid %(dir)s/nginx.pid;
# Per-request errors are counted in /metrics, not logged: a client could
# flood the log with them.
error_log stderr crit;
worker_rlimit_nofile %(open_files)d;
worker_shutdown_timeout %(shutdown)s;

events {
    worker_connections %(connections)d;
}

http {
    server_tokens off;
    client_body_temp_path %(dir)s/client_body;
    proxy_temp_path %(dir)s/proxy;
    fastcgi_temp_path %(dir)s/fastcgi;
    uwsgi_temp_path %(dir)s/uwsgi;
    scgi_temp_path %(dir)s/scgi;

    # A slow client costs a connection here, never a gunicorn thread. Its
    # head must be in within the timeout; its body may not stall longer
    # between two reads; a client that stops reading its answer is reset,
    # which frees the bytes it left unread at once. nginx has no bound on a
    # whole body's time: a body trickled faster than the timeout is held
    # until it is complete, so the connection ceiling above is sized to
    # hold such bodies (docs/reliability.md, the trickle flood).
    client_header_timeout %(timeout)s;
    client_body_timeout %(timeout)s;
    send_timeout %(timeout)s;
    keepalive_timeout 5s;
    reset_timedout_connection on;
    large_client_header_buffers 4 8k;
    client_max_body_size %(body_cap)d;
    # What a body in progress holds in memory at most, so what the ceiling
    # of held connections costs; a larger body waits in a temporary file.
    client_body_buffer_size 16k;
    limit_conn_zone $binary_remote_addr zone=per_client:10m;
    limit_conn_zone $server_port zone=scrapes:1m;
    limit_conn_status 429;
    # The return call costs Stripe API calls: each client's are limited.
    limit_req_zone $binary_remote_addr zone=returns:10m rate=%(return_rate)dr/m;
    limit_req_status 429;

    # gunicorn stamps the app's answers with a Server header; nginx's own
    # and gunicorn's parser's refusals have none.
    log_format status '$status';
    map $upstream_http_server $not_from_app {
        "" 1;
        default 0;
    }
    access_log off;

    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_set_header Host $http_host;
    proxy_request_buffering on;
    proxy_buffering on;
    # A request handed to gunicorn is answered there anyway: the front
    # waits for that answer even if its client has closed or half-closed,
    # and keeps the connection to gunicorn for the next request.
    proxy_ignore_client_abort on;
    proxy_connect_timeout %(timeout)s;

    upstream gunicorn {
        server unix:%(socket)s;
        keepalive 64;
        keepalive_timeout %(upstream_keepalive)s;
    }

    upstream gunicorn_metrics {
        server unix:%(metrics_socket)s;
    }

    upstream gunicorn_admin {
        server unix:%(admin_socket)s;
    }

    server {
        listen %(listen)s;
%(real_client)s        limit_conn per_client %(per_client)d;
        access_log %(refused_log)s status if=$not_from_app;
%(error_pages)s
        location / {
            proxy_pass http://gunicorn;
        }

        location ^~ %(return_prefix)s {
            limit_req zone=returns burst=%(return_rate)d nodelay;
%(return_pages)s            proxy_pass http://gunicorn;
        }

        location = /.front/rate_limited {
            internal;
            default_type application/json;
            add_header Retry-After %(return_retry)d always;
            return 429 '{"error":"too_many_requests"}';
        }
%(allowlists)s    }

    # The scraper's listener: /metrics and nothing else, a few at a time.
    server {
        listen %(metrics_listen)s;
        limit_conn scrapes %(scrapes)d;
%(error_pages)s
        location = /metrics {
            proxy_pass http://gunicorn_metrics;
        }

        location / {
            default_type application/json;
            return 404 '{"error":"not_found"}';
        }
    }

    # The operator console's listener: /admin and nothing else. The app
    # takes the client from X-Real-IP only on this listener's socket, which
    # only this server reaches (webhooks/web/metrics.py, ByListener).
    server {
        listen %(admin_listen)s;
        limit_conn per_client %(per_client)d;
%(error_pages)s
        location /admin {
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_set_header X-Real-IP $remote_addr;
            proxy_pass http://gunicorn_admin;
        }

        location / {
            default_type application/json;
            return 404 '{"error":"not_found"}';
        }
    }
}
"""


# Where a service started as root keeps its front's folder: the runtime
# folder only root may write in, not the world-writable temporary one.
_ROOT_RUNTIME = Path("/run")
# Opening a name in a folder: never through a link, never a file someone put there first.
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def make_folder(settings: Settings) -> Path:
    """The front's folder: nginx's config, pid file, log and buffered bodies; gunicorn's sockets below it.

    Started as root, it is made in /run, root's, in the service's group,
    0710: no other user may write in it, so nothing root opens there (the
    config nginx reads, the log the tally reads, the counts the workers
    read) can be replaced or linked elsewhere. gunicorn, which runs as the
    service's user, binds its sockets in `sockets/`, that user's own, 0710:
    nginx's workers, in the service's group, reach the sockets by name
    (connecting takes search permission on each folder) but can list
    neither folder, and no other user may enter them. Otherwise the folder
    and its subfolder are their user's alone (0700), in the temporary folder,
    and every process is that user.
    """
    if not privilege.as_root():
        folder = Path(tempfile.mkdtemp(prefix="webhooks-front-"))
        (folder / SOCKETS).mkdir(mode=0o700)
        return folder
    account = privilege.service_account(settings)
    # mkdtemp makes it root's, 0700: its group and mode are set before anyone else may enter.
    folder = Path(
        tempfile.mkdtemp(prefix="webhooks-front-", dir=_ROOT_RUNTIME if _ROOT_RUNTIME.is_dir() else None)
    )
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchown(fd, 0, account.gid)
        os.fchmod(fd, 0o710)
        os.mkdir(SOCKETS, mode=0o700, dir_fd=fd)
        sockets = os.open(SOCKETS, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        try:
            os.fchown(sockets, account.uid, account.gid)
            os.fchmod(sockets, 0o710)
        finally:
            os.close(sockets)
    finally:
        os.close(fd)
    return folder


def write_config(front_dir: Path, text: str) -> Path:
    """nginx.conf in the front's folder, root's alone."""
    return write_new(front_dir / CONFIG, text, 0o600)


def write_new(path: Path, text: str, mode: int) -> Path:
    """`text` as the file `path`, made new under its folder's descriptor: never written through a
    link, nor into a file that someone who may write the folder put there first."""
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        made = os.open(path.name, _CREATE, mode, dir_fd=fd)
    finally:
        os.close(fd)
    with open(made, "w") as written:
        written.write(text)
    return path


def socket_path(front_dir: str | Path) -> Path:
    return Path(front_dir) / SOCKETS / SOCKET


def metrics_socket_path(front_dir: str | Path) -> Path:
    return Path(front_dir) / SOCKETS / METRICS_SOCKET


def admin_socket_path(front_dir: str | Path) -> Path:
    return Path(front_dir) / SOCKETS / ADMIN_SOCKET


def refused_log(front_dir: str | Path) -> Path:
    return Path(front_dir) / REFUSED_LOG


def fitted_connections(wanted: int) -> int:
    """`wanted`, or as many connections as the open-file limit lets nginx hold."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, (hard - _OTHER_DESCRIPTORS) // 2))


def nginx_config(settings: Settings, front_dir: Path) -> str:
    """The front's config; SettingError names a setting the settings' parsers could not check alone."""
    connections = fitted_connections(settings.front_connections)
    return _TEMPLATE % {
        "user": _worker_user(settings),
        "dir": front_dir,
        "open_files": 2 * connections + _OTHER_DESCRIPTORS,
        "shutdown": _seconds(_SHUTDOWN_S),
        "connections": connections,
        "timeout": _seconds(settings.request_read_timeout_s),
        "body_cap": settings.max_body_bytes,
        "socket": socket_path(front_dir),
        "metrics_socket": metrics_socket_path(front_dir),
        "admin_socket": admin_socket_path(front_dir),
        "upstream_keepalive": _seconds(GUNICORN_KEEPALIVE_S - 1),
        "listen": _address(settings.host, settings.port)
        + (" proxy_protocol" if settings.proxy_protocol else ""),
        "real_client": _real_client(settings),
        "per_client": settings.front_connections_per_client,
        "refused_log": refused_log(front_dir),
        "error_pages": _error_pages(),
        "allowlists": "".join(
            _allowlisted(settings, name) for name in ALLOWLISTS if getattr(settings, f"{name}_allowlist")
        ),
        "return_prefix": RETURN_PREFIX,
        "return_rate": settings.fulfil_rate_per_minute,
        "return_pages": _error_pages(limited="/.front/rate_limited"),
        # A minute's allowance refills at this pace.
        "return_retry": max(1, 60 // settings.fulfil_rate_per_minute),
        "metrics_listen": _address(settings.metrics_host, settings.metrics_port),
        "scrapes": _SCRAPES_AT_ONCE,
        "admin_listen": _address(settings.admin_host, settings.admin_port),
    }


def check(settings: Settings) -> None:
    """SettingError for what `nginx_config` would refuse, before anything starts (the config is discarded)."""
    nginx_config(settings, Path(tempfile.gettempdir()))


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _real_client(settings: Settings) -> str:
    """realip: from a trusted proxy, the client is the address it passes on; from anyone else, the peer.

    With X-Forwarded-For, the client is the last address in it that is not
    a trusted proxy's, so what a client writes there itself counts for
    nothing; with the PROXY protocol, the one the proxy's header names.
    """
    if not settings.trusted_proxies:
        return ""
    lines = [f"set_real_ip_from {proxy};" for proxy in settings.trusted_proxies]
    lines.append(
        "real_ip_header proxy_protocol;" if settings.proxy_protocol else "real_ip_header X-Forwarded-For;"
    )
    lines.append("real_ip_recursive on;")
    return "".join(f"        {line}\n" for line in lines)


def allowlist_path(settings: Settings, name: str) -> Path:
    return Path(settings.allowlist_dir or ALLOWLIST_DIR) / f"{name}.txt"


def read_allowlist(path: Path) -> list[str]:
    """The addresses and networks of an allowlist file: one a line, `#` starting a comment.

    ValueError names the line that is neither.
    """
    found = []
    for number, line in enumerate(_read_file(path).splitlines(), 1):
        entry = line.split("#", 1)[0].strip()
        if entry:
            try:
                found.append(network(entry))
            except ValueError as exc:
                raise ValueError(f"{path} line {number}: {exc}") from None
    if not found:
        raise ValueError(f"{path} lists no address: it would refuse every delivery")
    return found


def _read_file(path: Path) -> str:
    """The text of a file named by an operator's setting, read by root at start: never through a link
    (one planted by a user who may write the folder would have root read, and a refusal quote, any file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError(f"{path} is a link: name the file itself") from None
        raise
    with open(fd, encoding="utf-8", errors="replace") as opened:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a file")
        return opened.read()


def _allowlisted(settings: Settings, name: str) -> str:
    """The provider's URL, admitted only from its list; anyone else gets 403 before a byte of body is read."""
    try:
        allowed = read_allowlist(allowlist_path(settings, name))
    except OSError as exc:
        raise SettingError(f"{ALLOWLISTS[name].setting}: {exc.filename}: {exc.strerror}") from None
    except ValueError as exc:
        raise SettingError(f"{ALLOWLISTS[name].setting}: {exc}") from None
    lines = [
        f"        location = {WEBHOOK_PREFIX}{name} {{",
        *(f"            allow {entry};" for entry in allowed),
        "            deny all;",
        "            proxy_pass http://gunicorn;",
        "        }",
    ]
    return "\n" + "\n".join(lines) + "\n"


def _seconds(value: float) -> str:
    return f"{round(value * 1000)}ms"


def _worker_user(settings: Settings) -> str:
    """Started as root, nginx's workers run as the front's user, in the service's group."""
    if not privilege.as_root():
        return ""
    front, service = privilege.front_account(settings), privilege.service_account(settings)
    return f"user {front.name} {service.group};"


def _error_pages(limited: str | None = None) -> str:
    """The front's refusals as JSON, like the app's: `{"error": <reason>}`.

    Each is an internal URI, not a named location: nginx answers a
    redirect to a named location with a 500 when the request line was too
    broken to have a URI of its own. With `limited`, the error_page lines
    of a location whose 429 is a rate limit's, answered by that page (a
    location's error_page lines replace the server's, so all are repeated).
    """
    lines = []
    for status in _ANSWERED_BY_FRONT:
        page = f"/.front/{status}"
        if limited is not None:
            page = limited if status == 429 else page
            lines += [
                f"            error_page {codes} {page};" for codes in _NGINX_CODES.get(status, (status,))
            ]
            continue
        lines += [f"        error_page {codes} {page};" for codes in _NGINX_CODES.get(status, (status,))]
        lines += [
            f"        location = {page} {{",
            "            internal;",
            "            default_type application/json;",
            f'            return {status} \'{{"error":"{REFUSALS[status]}"}}\';',
            "        }",
        ]
    return "\n".join(lines) + "\n"
