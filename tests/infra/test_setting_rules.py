"""Every setting has a rule: a value no delivery could succeed with is one line naming the variable."""

import re

import pytest

from tests.test_docs import documented
from webhooks.infra.config import RULES, Process, SettingError, Settings, serving

# A value each documented variable must refuse; None for the few that are free
# text no rule can judge (a path, a binary's name, a header's secret). A new
# setting fails here until it has its line.
BAD: dict[str, str | None] = {
    "DATABASE_URL": "localhost:5432/shop",
    "WEBHOOK_DATA_DIR": None,
    "STRIPE_WEBHOOK_SECRET": "we_1PrefixlessSecret",
    "STANDARD_WEBHOOKS_SECRET": "whsec_not*base64!",
    "GITHUB_WEBHOOK_SECRET": None,
    "SHOPIFY_WEBHOOK_SECRET": None,
    "PORT": "80000",
    "HOST": "local host",
    "METRICS_PORT": "0",
    "METRICS_HOST": "127.0.0.1;",
    "ADMIN_PORT": "65536",
    "ADMIN_HOST": "127.0.0.1 ;",
    "WEBHOOK_FRONT_DIR": "relative/dir",
    "WEBHOOK_FRONT_CONNECTIONS": "8",
    "WEBHOOK_FRONT_CONNECTIONS_PER_CLIENT": "0",
    "STRIPE_WEBHOOK_ALLOWLIST": "maybe",
    "GITHUB_WEBHOOK_ALLOWLIST": "2",
    "WEBHOOK_ALLOWLIST_DIR": None,
    "WEBHOOK_TRUSTED_PROXIES": "10.0.0.0/33",
    "WEBHOOK_PROXY_PROTOCOL": "sometimes",
    "WEBHOOK_NGINX": None,
    "WEBHOOK_SERVICE_USER": "web hooks",
    "WEBHOOK_FRONT_USER": "1front;",
    "WEBHOOK_REQUEST_READ_TIMEOUT_SECONDS": "0",
    "WEBHOOK_LOCK_TIMEOUT_MS": "0",
    "WEBHOOK_STATEMENT_TIMEOUT_MS": "-5",
    "WEBHOOK_IDLE_IN_TRANSACTION_TIMEOUT_MS": "soon",
    "WEBHOOK_MAX_BODY_BYTES": "0",
    "WEBHOOK_TOLERANCE_SECONDS": "0",
    "WEBHOOK_POOL_MIN_SIZE": "0",
    "WEBHOOK_POOL_MAX_SIZE": "-3",
    "WEBHOOK_POOL_TIMEOUT_SECONDS": "-1",
    "WEBHOOK_DB_DEAD_PEER_SECONDS": "nan",
    "WEBHOOK_HANDLER_MODULES": "shop/handlers.py",
    "STRIPE_MODE": "prod",
    "WEBHOOK_ORDER_MARKER_KEY": "order[id]",
    "STRIPE_API_VERSIONS": "2025-01-01..2020-01-01",
    "WEBHOOK_OUTBOX_URL": "receiver.internal/hooks",
    "WEBHOOK_OUTBOX_MAX_ATTEMPTS": "0",
    "WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS": "0",
    "WEBHOOK_OUTBOX_BACKOFF_MAX_SECONDS": "-1",
    "WEBHOOK_OUTBOX_HTTP_TIMEOUT_SECONDS": "0",
    "WEBHOOK_OUTBOX_POLL_SECONDS": "inf",
    "WEBHOOK_OUTBOX_HEARTBEAT_TIMEOUT_SECONDS": "0",
    "WEBHOOK_OUTBOX_CONCURRENCY": "0",
    "WEBHOOK_ADMIN_TOKEN": "secret",
    "WEBHOOK_REDACT_FIELDS": None,
    "WEBHOOK_SUBSCRIPTION_GRACE": "3 days",
    "WEBHOOK_SUBSCRIPTION_RENEWAL_MARGIN": "-2h",
    "WEBHOOK_ACCESS_SWEEP_SECONDS": "0",
    "STRIPE_API_KEY": "pk_test_publishable",
    "STRIPE_API_VERSION": "latest",
    "STRIPE_API_BASE": "api.stripe.com",
    "STRIPE_API_TIMEOUT_SECONDS": "0",
    "STRIPE_API_RETRIES": "-1",
    "STRIPE_CONNECT_ACCOUNTS": "cus_123",
    "WEBHOOK_FULFIL_TOKEN": "short",
    "WEBHOOK_FULFIL_RATE_PER_MINUTE": "0",
    "WEBHOOK_FULFIL_STRIPE_TIMEOUT_SECONDS": "-1",
    "WEB_CONCURRENCY": "two",
    "GUNICORN_THREADS": "0",
    "GUNICORN_WORKER_CLASS": "g thread",
    "GUNICORN_TIMEOUT": "0",
    "GUNICORN_LOG_LEVEL": "loud",
    "LOG_LEVEL": "loud",
    "PROMETHEUS_MULTIPROC_DIR": None,
}


def test_every_documented_variable_has_a_rule_and_a_bad_value_here():
    variables = documented("Settings") | documented("Read by the processes themselves")
    assert sorted(variables - set(RULES)) == [], "documented variables without a rule in config.py"
    assert sorted(set(RULES) - variables) == [], "rules for variables docs/configuration.md does not list"
    assert sorted(variables ^ set(BAD)) == [], "give each variable a value it must refuse (or None)"


@pytest.mark.parametrize("variable", sorted(name for name, bad in BAD.items() if bad is not None))
def test_a_bad_value_is_one_line_naming_its_variable(variable):
    with pytest.raises(SettingError) as refused:
        serving({variable: BAD[variable]})
    message = str(refused.value)
    assert message.startswith(f"{variable}: ") and "\n" not in message


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"WEBHOOK_POOL_MIN_SIZE": "4", "WEBHOOK_POOL_MAX_SIZE": "2"}, "WEBHOOK_POOL_MIN_SIZE"),
        (
            {"WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS": "60", "WEBHOOK_OUTBOX_BACKOFF_MAX_SECONDS": "30"},
            "WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS",
        ),
        ({"WEBHOOK_PROXY_PROTOCOL": "on"}, "WEBHOOK_PROXY_PROTOCOL"),
        ({"PORT": "9000", "METRICS_PORT": "9000"}, "METRICS_PORT"),
        ({"PORT": "9000", "ADMIN_PORT": "9000"}, "ADMIN_PORT"),
        ({"METRICS_PORT": "9100", "ADMIN_PORT": "9100"}, "ADMIN_PORT"),
        ({"STRIPE_MODE": "live", "STRIPE_API_KEY": "rk_test_abc"}, "STRIPE_API_KEY"),
        ({"WEBHOOK_FULFIL_TOKEN": "a-long-enough-fulfil-token"}, "WEBHOOK_FULFIL_TOKEN"),
        # Under gunicorn the pool follows the threads: four threads, a floor of six.
        ({"GUNICORN_THREADS": "4", "WEBHOOK_POOL_MIN_SIZE": "6"}, "WEBHOOK_POOL_MIN_SIZE"),
    ],
)
def test_settings_that_disagree_are_refused_naming_the_first(env, named):
    with pytest.raises(SettingError, match=f"^{named}: "):
        serving(env)


def test_an_api_key_given_as_the_signing_secret_is_named_by_its_prefix_only():
    pasted = "sk_live_51Hn" + "x" * 20
    with pytest.raises(SettingError) as refused:
        Settings.from_env({"STRIPE_WEBHOOK_SECRET": f"whsec_ok,{pasted}"})
    assert "sk_live_..." in str(refused.value) and "whsec_" in str(refused.value)
    assert pasted not in str(refused.value)


def test_good_values_pass_and_the_pool_follows_the_threads_under_gunicorn():
    settings, process = serving(
        {"GUNICORN_THREADS": "12", "WEB_CONCURRENCY": "3", "STRIPE_API_KEY": "rk_test_x"}
    )
    assert (process.threads, process.workers, settings.pool_max_size) == (12, 3, 12)
    assert Process.from_env({}).threads == 8 and Settings.from_env({}).pool_max_size == 2
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}\.\w+", Settings().stripe_api_version)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        # Python's ipaddress takes any text after `%` as an IPv6 scope id: here, an nginx directive.
        ("WEBHOOK_TRUSTED_PROXIES", "::1%1;return 418"),
        ("WEBHOOK_TRUSTED_PROXIES", "10.0.0.1,fe80::1%eth0"),
        ("HOST", "::1%1;return 418"),
        ("METRICS_HOST", "fe80::1%eth0"),
    ],
)
def test_an_ipv6_scope_id_is_refused_wherever_an_address_reaches_the_fronts_config(variable, value):
    with pytest.raises(SettingError, match=f"^{variable}: .*scope id"):
        serving({variable: value})


@pytest.mark.parametrize(
    "value",
    [
        "http://x y/",
        "http://receiver.internal/\r\nHost: elsewhere",
        "http://receiver.internal/\thooks",
        "http://receiver.internal:99999/hooks",
        "http://receiver.internal:0/hooks",
        "http://receiver.internal:http/hooks",
        "http://receiver;internal/hooks",
        "http://[fe80::1%25eth0]:8080/hooks",
        "ftp://receiver.internal/hooks",
    ],
)
def test_the_outbox_url_is_parsed_whole_host_port_and_no_whitespace_or_control_character(value):
    with pytest.raises(SettingError) as refused:
        Settings.from_env({"WEBHOOK_OUTBOX_URL": value})
    assert str(refused.value).startswith("WEBHOOK_OUTBOX_URL: ") and "\n" not in str(refused.value)


def test_good_outbox_urls_and_proxies_are_written_back_as_parsed():
    settings = Settings.from_env(
        {
            "WEBHOOK_OUTBOX_URL": " https://user:pw@receiver.internal:8443/hooks?x=1 ",
            "WEBHOOK_TRUSTED_PROXIES": "10.0.0.7/8, 2600:1f18:0::/32, ::1",
        }
    )
    assert settings.outbox_url == "https://user:pw@receiver.internal:8443/hooks?x=1"
    assert settings.trusted_proxies == ("10.0.0.0/8", "2600:1f18::/32", "::1")
    assert (
        Settings.from_env({"WEBHOOK_OUTBOX_URL": "http://[::1]:9000/h"}).outbox_url == "http://[::1]:9000/h"
    )
