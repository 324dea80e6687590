"""Install once, serve many times: `python -m webhooks install` makes, `serve` started as root only checks.

The users, the folders above Python's path and the embedded database's
folder are the install step's, run once as root (bin/serve runs it first
when root runs it). A start that finds it not done stops with one line
naming it, and has made no user and changed no folder's mode.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.commands import ROOT, command
from webhooks.infra import embedded, privilege
from webhooks.infra.config import Settings

as_root = pytest.mark.skipif(
    not privilege.as_root(), reason="only root makes users and starts serve as root (CI does)"
)


_WEBHOOKS = [sys.executable, "-m", "webhooks"]


def _one_error_line(ran: subprocess.CompletedProcess) -> str:
    assert ran.returncode == 1, ran.stderr
    [line] = ran.stderr.splitlines()
    return line


def _passwd_and_group() -> tuple[bytes, bytes]:
    return Path("/etc/passwd").read_bytes(), Path("/etc/group").read_bytes()


@pytest.mark.system
@as_root
def test_serve_as_root_names_the_install_step_for_a_user_not_made_and_makes_none(database_url):
    before = _passwd_and_group()
    ran = command("serve", DATABASE_URL=database_url, WEBHOOK_SERVICE_USER="webhooks-never-made")

    assert _one_error_line(ran) == (
        "error: WEBHOOK_SERVICE_USER: the user webhooks-never-made does not exist: "
        "run `python -m webhooks install` as root once, which makes it"
    )
    with pytest.raises(KeyError):
        pwd.getpwnam("webhooks-never-made")
    assert _passwd_and_group() == before


@pytest.mark.system
@as_root
def test_serve_as_root_opens_no_folder_above_pythons_path_and_names_the_install_step(database_url):
    """A handler folder below one only root may enter (0700, as /root is): once, serve opened it for good."""
    closed = Path(tempfile.mkdtemp(prefix="webhooks-closed-"))
    try:
        (closed / "handlers").mkdir(mode=0o755)
        ran = command("serve", DATABASE_URL=database_url, PYTHONPATH=f"{ROOT}:{closed / 'handlers'}")

        line = _one_error_line(ran)
        assert line.startswith(f"error: WEBHOOK_SERVICE_USER: webhooks cannot read {closed / 'handlers'}")
        assert "run `python -m webhooks install` as root" in line
        assert stat.S_IMODE(closed.stat().st_mode) == 0o700
    finally:
        subprocess.run(["rm", "-rf", str(closed)], check=True)


@pytest.mark.system
@as_root
def test_serve_as_root_names_the_install_step_for_an_embedded_database_not_made(data_dir):
    folder = embedded.pgdata(data_dir)
    ran = command("serve", DATABASE_URL="", WEBHOOK_DATA_DIR=data_dir)

    assert _one_error_line(ran) == (
        f"error: WEBHOOK_DATA_DIR: there is no embedded database in {folder}: "
        "run `python -m webhooks install` as root once, which makes it"
    )
    assert not folder.exists()


@pytest.mark.system
@as_root
@pytest.mark.alone  # it compares the whole machine's users before and after
def test_install_makes_what_serve_checks_and_a_second_run_changes_nothing(data_dir):
    env = {
        "DATABASE_URL": "",
        "WEBHOOK_DATA_DIR": data_dir,
        "WEBHOOK_SERVICE_USER": "webhooks-install-t",
        "WEBHOOK_FRONT_USER": "webhooks-install-f",
    }
    settings = Settings.from_env(env)
    try:
        first = command("install", **env)
        assert first.returncode == 0, first.stderr
        said = first.stdout.splitlines()[-1]
        assert said.startswith("install: users webhooks-install-t and webhooks-install-f, ")
        made = _passwd_and_group()
        folder = embedded.pgdata(data_dir)
        mode = folder.stat().st_mode

        again = command("install", **env)

        assert again.returncode == 0 and again.stdout.splitlines() == [said], again.stdout
        assert _passwd_and_group() == made and folder.stat().st_mode == mode
        # What serve checks, as root, before it starts anything.
        service = privilege.service_account(settings)
        privilege.front_account(settings)
        privilege.check_import_path(service)
        embedded.check_admitted(folder, service)
        assert not embedded.running(folder)  # started for the step, stopped after it
    finally:
        for user in ("webhooks-install-t", "webhooks-install-f"):
            subprocess.run(
                ["userdel", user], capture_output=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
            )


def test_install_without_root_has_nothing_to_make():
    if privilege.as_root():
        ran = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *_WEBHOOKS, "install"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    else:
        ran = command("install")
    assert ran.returncode == 0, ran.stderr
    assert (
        ran.stdout == "install: nothing to make without root: every process runs as the user who starts it\n"
    )


@pytest.mark.system
@as_root
def test_a_metrics_folder_the_service_user_cannot_write_is_one_line_before_serving(database_url):
    """Through serve, and through the Procfile's gunicorn alone: one line, not every worker's traceback."""
    closed = Path(tempfile.mkdtemp(prefix="webhooks-closed-"))
    metrics = closed / "metrics"
    metrics.mkdir()
    said = f"error: PROMETHEUS_MULTIPROC_DIR: webhooks cannot make files in {metrics}: name a folder it owns"
    try:
        served = command("serve", DATABASE_URL=database_url, PROMETHEUS_MULTIPROC_DIR=str(metrics))
        alone = subprocess.run(
            [sys.executable, "-m", "gunicorn", "--config", "gunicorn.conf.py", "wsgi:app"],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": database_url, "PROMETHEUS_MULTIPROC_DIR": str(metrics)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert _one_error_line(served) == said
        assert alone.returncode != 0 and alone.stderr.strip().splitlines()[-1] == said, alone.stderr
        assert "Traceback" not in alone.stderr and "Worker failed to boot" not in alone.stderr
    finally:
        subprocess.run(["rm", "-rf", str(closed)], check=True)
