"""The edge in the networks shops run (issue 33), through `python -m webhooks serve`.

Provider allowlists at the front, the client behind a trusted proxy
(X-Forwarded-For or the PROXY protocol), the scraper's port behind the
front, refusals counted without a file that grows, and a trickle flood from
ten addresses. The other addresses are loopback ones (127.0.0.2 and up):
Linux answers the whole of 127.0.0.0/8 on `lo`, so a test may send from any
of them without root.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
import requests

from bench import flood, framing
from tests.commands.test_command_errors import one_error_line
from tests.support.commands import called, command
from tests.support.front import address, counted_since, refusals, served, signed_delivery
from tests.support.reliability import sized
from webhooks.web import front
from webhooks.web import refusals as tally

# The load balancer the service trusts, someone on the same network that it does not, and the
# client an attacker claims to be.
PROXY, STRANGER, ATTACKER = "127.0.0.2", "127.0.0.3", "203.0.113.9"
STRIPE_ADDRESS = "54.187.174.169"  # on Stripe's published list (webhooks/web/allowlists/stripe.txt)
PER_CLIENT = 20


@pytest.fixture(scope="module")
def edge(server_url):
    """A served stack with Stripe's and GitHub's lists on, behind one trusted proxy."""
    with served(
        server_url,
        # 127.0.0.1 is on no list: the stack is ready once the public URL answers at all.
        probe=lambda server: server.url + "/healthz",
        WEB_CONCURRENCY=2,
        STRIPE_WEBHOOK_ALLOWLIST="on",
        GITHUB_WEBHOOK_ALLOWLIST="on",
        WEBHOOK_TRUSTED_PROXIES=PROXY,
        WEBHOOK_FRONT_CONNECTIONS_PER_CLIENT=PER_CLIENT,
        WEBHOOK_REQUEST_READ_TIMEOUT_SECONDS=3,
    ) as server:
        yield server


def _sent(server, data: bytes, source: str, wait_s: float = 5.0) -> framing.Answer:
    """`data` sent from `source`, and what came back until the answer was whole (or `wait_s`)."""
    with socket.create_connection(address(server), timeout=wait_s, source_address=(source, 0)) as conn:
        started = time.monotonic()
        conn.sendall(data)
        return framing.read_answer(conn, started, wait_s)


def _delivery(forwarded_for: str | None = None, path: str = "/webhooks/stripe") -> tuple[str, bytes]:
    """A signed delivery's bytes, as a proxy passing on `forwarded_for` would send them."""
    event_id, body, headers = signed_delivery()
    if forwarded_for:
        headers["X-Forwarded-For"] = forwarded_for
    head = f"POST {path} HTTP/1.1\r\nHost: edge\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return event_id, head.encode() + b"\r\n" + body


def _delivered(answer: framing.Answer, event_id: str) -> bool:
    return answer.status() == 200 and json.loads(answer.body())["event_id"] == event_id


def _served_through_proxy(server, rounds: int = 5) -> tuple[float, float]:
    """The slowest of `rounds` signed deliveries from Stripe's address through the trusted proxy,
    each asserted answered for its own event, and of as many /healthz: (delivery s, healthz s)."""
    deliveries, healthz = [], []
    for _ in range(rounds):
        event_id, delivery = _delivery(forwarded_for=STRIPE_ADDRESS)
        answer = _sent(server, delivery, PROXY)
        assert _delivered(answer, event_id), answer.data[:300]
        deliveries.append(answer.last_byte_s)
        answer = _sent(server, b"GET /healthz HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n", PROXY)
        assert answer.status() == 200
        healthz.append(answer.last_byte_s)
    return max(deliveries), max(healthz)


# The tests through the front bound how long an answer takes, or count a limit over time:
# no other test runs beside one (`alone`).
@pytest.mark.system
@pytest.mark.alone
def test_a_provider_with_its_list_on_is_refused_from_elsewhere_before_its_body_is_read(edge, figures):
    head = b"POST %s HTTP/1.1\r\nHost: edge\r\nContent-Length: 100000\r\n\r\n"
    before = refusals(edge)
    # A head with a large body announced and none of it sent: the answer cannot wait for the body.
    refused = {
        path: _sent(edge, head % path.encode(), "127.0.0.1")
        for path in ("/webhooks/stripe", "/webhooks/%73tripe", "/webhooks/github")
    }
    counted = counted_since(edge, before, len(refused))
    shopify = requests.post(edge.url + "/webhooks/shopify", data=b"{}", timeout=10)

    assert {path: a.status() for path, a in refused.items()} == dict.fromkeys(refused, 403)
    assert all(json.loads(a.body()) == {"error": "source_not_allowed"} for a in refused.values())
    assert max(a.first_byte_s for a in refused.values()) < 1
    assert counted == Counter({"403": len(refused)})
    # A provider that publishes no list is answered by the app, whoever sends.
    assert shopify.status_code != 403 and shopify.json()["error"] != "source_not_allowed"
    page = requests.get(edge.metrics_url, timeout=10).text
    assert 'webhook_front_refusals_total{reason="source_not_allowed",status="403"}' in page
    figures.record(
        "STRIPE_WEBHOOK_ALLOWLIST and GITHUB_WEBHOOK_ALLOWLIST on: a POST from an address on neither "
        "list announcing a 100 KB body and sending none (to /webhooks/stripe, /webhooks/%73tripe, "
        "/webhooks/github)",
        "403 source_not_allowed at once, before any of the body, counted in "
        "webhook_front_refusals_total; providers without a list still reach the app",
        f"{[a.status() for a in refused.values()]} after "
        f"{max(a.first_byte_s for a in refused.values()) * 1000:.0f} ms at most; counted {dict(counted)}; "
        f"/webhooks/shopify answered {shopify.status_code} by the app",
    )


@pytest.mark.system
@pytest.mark.alone
def test_the_client_a_trusted_proxy_names_is_admitted_and_an_untrusted_peers_claim_is_ignored(edge, figures):
    event_id, through_proxy = _delivery(forwarded_for=f"{ATTACKER}, {STRIPE_ADDRESS}")
    _, from_stranger = _delivery(forwarded_for=STRIPE_ADDRESS)

    admitted = _sent(edge, through_proxy, PROXY)
    claimed = _sent(edge, from_stranger, STRANGER)

    # realip takes the last address the trusted proxy passed on: what the client wrote before it is not.
    assert _delivered(admitted, event_id), admitted.data[:300]
    assert claimed.status() == 403
    figures.record(
        f"STRIPE_WEBHOOK_ALLOWLIST on, WEBHOOK_TRUSTED_PROXIES={PROXY}: a signed delivery through the "
        f"proxy, X-Forwarded-For '{ATTACKER}, {STRIPE_ADDRESS}'; the same header from {STRANGER}",
        "through the trusted proxy the client is Stripe's address (the last one passed on) and the "
        "delivery is answered; from an untrusted peer the header counts for nothing: 403",
        f"through the proxy {admitted.status()}; from {STRANGER} {claimed.status()}",
    )


@pytest.mark.system
@pytest.mark.alone
def test_behind_a_trusted_proxy_the_per_client_limit_counts_each_client_not_the_proxy(edge, figures):
    # At a provider's URL with no list, so that each is held rather than refused.
    stalled = b"POST /webhooks/shopify HTTP/1.1\r\nHost: edge\r\nContent-Length: 1000\r\n"
    attacker = stalled + f"X-Forwarded-For: {ATTACKER}\r\n\r\n".encode()
    # From a peer that is not trusted, each connection claims another client: the peer is counted.
    claims = [stalled + f"X-Forwarded-For: 198.51.100.{n}\r\n\r\n".encode() for n in range(PER_CLIENT + 10)]
    with (
        framing.Held(address(edge), attacker, PER_CLIENT + 10, source=PROXY) as through_proxy,
        framing.Held(address(edge), claims, len(claims), source=STRANGER) as from_stranger,
    ):
        time.sleep(0.5)
        through_proxy.poll()
        from_stranger.poll()
        slowest, _ = _served_through_proxy(edge)
        attacker_statuses = Counter(through_proxy.statuses())
        stranger_statuses = Counter(from_stranger.statuses())

    assert attacker_statuses == Counter({None: PER_CLIENT, 429: 10})
    assert stranger_statuses == Counter({None: PER_CLIENT, 429: 10})
    assert slowest < 1
    figures.record(
        f"{PER_CLIENT + 10} stalled bodies from one client through the trusted proxy, and {PER_CLIENT + 10} "
        f"from an untrusted peer each claiming another client (WEBHOOK_FRONT_CONNECTIONS_PER_CLIENT="
        f"{PER_CLIENT}); meanwhile signed deliveries through the same proxy",
        "the limit counts the client the proxy names, so Stripe's deliveries through the proxy are "
        "answered; an untrusted peer is counted as itself, whatever its header says",
        f"through the proxy: {attacker_statuses[429]} answered 429, {attacker_statuses[None]} held; "
        f"untrusted peer: {stranger_statuses[429]} answered 429; every delivery answered 200, slowest "
        f"{slowest * 1000:.0f} ms",
    )


@pytest.mark.system
@pytest.mark.alone
def test_with_the_proxy_protocol_the_client_is_the_one_a_trusted_proxy_names(server_url, figures):
    with served(
        server_url,
        # The public listener speaks the PROXY protocol alone; the scraper's does not.
        probe=lambda server: server.metrics_url,
        WEB_CONCURRENCY=1,
        STRIPE_WEBHOOK_ALLOWLIST="on",
        WEBHOOK_TRUSTED_PROXIES=PROXY,
        WEBHOOK_PROXY_PROTOCOL="on",
    ) as server:
        proxied = f"PROXY TCP4 {STRIPE_ADDRESS} 10.0.0.1 43210 443\r\n".encode()
        event_id, delivery = _delivery()
        admitted = _sent(server, proxied + delivery, PROXY)
        _, delivery = _delivery()
        claimed = _sent(server, proxied + delivery, STRANGER)
        _, delivery = _delivery()
        bare = _sent(server, delivery, PROXY)

    assert _delivered(admitted, event_id), admitted.data[:300]
    assert claimed.status() == 403
    assert bare.status() in (None, 400) and bare.ended != "open"
    figures.record(
        f"WEBHOOK_PROXY_PROTOCOL on, WEBHOOK_TRUSTED_PROXIES={PROXY}, STRIPE_WEBHOOK_ALLOWLIST on: a "
        f"PROXY header naming {STRIPE_ADDRESS} before a signed delivery, from the proxy and from "
        f"{STRANGER}; a delivery from the proxy without the header",
        "from the trusted proxy the client is the one it names (admitted); from another peer the "
        "header counts for nothing (403); a connection without the header is not read",
        f"from the proxy {admitted.status()}; from {STRANGER} {claimed.status()}; without the header "
        f"{bare.status() or 'no answer'}, connection {bare.ended}",
    )


def front_dir(server) -> Path:
    """The front's folder: nginx's prefix (`-p`), as `serve` started it."""
    for proc in psutil.Process(server.proc.pid).children(recursive=True):
        argv = proc.cmdline()
        if "-p" in argv and "nginx" in Path(argv[0]).name:
            return Path(argv[argv.index("-p") + 1])
    raise AssertionError("no nginx under serve")


def _pipelined_refusals(server, requests_each: int) -> int:
    """One connection pipelining `requests_each` refused requests; the 403s it got."""
    refused = b"GET /webhooks/stripe HTTP/1.1\r\nHost: edge\r\n\r\n"
    with socket.create_connection(address(server), timeout=30) as conn:
        sender = threading.Thread(target=conn.sendall, args=(refused * requests_each,), daemon=True)
        sender.start()
        answer = framing.read_answer(conn, time.monotonic(), 30, quiet_s=2.0)
    return answer.data.count(b"HTTP/1.1 403")


@pytest.mark.system
@pytest.mark.alone
def test_refusals_are_counted_exactly_while_the_fronts_log_stays_bounded(edge, figures):
    connections, each = 80, 1000  # nginx ends a connection after 1,000 requests
    log = front_dir(edge) / "refused.log"
    before = refusals(edge)
    largest, answered = 0, []
    senders = [
        threading.Thread(target=lambda: answered.append(_pipelined_refusals(edge, each)))
        for _ in range(connections)
    ]
    started = time.monotonic()
    for sender in senders:
        sender.start()
    while any(sender.is_alive() for sender in senders):
        largest = max(largest, log.stat().st_size if log.exists() else 0)
        time.sleep(0.02)
    seconds = time.monotonic() - started
    refused = sum(answered)
    counted = counted_since(edge, before, refused, within_s=10)

    assert refused == connections * each
    assert counted == Counter({"403": refused})
    # Each line is four bytes: the refusals wrote four times the bound, and the log held the bound
    # and what came between two of the tally's reads, however fast they came.
    assert refused * 4 >= 4 * tally.ROTATE_AT_BYTES
    assert largest < 3 * tally.ROTATE_AT_BYTES
    figures.record(
        f"{refused} refused requests ({connections} connections pipelining {each} each), "
        f"{refused * 4 // 1024} KiB of the front's log lines",
        f"each counted once in webhook_front_refusals_total; the front's log rotated past "
        f"{tally.ROTATE_AT_BYTES // 1024} KiB, never growing with the count",
        f"{refused} refusals in {seconds:.1f} s ({refused / seconds:.0f}/s), counted {dict(counted)}; "
        f"the log held {largest / 1024:.0f} KiB at most",
    )


@pytest.mark.system
@pytest.mark.alone
def test_unfinished_heads_on_the_scrapers_port_hold_no_delivery(edge, figures):
    metrics = ("127.0.0.1", edge.metrics_port)
    scrapes = Counter()
    stop = threading.Event()

    def scrape_until_stopped():
        while not stop.is_set():
            scrapes[requests.get(edge.metrics_url, timeout=10).status_code] += 1

    with framing.Held(metrics, b"GET /metrics HTTP/1.1\r\nHost: scraper\r\n", 200) as held:
        scrapers = [threading.Thread(target=scrape_until_stopped) for _ in range(16)]
        for scraper in scrapers:
            scraper.start()
        try:
            time.sleep(0.5)
            slowest, healthz_s = _served_through_proxy(edge)
        finally:
            stop.set()
            for scraper in scrapers:
                scraper.join()
        held_open = held.poll().count("open")

    assert held_open == 200
    assert slowest < 1 and healthz_s < 1
    assert scrapes[200] > 0 and set(scrapes) <= {200, 429}
    figures.record(
        "200 unfinished request heads on METRICS_PORT, and 16 scrapers asking /metrics in a loop",
        "the front holds the heads and hands gunicorn a few scrapes at a time: signed deliveries and "
        "/healthz answered within 1 s meanwhile",
        f"all 200 held; scrapes {dict(scrapes)}; slowest delivery {slowest * 1000:.0f} ms, /healthz "
        f"{healthz_s * 1000:.0f} ms",
    )


@pytest.mark.system
@pytest.mark.alone
def test_a_trickle_flood_from_ten_addresses_starves_no_delivery_with_the_defaults(server_url, figures):
    """Issue 33's flood, at full size but for seconds (`python -m bench.flood` runs it for longer)."""
    attack = flood.Attack(addresses=10, per_address=490)
    with served(server_url, WEB_CONCURRENCY=2, STRIPE_WEBHOOK_SECRET=flood.SECRET) as server:
        nginx = next(p.pid for p in psutil.Process(server.proc.pid).children() if p.name() == "nginx")
        outcome = flood.measure(server.url, lambda: tally.with_children(nginx), attack, sized(6, 20))
        log = server.output()

    assert outcome.held_most >= 0.95 * attack.addresses * attack.per_address
    assert outcome.passed(), (outcome.deliveries, outcome.healthz)
    assert "worker_connections are not enough" not in log
    figures.record(
        f"{attack.addresses} addresses x {attack.per_address} connections, each a POST declaring "
        f"Content-Length {attack.length} and sending a byte every {attack.interval_s:g} s, reopened when "
        "cut; the service's defaults",
        "every signed delivery from another address answered 200 within 2 s and /healthz within 1 s; "
        "nginx never runs out of connections",
        f"{outcome.held_most} attack connections held at once; deliveries {outcome.deliveries.summary()}; "
        f"/healthz {outcome.healthz.summary()}; front memory {outcome.memory_before_mib:.0f} → "
        f"{outcome.memory_peak_mib:.0f} MiB",
    )


def test_refresh_writes_a_providers_published_list_after_checking_every_entry(tmp_path):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / "ips_webhooks.json").write_text(json.dumps({"WEBHOOKS": ["54.187.216.72", "3.18.12.63"]}))
    (downloads / "meta.json").write_text(
        json.dumps({"hooks": ["192.30.252.0/22", "2a0a:a440::/29"], "web": []})
    )
    (downloads / "ips_webhooks.txt").write_text("3.18.12.63\n\n13.235.14.237\n")
    env = {"WEBHOOK_ALLOWLIST_DIR": str(tmp_path)}

    said = {
        name: called("allowlist", "refresh", provider, str(downloads / name), **env)
        for provider, name in (("stripe", "ips_webhooks.json"), ("github", "meta.json"))
    }
    github = (tmp_path / "github.txt").read_text()
    again = called("allowlist", "refresh", "stripe", str(downloads / "ips_webhooks.txt"), **env)

    assert all(ran.returncode == 0 and ran.stderr == "" for ran in [*said.values(), again])
    assert said["ips_webhooks.json"].stdout == (
        f"stripe: 2 addresses and networks written to {tmp_path / 'stripe.txt'} (2 added, 0 removed); "
        "restart serve to apply\n"
    )
    assert [line for line in github.splitlines() if not line.startswith("#")] == [
        "192.30.252.0/22",
        "2a0a:a440::/29",
    ]
    assert "(1 added, 1 removed)" in again.stdout
    assert front.read_allowlist(tmp_path / "stripe.txt") == ["3.18.12.63", "13.235.14.237"]


@pytest.mark.parametrize(
    "content, said",
    [
        (
            '{"WEBHOOKS": ["3.18.12.63", "3.18.12.999"]}',
            ": WEBHOOKS item 2: '3.18.12.999' is not an IP address or network",
        ),
        ('{"WEBHOOKS": ["3.18.12.63", 7]}', ": WEBHOOKS item 2: 7 is not an IP address or network"),
        (
            '{"hooks": ["192.30.252.0/22"]}',
            ": no 'WEBHOOKS' list in it (is it https://stripe.com/files/ips/ips_webhooks.json?)",
        ),
        ('{"WEBHOOKS": []}', " lists no address: it would refuse every delivery"),
        ("3.18.12.63\n<html>\n", " line 2: '<html>' is not an IP address or network"),
        # An IPv6 scope id is any text after `%` to Python: here, a directive for nginx.
        ("3.18.12.63\nfe80::1%eth0;allow all\n", " line 2: 'fe80::1%eth0;allow all' has a scope id"),
        ('{"WEBHOOKS": ["fe80::1%eth0"]}', ": WEBHOOKS item 1: 'fe80::1%eth0' has a scope id"),
        ("# nothing\n", " lists no address: it would refuse every delivery"),
    ],
)
def test_refresh_changes_nothing_on_a_file_that_is_not_a_list_and_names_the_entry(tmp_path, content, said):
    (tmp_path / "stripe.txt").write_text("3.18.12.63\n")
    downloaded = tmp_path / "downloaded"
    downloaded.write_text(content)

    # As a process: the exit status and the one line a shell sees.
    ran = command("allowlist", "refresh", "stripe", str(downloaded), WEBHOOK_ALLOWLIST_DIR=str(tmp_path))

    assert one_error_line(ran).startswith(f"error: {downloaded}{said}")
    assert (tmp_path / "stripe.txt").read_text() == "3.18.12.63\n"


def test_refresh_writes_through_no_link_planted_in_the_lists_folder(tmp_path):
    """The list's folder may be one another user can write; whoever runs refresh (root, often) writes
    only the list."""
    victim = tmp_path / "victim"
    victim.write_text("only its owner's\n")
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "stripe.txt.new").symlink_to(victim)
    downloaded = tmp_path / "ips_webhooks.txt"
    downloaded.write_text("3.18.12.63\n")

    ran = command("allowlist", "refresh", "stripe", str(downloaded), WEBHOOK_ALLOWLIST_DIR=str(lists))

    assert ran.returncode == 0, ran.stderr
    assert victim.read_text() == "only its owner's\n"
    assert front.read_allowlist(lists / "stripe.txt") == ["3.18.12.63"]
    assert sorted(p.name for p in lists.iterdir()) == ["stripe.txt"]
