"""`backfill` and `reconcile` answer each way Stripe's API can fail with one line: its cause and its fix."""

import pytest

from tests.support.stripe_api import stand_in, stand_in_env  # noqa: F401  (fixtures)
from webhooks import commands as cli

COMMANDS = [["backfill", "--since", "72h"], ["reconcile", "--since", "72h"]]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0])
@pytest.mark.parametrize(
    ("status", "said"),
    [
        (401, ["refused STRIPE_API_KEY (401", "set a current secret or restricted key"]),
        (403, ["may not read /v1/", "(403): give the restricted key read access"]),
        (429, ["rate limit (429)", "run it again in a minute"]),
        (503, ["Stripe's API failed (503)", "status.stripe.com"]),
    ],
)
def test_an_api_failure_is_one_line_with_its_cause_and_fix(
    argv, status, said, stand_in_env, stand_in, capsys
):
    stand_in.fail(lambda path, query: True, times=100, status=status)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{argv[0]}: "), err
    assert all(part in err for part in said), err
    assert "support@stripe.com" not in err and "rerun" not in err


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0])
def test_an_unreachable_api_is_one_line_naming_the_network(argv, stand_in_env, monkeypatch, capsys):
    monkeypatch.setenv("STRIPE_API_BASE", "http://127.0.0.1:1")
    monkeypatch.setenv("STRIPE_API_RETRIES", "0")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach Stripe's API" in err and "STRIPE_API_BASE" in err, err
    assert "support@stripe.com" not in err
