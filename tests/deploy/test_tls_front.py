"""docs/deploying.md's nginx in front of `serve`: HTTPS on the domain, the sender's address kept.

The nginx block the page shows is run as written, but for its ports and a
self-signed certificate, in front of `python -m webhooks serve` with the
settings the page gives it (HOST=127.0.0.1, WEBHOOK_TRUSTED_PROXIES=127.0.0.1)
and Stripe's allowlist on, holding one loopback address: a delivery over
TLS from that address is answered, one from elsewhere naming that address
in X-Forwarded-For is refused, and plain HTTP is redirected.
"""

from __future__ import annotations

import http.client
import re
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, front  # noqa: F401 (fixture)
from tests.support import ports
from tests.support.front import signed_delivery
from webhooks.commands.serve import nginx_binary
from webhooks.infra.config import Settings

# Loopback addresses other than the proxy's own (Linux answers 127.0.0.0/8 on `lo`).
STRIPE, ELSEWHERE = "127.0.0.2", "127.0.0.3"


def documented_server_blocks() -> str:
    (block,) = re.findall(r"```nginx\n(.*?)```", (ROOT / "docs" / "deploying.md").read_text(), re.S)
    return block


@pytest.fixture
def tls_front(tmp_path: Path):
    """The documented nginx, on free ports with a self-signed certificate: start(upstream port)."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=webhooks.test", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    started = []

    def start(upstream: int) -> tuple[int, int]:
        http_port, https_port = ports.free_port(), ports.free_port()
        servers = (
            documented_server_blocks()
            .replace("listen 80;", f"listen 127.0.0.1:{http_port};")
            .replace(
                "listen 443 ssl;",
                f"listen 127.0.0.1:{https_port} ssl;\n"
                f"    ssl_certificate {tmp_path}/cert.pem; ssl_certificate_key {tmp_path}/key.pem;",
            )
            .replace("http://127.0.0.1:8000", f"http://127.0.0.1:{upstream}")
        )
        assert str(upstream) in servers and str(https_port) in servers
        (tmp_path / "nginx.conf").write_text(
            f"pid {tmp_path}/nginx.pid; error_log stderr; events {{}}\n"
            f"http {{ access_log off; client_body_temp_path {tmp_path}; proxy_temp_path {tmp_path};\n"
            f"{servers}\n}}\n"
        )
        nginx = nginx_binary(Settings())
        started.append(
            subprocess.Popen([nginx, "-p", str(tmp_path), "-c", "nginx.conf", "-g", "daemon off;"])
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", https_port), timeout=1).close()
                return http_port, https_port
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("nginx did not listen")

    yield start, tmp_path / "cert.pem"
    for proc in started:
        proc.terminate()
        proc.wait(timeout=30)


def _post(port: int, cert: Path, source: str, forwarded_for: str | None = None) -> tuple[int, str, str]:
    """A new signed delivery over TLS from `source`: (status, body, its event id)."""
    event_id, body, headers = signed_delivery()
    if forwarded_for:
        headers["X-Forwarded-For"] = forwarded_for
    context = ssl.create_default_context(cafile=str(cert))
    conn = http.client.HTTPSConnection(
        "127.0.0.1", port, source_address=(source, 0), context=context, timeout=10
    )
    try:
        conn.request("POST", "/webhooks/stripe", body=body, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.read().decode(), event_id
    finally:
        conn.close()


def test_the_documented_tls_front_serves_stripe_and_keeps_the_senders_address(front, tls_front, tmp_path):  # noqa: F811
    lists = tmp_path / "allowlists"
    lists.mkdir()
    (lists / "stripe.txt").write_text(f"{STRIPE}\n")
    (lists / "github.txt").write_text(f"{STRIPE}\n")
    lists.chmod(0o755)
    server = front(
        HOST="127.0.0.1",
        WEBHOOK_TRUSTED_PROXIES="127.0.0.1",
        STRIPE_WEBHOOK_ALLOWLIST="on",
        WEBHOOK_ALLOWLIST_DIR=str(lists),
    )
    start, cert = tls_front
    http_port, https_port = start(server.port)

    status, body, event_id = _post(https_port, cert, STRIPE)
    assert (status, event_id in body) == (200, True), body
    # What a client writes in X-Forwarded-For itself counts for nothing: the TLS front appends its peer.
    status, body, _ = _post(https_port, cert, ELSEWHERE, forwarded_for=STRIPE)
    assert status == 403 and "source_not_allowed" in body, body

    plain = http.client.HTTPConnection("127.0.0.1", http_port, timeout=10)
    plain.request("POST", "/webhooks/stripe", body=b"{}")
    redirect = plain.getresponse()
    assert redirect.status == 301
    assert redirect.getheader("Location").startswith("https://")
    plain.close()
