"""The installed `webhooks` and `python -m webhooks` find the shop's handlers alike, from the cwd."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.commands import ROOT

HANDLERS = """
from webhooks import fulfilment


@fulfilment.handles("customer.created")
def welcome(conn, event):
    return "welcomed"
"""


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("")
    (tmp_path / "shop" / "handlers.py").write_text(HANDLERS)
    return tmp_path


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "WEBHOOK_HANDLER_MODULES": "shop.handlers", **extra}


@pytest.mark.parametrize(
    "entry",
    [[str(Path(sys.executable).parent / "webhooks")], [sys.executable, "-m", "webhooks"]],
    ids=["installed-script", "python-m"],
)
def test_both_entry_points_load_the_shops_handlers_from_the_current_directory(entry, shop, database_url):
    ran = subprocess.run(
        [*entry, "events", "reprocess", "evt_not_stored"],
        cwd=shop,
        env=environment(DATABASE_URL=database_url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Past the handlers' import (which would say `cannot import shop.handlers`), to the ledger.
    assert ran.returncode == 1 and "cannot import" not in ran.stderr, ran.stderr
    assert ran.stdout == "no stored payload for evt_not_stored\n"


def test_python_m_without_the_requirements_says_how_to_get_them_in_one_line():
    # -S: no site-packages, as the system's python3 beside an unset-up project.
    ran = subprocess.run(
        [sys.executable, "-S", "-m", "webhooks", "--help"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 1 and ran.stderr.count("\n") == 1, ran.stderr
    assert "bin/setup" in ran.stderr and ".venv/bin/python -m webhooks" in ran.stderr
    assert "Traceback" not in ran.stderr
