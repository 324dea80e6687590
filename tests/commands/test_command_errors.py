"""Each mistake a new user makes is one line on stderr naming the setting or file at fault.

Every test runs the real command and asserts the whole of what it said:
exactly one `error:` line, a non-zero exit, nothing on stdout that reads
like work done, and no traceback. Each command runs as a process (`webhooks
...`, `command`) at least once, for the exit status and the line a shell
sees; the matrices of settings and values call it in the test's process
(`called`), where only the answer differs from one case to the next.
"""

import os
import re
import socket
import subprocess
import sys

import pytest

from tests import conftest
from tests.conftest import ROOT
from tests.support import ports
from tests.support.commands import called, command
from tests.support.downstream import Worker
from tests.web.test_startup_checks import started, unmigrated_url  # noqa: F401 (fixtures)
from webhooks.infra import embedded


def one_error_line(ran: subprocess.CompletedProcess) -> str:
    """The one line a failed command said; it failed, and nothing else was said."""
    assert ran.returncode != 0, ran.stdout
    assert ran.stdout == "", ran.stdout
    assert "Traceback" not in ran.stderr
    [line] = ran.stderr.splitlines()
    assert line.startswith("error: ")
    return line


# Commands that read the settings before anything else.
SETTINGS_READERS = [
    ("events", "list"),
    ("serve",),
    ("prune", "--older-than", "30d"),
    ("replay", "--secret", "whsec_test", str(ROOT / "tests" / "stripe_events" / "charge.succeeded.json")),
]


@pytest.mark.parametrize(
    "setting, value, said",
    [
        ("PORT", "abc", "error: PORT: 'abc' is not a whole number"),
        ("PORT", "70000", "error: PORT: 70000 is not a port number (1 to 65535)"),
        (
            "DATABASE_URL",
            "localhost:5432/shop",
            "error: DATABASE_URL: not a PostgreSQL URL like postgresql://USER:PASSWORD@HOST:5432/DBNAME",
        ),
        (
            "WEBHOOK_POOL_TIMEOUT_SECONDS",
            "half",
            "error: WEBHOOK_POOL_TIMEOUT_SECONDS: 'half' is not a number",
        ),
        ("LOG_LEVEL", "loud", "error: LOG_LEVEL: 'loud' is not one of DEBUG, INFO, WARNING, ERROR"),
    ],
)
@pytest.mark.parametrize("argv", SETTINGS_READERS)
def test_a_setting_that_cannot_be_parsed_is_named_in_one_line(argv, setting, value, said):
    assert one_error_line(called(*argv, **{setting: value})) == said


@pytest.mark.parametrize("argv", SETTINGS_READERS)
def test_a_command_started_as_a_process_names_a_bad_setting_in_one_line_and_exits_1(argv):
    ran = command(*argv, PORT="abc")
    assert one_error_line(ran) == "error: PORT: 'abc' is not a whole number"
    assert ran.returncode == 1


@pytest.mark.parametrize(
    "env, said",
    [
        ({"WEBHOOK_MAX_BODY_BYTES": "-1"}, "WEBHOOK_MAX_BODY_BYTES: must be at least 1, not -1"),
        (
            {"WEBHOOK_FRONT_CONNECTIONS_PER_CLIENT": "0"},
            "WEBHOOK_FRONT_CONNECTIONS_PER_CLIENT: must be at least 1, not 0",
        ),
        ({"WEBHOOK_FRONT_CONNECTIONS": "4"}, "WEBHOOK_FRONT_CONNECTIONS: must be at least 16, not 4"),
        ({"PORT": "0"}, "PORT: 0 is not a port number (1 to 65535)"),
        (
            {"HOST": "0.0.0.0:8000;\n    user root;"},
            "HOST: '0.0.0.0:8000;\\n    user root;' is not an IP address or a host name",
        ),
        (
            {"METRICS_HOST": "127.0.0.1 ssl"},
            "METRICS_HOST: '127.0.0.1 ssl' is not an IP address or a host name",
        ),
        (
            {"WEBHOOK_REQUEST_READ_TIMEOUT_SECONDS": "0"},
            "WEBHOOK_REQUEST_READ_TIMEOUT_SECONDS: '0' is not a timeout from 0.001 to 3600 seconds",
        ),
        (
            {"WEBHOOK_FRONT_DIR": "/tmp/front;"},
            "WEBHOOK_FRONT_DIR: '/tmp/front;' is not an absolute path without spaces, quotes or ;{}$#",
        ),
        (
            {"WEBHOOK_TRUSTED_PROXIES": "10.0.0.0/8;allow all"},
            "WEBHOOK_TRUSTED_PROXIES: '10.0.0.0/8;allow all' is not an IP address or network",
        ),
        (
            {"WEBHOOK_TRUSTED_PROXIES": "::1%1;return 418"},
            "WEBHOOK_TRUSTED_PROXIES: '::1%1;return 418' has a scope id (%...): "
            "name the address or network without one",
        ),
        (
            {"STRIPE_WEBHOOK_ALLOWLIST": "maybe"},
            "STRIPE_WEBHOOK_ALLOWLIST: 'maybe' is not on or off (also true/false, yes/no, 1/0)",
        ),
        (
            {"WEBHOOK_PROXY_PROTOCOL": "on"},
            "WEBHOOK_PROXY_PROTOCOL: on, but WEBHOOK_TRUSTED_PROXIES names no proxy to take the client from",
        ),
    ],
)
@pytest.mark.system
def test_serve_refuses_a_setting_rendered_into_the_fronts_config_before_anything_serves(env, said):
    conftest.require_front()
    port = env.get("PORT") or str(ports.free_port())
    ran = command("serve", **{"PORT": port, **env})

    assert one_error_line(ran) == f"error: {said}"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", int(port) or 1), timeout=1)


@pytest.mark.system
@pytest.mark.parametrize(
    "line, said",
    [
        ("3.18.12.999", "'3.18.12.999' is not an IP address or network"),
        # Written by hand, past `allowlist refresh`: still refused at start, before nginx reads it.
        ("fe80::1%eth0;allow all", "'fe80::1%eth0;allow all' has a scope id"),
    ],
)
def test_serve_names_the_line_of_an_allowlist_that_is_not_one(tmp_path, line, said):
    conftest.require_front()
    (tmp_path / "stripe.txt").write_text(f"# Stripe's\n3.18.12.63\n{line}\n")
    ran = command(
        "serve",
        PORT=str(ports.free_port()),
        STRIPE_WEBHOOK_ALLOWLIST="on",
        WEBHOOK_ALLOWLIST_DIR=str(tmp_path),
    )
    assert one_error_line(ran).startswith(
        f"error: STRIPE_WEBHOOK_ALLOWLIST: {tmp_path / 'stripe.txt'} line 3: {said}"
    )


@pytest.mark.system
def test_serve_reads_no_allowlist_through_a_link_so_no_other_file_is_read_or_quoted(tmp_path):
    conftest.require_front()
    secret = tmp_path / "secret"
    secret.write_text("hunter2-never-quoted\n")
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "stripe.txt").symlink_to(secret)
    ran = command(
        "serve",
        PORT=str(ports.free_port()),
        STRIPE_WEBHOOK_ALLOWLIST="on",
        WEBHOOK_ALLOWLIST_DIR=str(tmp_path / "lists"),
    )
    link = tmp_path / "lists" / "stripe.txt"
    assert one_error_line(ran) == f"error: STRIPE_WEBHOOK_ALLOWLIST: {link} is a link: name the file itself"
    assert "hunter2" not in ran.stderr + ran.stdout


def test_a_database_url_that_is_not_a_url_does_not_echo_its_password():
    line = one_error_line(command("events", "list", DATABASE_URL="postgres:/shop:hunter2@db/shop"))
    assert line.startswith("error: DATABASE_URL: not a PostgreSQL URL") and "hunter2" not in line


@pytest.mark.parametrize("argv", [("serve",), ("worker",)])
def test_a_typo_in_the_handler_modules_names_the_setting_and_the_module(database_url, argv):
    ran = command(
        *argv,
        DATABASE_URL=database_url,
        PORT=str(ports.free_port()),
        WEBHOOK_OUTBOX_URL="http://127.0.0.1:9/",
        WEBHOOK_HANDLER_MODULES="tests.support.handlers,tests.handlrs",
    )
    assert one_error_line(ran) == (
        "error: WEBHOOK_HANDLER_MODULES: cannot import tests.handlrs: No module named 'tests.handlrs'"
    )


def test_the_worker_without_an_outbox_url_names_the_setting(database_url):
    ran = command("worker", DATABASE_URL=database_url, WEBHOOK_OUTBOX_URL="")
    assert (
        one_error_line(ran) == "error: WEBHOOK_OUTBOX_URL is not set: the worker POSTs each outbox job there"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ("events", "list"),
        ("events", "show", "evt_1"),
        ("prune", "--older-than", "30d"),
        ("maintenance",),
        ("replay", "--id", "evt_1", "--secret", "whsec_test"),
    ],
)
def test_an_unmigrated_database_says_run_migrate(unmigrated_url, argv):  # noqa: F811
    line = one_error_line(called(*argv, DATABASE_URL=unmigrated_url))
    assert line.startswith("error: the database is not migrated (DATABASE_URL's database ")
    assert line.endswith("): run `webhooks migrate` first")


def test_a_reader_that_stops_early_ends_the_listing_quietly(database_url):
    """`events list | head`: no `Broken pipe` error, the exit status of a program a closed pipe ended."""
    listing = subprocess.Popen(
        [sys.executable, "-m", "webhooks", "events", "list"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    listing.stdout.close()  # the reader is gone before the first line
    assert listing.stderr.read() == b""
    assert listing.wait(timeout=60) == 141


def test_replay_with_nothing_listening_says_where_it_sent_in_one_line():
    url = f"http://127.0.0.1:{ports.free_port()}/webhooks/stripe"
    sample = ROOT / "tests" / "stripe_events" / "charge.succeeded.json"
    ran = command("replay", "--url", url, "--secret", "whsec_test", "--times", "2", str(sample))
    assert one_error_line(ran) == (
        f"error: replay: nothing answered at {url}: "
        "is the service running there? (./bin/serve, PORT or --url)"
    )


# One delivery of each event of one payment, not retried.
ONE_TRY = ("--secret", "whsec_test", "-n", "1", "-k", "1", "--retry-budget", "1")


def test_loadtest_with_nothing_listening_says_so_and_prints_no_tables():
    url = f"http://127.0.0.1:{ports.free_port()}/webhooks/stripe"
    ran = command("loadtest", "--url", url, *ONE_TRY)
    line = one_error_line(ran)
    assert line.startswith(f"error: loadtest: no delivery to {url} was accepted: no answer: ")
    assert line.endswith("is the service running there? (./bin/serve, PORT or --url)")


def test_loadtest_against_a_service_without_its_secret_names_the_setting(database_url, started):  # noqa: F811
    server = started({**conftest.service_env(database_url), "STRIPE_WEBHOOK_SECRET": ""})
    ran = command("loadtest", "--url", server.url + "/webhooks/stripe", *ONE_TRY)
    assert re.search(
        r"was accepted: 503 webhook_secret_missing \(\d+ times\); "
        "the service has no STRIPE_WEBHOOK_SECRET: set it where the service runs$",
        one_error_line(ran),
    )


def test_a_worker_whose_embedded_database_is_stopped_says_which_and_exits(data_dir):  # noqa: F811
    env = {"DATABASE_URL": "", "WEBHOOK_DATA_DIR": data_dir}
    assert command("migrate", **env).returncode == 0
    worker = Worker({**env, "WEBHOOK_OUTBOX_URL": "http://127.0.0.1:9/"})
    try:
        worker.wait_started()
        assert command("db", "stop", **env).returncode == 0  # what bin/serve does as it exits
        worker.proc.wait(timeout=60)
    finally:
        worker.stop()
    assert worker.proc.returncode == 1
    errors = [line for line in worker.output().splitlines() if not line.startswith("{")]
    assert errors == [
        f"error: the embedded PostgreSQL in {embedded.pgdata(data_dir)} stopped "
        "(bin/serve stops the one it started when it exits; `webhooks db url` starts it)"
    ]
    assert "Traceback" not in worker.output()


def test_the_console_script_is_the_same_command_from_any_folder(tmp_path):
    script = ROOT / ".venv" / "bin" / "webhooks"
    if not script.exists():
        pytest.skip("no .venv: bin/setup installs the `webhooks` command there")
    ran = subprocess.run(
        [str(script), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True
    )
    assert ran.stdout.startswith("usage: webhooks ")


@pytest.mark.parametrize(
    "url, said",
    [
        ("http://x y/", "has whitespace or a control character in it"),
        ("http://receiver.internal/\r\nHost: elsewhere", "has whitespace or a control character in it"),
        ("http://receiver.internal:99999/", "the port after 'receiver.internal' is not a port number"),
    ],
)
def test_the_worker_refuses_an_outbox_url_no_delivery_could_reach_in_one_line(database_url, url, said):
    ran = called("worker", DATABASE_URL=database_url, WEBHOOK_OUTBOX_URL=url)
    assert one_error_line(ran).startswith(f"error: WEBHOOK_OUTBOX_URL: {said}")


def test_an_argument_no_command_takes_is_one_usage_error_naming_it_and_every_command():
    """A command parses with its own module only (webhooks/commands/__init__.py); its usage error
    still names every command, as `webhooks --help` does."""
    ran = called("events", "list", "--bogus")
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.splitlines()[-1] == "webhooks: error: unrecognized arguments: --bogus"
    assert "{install,migrate,serve," in ran.stderr and "allowlist}" in ran.stderr
