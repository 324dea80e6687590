"""Who the service's processes run as when root starts them (docs/serving.md, "Who owns what").

gunicorn runs as WEBHOOK_SERVICE_USER (behind the front, `serve` starts it
as that user; alone, gunicorn's own `user` and `group` settings switch its
workers and gunicorn.conf.py's `post_fork` sets their groups), and nginx's
workers as WEBHOOK_FRONT_USER in the service user's group, the group
gunicorn's socket is shared with. Neither is root, and neither is `nobody`:
nginx leaves its workers dumpable, so any other process running as their
user could attach to one and borrow its group.

The users are made once, by `python -m webhooks install` (as Debian's
packages make theirs: a system user with a group of its own, no home and no
login shell), never by a start: a start only looks them up, and where one is
missing it stops with a line naming that step.

Without root nothing here applies: every process runs as whoever started it.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from .config import SettingError, Settings

log = structlog.get_logger(__name__)

# Debian keeps useradd and usermod in /usr/sbin, which is not on every user's PATH.
_SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
# The install step, as the lines of a start that finds it not done name it.
INSTALL = "python -m webhooks install"
# useradd's and usermod's status when another of them holds /etc/passwd's lock.
_LOCKED = 10
_TRIES = 5


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int

    @property
    def group(self) -> str:
        return grp.getgrgid(self.gid).gr_name

    def groups(self) -> list[int]:
        """The groups its processes get: its own and those /etc/group lists it in."""
        return os.getgrouplist(self.name, self.gid)


def as_root() -> bool:
    return os.geteuid() == 0


def service_account(settings: Settings) -> Account:
    """gunicorn's user, as the install step made it."""
    return _account(settings.service_user, "WEBHOOK_SERVICE_USER")


def front_account(settings: Settings) -> Account:
    """nginx's workers' user, as the install step made it; they run in the service user's group."""
    return _account(settings.front_user, "WEBHOOK_FRONT_USER")


def make_accounts(settings: Settings) -> tuple[Account, Account]:
    """The install step's users (service, front): each made where it is missing."""
    for name, setting in (
        (settings.service_user, "WEBHOOK_SERVICE_USER"),
        (settings.front_user, "WEBHOOK_FRONT_USER"),
    ):
        try:
            pwd.getpwnam(name)
        except KeyError:
            _made(name, setting)
    return service_account(settings), front_account(settings)


def _account(name: str, setting: str) -> Account:
    """The user `name`; never root."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise SettingError(
            f"{setting}: the user {name} does not exist: run `{INSTALL}` as root once, which makes it"
        ) from None
    if entry.pw_uid == 0:
        raise SettingError(f"{setting}: {name} is root; name an unprivileged user (the default makes one)")
    return Account(name, entry.pw_uid, entry.pw_gid)


def as_user(account: Account) -> dict[str, Any]:
    """subprocess's arguments that start a process as `account`, in its groups and no other."""
    return {"user": account.uid, "group": account.gid, "extra_groups": account.groups()}


def _made(name: str, setting: str) -> pwd.struct_passwd:
    argv = ["--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"]
    done = _admin(["useradd", *argv, "--shell", "/usr/sbin/nologin", name], setting)
    with contextlib.suppress(KeyError):
        entry = pwd.getpwnam(name)  # made now, or by another start a moment before
        log.info("user_made", user=name, setting=setting)
        return entry
    raise SettingError(f"{setting}: useradd could not make the user {name}: {_reason(done)}")


def join_group(account: Account, group: str) -> None:
    """Add `account` to `group` in /etc/group, where `Account.groups` finds it."""
    if account.name in grp.getgrnam(group).gr_mem:
        return
    done = _admin(["usermod", "--append", "--groups", group, account.name], "WEBHOOK_SERVICE_USER")
    if done.returncode != 0:
        raise SettingError(
            f"WEBHOOK_SERVICE_USER: usermod could not add {account.name} to {group}: {_reason(done)}"
        )
    log.info("user_joined_group", user=account.name, group=group)


def _admin(argv: list[str], setting: str) -> subprocess.CompletedProcess[str]:
    """useradd or usermod, tried again while another one (a second start) holds /etc/passwd's lock."""
    tool = shutil.which(argv[0], path=_SBIN_PATH)
    if tool is None:
        raise SettingError(f"{setting}: {argv[0]} is not installed, so make the user {argv[-1]} yourself")
    for _ in range(_TRIES):
        done = subprocess.run([tool, *argv[1:]], capture_output=True, text=True)
        if done.returncode != _LOCKED:
            break
        time.sleep(0.2)
    return done


def _reason(done: subprocess.CompletedProcess[str]) -> str:
    lines: list[str] = done.stderr.strip().splitlines()
    return (lines or [f"exit status {done.returncode}"])[-1]


def open_import_path(account: Account) -> None:
    """Let `account` import what this process imports (the install step), or say which folder it cannot read.

    Each folder above Python's path gets search permission for others (not
    listing) where it lacks it, as pgserver opens the folders above its own
    binaries: a Python installed in root's home (0700), as pyenv installs it
    for root, is otherwise out of the workers' reach. A folder on the path
    itself must already be readable by `account`.
    """
    folders = _import_path()
    for above in dict.fromkeys(a for folder in folders for a in reversed(folder.parents)):
        mode = above.stat().st_mode
        if not mode & stat.S_IXOTH:
            above.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
            log.warning("folder_opened_for_search", folder=str(above), user=account.name)
    check_import_path(account)


def check_import_path(account: Account) -> None:
    """SettingError unless `account` can read every folder on Python's path; changes nothing."""
    unreadable = _first_failing(account, '[ -r "$f" ] && [ -x "$f" ]', _import_path())
    if unreadable:
        raise SettingError(
            f"WEBHOOK_SERVICE_USER: {account.name} cannot read {unreadable}, which is on Python's path: "
            f"run `{INSTALL}` as root, which opens the folders above it, or let the user read it"
        )


def check_writable(account: Account | None, folder: str, setting: str) -> None:
    """SettingError naming `setting` unless `account` (None: this process) can make files in `folder`.

    Asked of the kernel as the account, groups and all, before anything
    serves: a worker that cannot write there dies at its first metric.
    """
    test = '[ -d "$f" ] && [ -w "$f" ] && [ -x "$f" ]'
    if account is None:
        failing = None if os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK) else folder
    else:
        failing = _first_failing(account, test, [Path(folder)])
    if failing:
        who = account.name if account else "this user"
        raise SettingError(f"{setting}: {who} cannot make files in {folder}: name a folder it owns")


def _import_path() -> list[Path]:
    return [f for f in dict.fromkeys(Path(p or os.getcwd()).resolve() for p in sys.path) if f.is_dir()]


def _first_failing(account: Account, test: str, folders: list[Path]) -> str | None:
    """The first of `folders` that fails the shell `test` (on "$f"), asked of the kernel as `account`."""
    done = subprocess.run(
        ["/bin/sh", "-c", f'for f do {test} || {{ printf %s "$f"; exit 1; }}; done', "sh"]
        + [str(f) for f in folders],
        **as_user(account),
        cwd="/",
        capture_output=True,
        text=True,
    )
    return (done.stdout or done.stderr.strip()) if done.returncode else None
