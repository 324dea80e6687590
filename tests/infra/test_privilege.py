"""Least privilege on the served stack (`python -m webhooks serve`, issue 33).

Started as root, gunicorn's workers run as the service's user and nginx's
as the front's user in the service's group; gunicorn's socket (0660) lies in
a folder only they may enter (0710), so another local user cannot reach it,
let alone hold its threads with unfinished requests. Without root, every
process is the user who started `serve`, as before.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import tempfile
from pathlib import Path

import psutil
import pytest

from tests.conftest import SERVE, Gunicorn, service_env
from tests.support.commands import command
from tests.support.front import deliver
from webhooks.infra import privilege
from webhooks.infra.config import Settings

NOBODY = 65534

as_root = pytest.mark.skipif(not privilege.as_root(), reason="only root can start serve as root (CI does)")


def _served(server: Gunicorn) -> dict[str, list[psutil.Process]]:
    """serve's gunicorn and nginx: each master, and each master's workers."""
    found: dict[str, list[psutil.Process]] = {}
    for master in psutil.Process(server.proc.pid).children():
        name = "gunicorn" if "gunicorn" in " ".join(master.cmdline()) else master.name()
        found[f"{name} master"] = [master]
        found[f"{name} workers"] = master.children()
    return found


def _groups(process: psutil.Process) -> set[int]:
    status = Path(f"/proc/{process.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("Groups:"))
    return {int(group) for group in line.split()[1:]}


def _identity(process: psutil.Process) -> tuple[set[int], set[int], set[int]]:
    """Its real, effective and saved uids; the same of its gids; its other groups."""
    return set(process.uids()), set(process.gids()), _groups(process)


def _front_folder(server: Gunicorn) -> Path:
    return Path(_served(server)["gunicorn master"][0].environ()["WEBHOOK_FRONT_DIR"])


def _connect_as(uid: int, gid: int, path: Path) -> int:
    """The errno of connecting to `path` as uid:gid in no other group (0: connected), from a child."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(str(path))
        except OSError as exc:
            code = exc.errno or 255
        os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _mode_and_owner(path: Path) -> tuple[int, int, int]:
    info = path.stat()
    return stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid


@pytest.mark.system
@as_root
def test_started_as_root_no_worker_is_root_and_only_the_front_reaches_the_socket(front):
    server = front()
    settings = Settings()
    service, front_user = privilege.service_account(settings), privilege.front_account(settings)
    served = _served(server)
    folder = _front_folder(server)
    sock = folder / "sockets" / "gunicorn.sock"

    assert len(served["gunicorn workers"]) == 2 and served["nginx workers"]
    for worker in served["gunicorn workers"]:
        assert _identity(worker) == ({service.uid}, {service.gid}, set(service.groups()))
    for worker in served["nginx workers"]:
        assert _identity(worker) == ({front_user.uid}, {service.gid}, {service.gid})
    # nginx's master stays root, to bind the public ports; gunicorn, on Unix sockets alone, needs no root.
    assert set(served["nginx master"][0].uids()) == {0}
    assert _identity(served["gunicorn master"][0]) == ({service.uid}, {service.gid}, set(service.groups()))

    assert Path(tempfile.gettempdir()) not in folder.parents
    # The front's folder is root's: the service's user may enter it, and write only in its sockets' folder.
    assert _mode_and_owner(folder) == (0o710, 0, service.gid)
    assert _mode_and_owner(sock.parent) == (0o710, service.uid, service.gid)
    assert stat.S_ISSOCK(sock.stat().st_mode)
    assert _mode_and_owner(sock) == (0o660, service.uid, service.gid)
    assert _connect_as(NOBODY, NOBODY, sock) == errno.EACCES
    assert _connect_as(front_user.uid, front_user.gid, sock) == errno.EACCES  # the group does it
    assert _connect_as(front_user.uid, service.gid, sock) == 0
    # The front reaches gunicorn, and the workers the database, the handlers and the metrics folder.
    deliver(server)


@pytest.mark.system
@as_root
def test_without_root_every_process_is_the_user_who_started_serve(database_url):
    """As on a developer's laptop: here, root starts serve as the service's user."""
    user = privilege.service_account(Settings())
    privilege.open_import_path(user)
    as_user = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups"]
    server = Gunicorn(
        service_env(database_url, WEB_CONCURRENCY=2), SERVE, inside=lambda argv: [*as_user, *argv]
    )
    try:
        served = _served(server)
        folder = _front_folder(server)
        assert all(set(p.uids()) == {user.uid} for processes in served.values() for p in processes)
        assert len(served["gunicorn workers"]) == 2 and served["nginx workers"]
        assert Path(tempfile.gettempdir()) in folder.parents
        assert _mode_and_owner(folder) == (0o700, user.uid, user.gid)
        assert _mode_and_owner(folder / "sockets") == (0o700, user.uid, user.gid)
        assert _mode_and_owner(folder / "sockets" / "gunicorn.sock") == (0o660, user.uid, user.gid)
        assert _connect_as(NOBODY, NOBODY, folder / "sockets" / "gunicorn.sock") == errno.EACCES
        deliver(server)
    finally:
        server.stop()


@pytest.mark.parametrize(
    "setting, value, said",
    [
        pytest.param(
            "WEBHOOK_SERVICE_USER",
            "root",
            "WEBHOOK_SERVICE_USER: root is root; name an unprivileged user",
            marks=pytest.mark.system,
        ),
        ("WEBHOOK_FRONT_USER", "x;\nuser root", "WEBHOOK_FRONT_USER: 'x;\\nuser root' is not a user name"),
    ],
)
def test_a_user_that_is_root_or_no_name_is_one_line_before_anything_serves(
    database_url, setting, value, said
):
    if setting == "WEBHOOK_SERVICE_USER" and not privilege.as_root():
        pytest.skip("only root starts the workers as another user")
    ran = command("serve", DATABASE_URL=database_url, **{setting: value})
    assert ran.returncode == 1
    [line] = ran.stderr.splitlines()
    assert line.startswith(f"error: {said}"), line
