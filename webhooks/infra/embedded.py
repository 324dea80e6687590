"""The embedded PostgreSQL that runs when DATABASE_URL is unset (pgserver's bundled binaries).

Its data folder is `<WEBHOOK_DATA_DIR>/pg`. A relative WEBHOOK_DATA_DIR
(default `.data`) is taken from the project root, not the working
directory, so every command finds the same server wherever it is run; a
second, empty server in another folder would silently hide the data.
"""

from __future__ import annotations

import grp
import os
import stat
import warnings
from pathlib import Path
from types import ModuleType

from .config import SettingError
from .privilege import INSTALL, Account, join_group

ROOT = Path(__file__).resolve().parents[2]


def pgdata(data_dir: str) -> Path:
    return (ROOT / data_dir / "pg").resolve()


def _pgserver() -> ModuleType:
    # pgserver keeps its lock in the runtime dir; without XDG_RUNTIME_DIR
    # platformdirs warns on every import and falls back to /tmp, which is fine.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        import pgserver
    return pgserver


def running(folder: Path) -> bool:
    _pgserver()
    from pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(folder) if folder.exists() else None
    return info is not None and info.is_running()


def url(folder: Path) -> str:
    """The server's URL, started (and initialised on first use) if it is not running."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: the server outlives this process, so gunicorn
    # workers and later commands reach the same data; `stop` ends it.
    return str(_pgserver().get_server(folder, cleanup_mode=None).get_uri())


def admit(folder: Path, account: Account) -> None:
    """Let `account`'s processes reach the server that root started on `folder`.

    As root, pgserver runs PostgreSQL as its own `pgserver` user, with the
    socket in the data folder (0700). The folder is opened to that user's
    group for search alone (0710: PostgreSQL accepts it, and the group can
    neither list the folder nor read a file in it), and `account` joins the
    group. Whoever reaches the socket is the server's superuser (trust
    authentication), as the service has always been.
    """
    info = folder.stat()
    folder.chmod(stat.S_IMODE(info.st_mode) | stat.S_IXGRP)
    join_group(account, grp.getgrgid(info.st_gid).gr_name)


def check_admitted(folder: Path, account: Account) -> None:
    """SettingError unless the install step made the server on `folder` and admitted `account` to it.

    Changes nothing: the server is made (as root, its `pgserver` user too)
    and the folder opened by `python -m webhooks install`, never by a start.
    """
    try:
        info = folder.stat()
        group = grp.getgrgid(info.st_gid)
    except (OSError, KeyError):
        info = None
    if info is None or not (folder / "PG_VERSION").exists():
        missing = f"there is no embedded database in {folder}"
    elif not info.st_mode & stat.S_IXGRP or info.st_gid not in account.groups():
        missing = f"{account.name} may not reach the embedded database in {folder} (group {group.gr_name})"
    else:
        return
    raise SettingError(f"WEBHOOK_DATA_DIR: {missing}: run `{INSTALL}` as root once, which makes it")


def stop(folder: Path) -> bool:
    """Stop the server on `folder`; False when none was running."""
    if not running(folder):
        return False
    # As root, pgserver runs PostgreSQL as its own `pgserver` user; pg_ctl must be that user too.
    user = "pgserver" if os.geteuid() == 0 else None
    _pgserver().pg_ctl(["-w", "-m", "fast", "stop"], pgdata=folder, user=user)
    return True


def psql() -> str:
    """The bundled psql, for machines without a PostgreSQL client of their own."""
    return str(Path(_pgserver().__path__[0]) / "pginstall" / "bin" / "psql")
