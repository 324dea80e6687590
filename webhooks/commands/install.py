"""`python -m webhooks install`: what a service started as root needs made once, before its first start.

Run as root, once per machine and again after a change of users, data
folder or Python (safe to rerun: what is done already is left as it is):

- the service's users, WEBHOOK_SERVICE_USER for gunicorn and
  WEBHOOK_FRONT_USER for nginx's workers, made as Debian's packages make
  theirs where they are missing;
- the folders above Python's path opened for search, so that the service's
  user can read the code it runs (a Python in root's home, as pyenv installs
  it, is otherwise out of its reach);
- with DATABASE_URL unset, the embedded PostgreSQL made (its own `pgserver`
  user too) and its folder opened to the service's user.

`serve` started as root only checks all this and, where something is
missing, stops with one line naming this command; it makes no user and
changes no folder outside its own. bin/serve runs this step first when root
runs it, so the README's quick start stays one command; on the systemd path
(docs/deploying.md) the operator runs it once, at install time, as the
packages of the field make their users. Without root there is nothing to
make: every process runs as the user who starts it.
"""

from __future__ import annotations

import argparse

from webhooks.infra import install, privilege
from webhooks.infra.config import Settings


def _install(args: argparse.Namespace) -> int:
    if not privilege.as_root():
        print("install: nothing to make without root: every process runs as the user who starts it")
        return 0
    made = install.install(Settings.from_env())
    print(f"install: {', '.join(made)}: serve may start as root")
    return 0


def register(commands) -> None:
    commands.add_parser(
        "install",
        help="as root, once: make the service's users, open Python's path to them, make the embedded "
        "database (serve as root checks it was done)",
    ).set_defaults(func=_install)
