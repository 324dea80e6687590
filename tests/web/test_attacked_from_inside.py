"""Attacked from inside: what the service's user holds after code execution in a worker.

As `webhooks`, a test plants links and replacement files in every folder
the served stack uses (the front's, gunicorn's sockets', the workers' metrics
folder, the front's log), then drives traffic that makes every process of
the stack write and read: refusals the tally counts, a delivery, scrapes. A
root-only file outside those folders must neither change nor leak, and the
service's user must be able to write nothing that root later reads as
config (nginx.conf), state (nginx.pid) or input (the log, the counts).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest
import requests

from tests.support.commands import ROOT, command
from tests.support.front import address, counted_since, deliver, refusals
from webhooks.infra import embedded, privilege
from webhooks.infra.config import Settings

as_root = pytest.mark.skipif(
    not privilege.as_root(), reason="the attack is on what root does (CI runs as root)"
)

# The names root's processes use in the front's folder, and a few it might use by mistake.
_ROOTS_NAMES = (
    "nginx.conf",
    "nginx.pid",
    "refused.log",
    "refused.log.old",
    "refusals.json",
    "refusals.json.new",
)
# Run as the service's user. In each folder, for each name: replace it with a file of
# its own (made in gunicorn's sockets folder, on the same file system as the front's),
# move it aside, put a link to the secret in its place, write into what is there.
# Prints what it managed, as JSON.
_ATTACKER = r"""
import json, os, sys
secret, own, folders, names = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
done = []


def attempt(what, act):
    try:
        act()
        done.append(what)
    except OSError:
        pass


def replace(path):
    with open(own, "w") as planted:
        planted.write("user root;\n")
    os.replace(own, path)


def append(path):
    with open(path, "a") as planted:
        planted.write("400 999 user root;\n")


for folder in folders:
    # A link to the secret's folder, for whatever root removes or walks at stop.
    outside = os.path.join(folder, "outside")
    attempt(f"linked {outside}", lambda: os.symlink(os.path.dirname(secret), outside))
    for name in names:
        path = os.path.join(folder, name)
        attempt(f"replaced {path}", lambda: replace(path))
        attempt(f"moved {path}", lambda: os.rename(path, path + ".gone"))
        attempt(f"linked {path}", lambda: os.symlink(secret, path))
        attempt(f"wrote {path}", lambda: append(path))
print(json.dumps(done))
"""


def _state(path: Path) -> tuple:
    info = path.stat()
    return path.read_bytes(), stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid, info.st_mtime_ns


def _as_service(account: privilege.Account, *argv: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _ATTACKER, *argv],
        **privilege.as_user(account),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _front_folder(server) -> Path:
    for child in psutil.Process(server.proc.pid).children():
        argv = child.cmdline()
        if "-p" in argv and "nginx" in Path(argv[0]).name:
            return Path(argv[argv.index("-p") + 1])
    raise AssertionError("no nginx under serve")


def _refused_framing(server) -> None:
    """A request nginx refuses (a transfer coding it does not know): one line in the front's log."""
    with socket.create_connection(address(server), timeout=10) as conn:
        conn.sendall(b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n")
        assert conn.recv(100).startswith(b"HTTP/1.1 400")


def _readable_by(account: privilege.Account, folders: list[Path]) -> str:
    """Every byte the account can read in `folders`, asked of the kernel as the account."""
    done = subprocess.run(
        [
            "sh",
            "-c",
            'find "$@" -type f -readable -exec cat {} + 2>/dev/null; true',
            "sh",
            *map(str, folders),
        ],
        **privilege.as_user(account),
        cwd="/",
        capture_output=True,
        timeout=60,
    )
    return done.stdout.decode(errors="replace")


@pytest.mark.system
@as_root
@pytest.mark.parametrize("database", ["server", "embedded"])
def test_the_service_user_can_make_root_write_read_or_trust_nothing_of_its_choosing(
    front, workers_tmp, data_dir, database
):
    account = privilege.service_account(Settings())
    outside = Path(tempfile.mkdtemp(prefix="webhooks-root-only-"))
    secret = outside / "secret"
    word = f"canary{uuid.uuid4().hex}"
    secret.write_text(f"{word} 400 403\n")
    secret.chmod(0o600)
    before = _state(secret)
    metrics = workers_tmp / "metrics"
    metrics.mkdir()
    os.chown(metrics, account.uid, account.gid)
    env = {"PROMETHEUS_MULTIPROC_DIR": str(metrics)}
    roots = []  # folders of the stack that are root's (or PostgreSQL's): nothing may be planted there
    if database == "embedded":
        env |= {"DATABASE_URL": "", "WEBHOOK_DATA_DIR": data_dir}
        installed = command("install", **env)
        assert installed.returncode == 0, installed.stderr
        roots += [ROOT / data_dir, embedded.pgdata(data_dir)]
    try:
        server = front(**env)
        folder = _front_folder(server)
        roots.append(folder)
        owns = [folder / "sockets", metrics]
        config_before = (folder / "nginx.conf").read_bytes()
        counted_before = refusals(server)

        own = folder / "sockets" / "own"
        folders = json.dumps([str(f) for f in [*roots, *owns]])
        done = _as_service(account, str(secret), str(own), folders, json.dumps(_ROOTS_NAMES))
        # Nothing in root's folders, and root's files in them are root's.
        assert [what for what in done if Path(what.split()[1]).parent in roots] == []
        # Its own folders it may fill as it likes: what follows shows that root never looks there.
        for own_folder in owns:
            assert f"linked {own_folder / 'refusals.json.new'}" in done
            assert f"linked {own_folder / 'outside'}" in done

        for _ in range(3):
            _refused_framing(server)
        deliver(server)
        assert counted_since(server, counted_before, 3) == {"400": 3}
        page = requests.get(server.metrics_url, timeout=10).text
        time.sleep(0.3)  # the tally's next rounds, which would have followed a planted link

        assert _state(secret) == before
        assert (folder / "nginx.conf").read_bytes() == config_before
        leaked = _readable_by(account, [*roots, *owns]) + page
        assert word not in leaked
        for name in ("nginx.conf", "nginx.pid", "refused.log", "refusals.json"):
            info = (folder / name).lstat()
            assert stat.S_ISREG(info.st_mode) and info.st_uid != account.uid, name
        with pytest.raises(PermissionError):
            _open_as(account, folder / "nginx.conf")

        # At stop root removes the front's folder, its sockets' folder and all: never through a link.
        server.stop()
        assert not folder.exists()
        assert _state(secret) == before
    finally:
        subprocess.run(["rm", "-rf", str(outside)], check=True)


def _open_as(account: privilege.Account, path: Path) -> None:
    """Open `path` for writing as the account, in a child; PermissionError if refused."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setgroups(account.groups())
            os.setgid(account.gid)
            os.setuid(account.uid)
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        except OSError as exc:
            code = exc.errno or 255
        os._exit(code)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code == errno.EACCES:
        raise PermissionError(code, os.strerror(code), str(path))
    assert code == 0, os.strerror(code)


@pytest.mark.system
@as_root
def test_the_shops_handler_modules_are_imported_by_the_service_user_never_by_root(front, workers_tmp):
    """A handler module in a folder the service's user may write: serve checks it imports, but not as root."""
    (workers_tmp / "planted_handlers.py").write_text(
        "import os, pathlib\npathlib.Path(__file__).with_name(f'imported-by-{os.geteuid()}').touch()\n"
    )
    account = privilege.service_account(Settings())
    front(
        WEBHOOK_HANDLER_MODULES="tests.support.handlers,planted_handlers",
        PYTHONPATH=f"{ROOT}:{workers_tmp}",
    )

    assert sorted(p.name for p in workers_tmp.glob("imported-by-*")) == [f"imported-by-{account.uid}"]
