"""What a service started as root needs made once (`install`), and what every start checks instead.

Side by side, so that a start checks exactly what the install step makes:
the service's users, Python's path readable by the service's user, and
with DATABASE_URL unset the embedded PostgreSQL open to it. A start also
checks, as the service's user, the folder the workers write their metrics
in. Neither is needed without root: every process then runs as whoever
started it.
"""

from __future__ import annotations

from . import embedded, privilege
from .config import Process, Settings


def install(settings: Settings) -> list[str]:
    """Make what is missing (as root); what is there already is left as it is. Says what is in place."""
    service, front = privilege.make_accounts(settings)
    privilege.open_import_path(service)
    made = [f"users {service.name} and {front.name}", f"Python's path readable by {service.name}"]
    if not settings.database_url:
        folder = embedded.pgdata(settings.data_dir)
        started_here = not embedded.running(folder)
        embedded.url(folder)
        embedded.admit(folder, service)
        if started_here:
            embedded.stop(folder)
        made.append(f"the embedded database in {folder}, reachable by {service.name}")
    return made


def check(settings: Settings, process: Process, front: bool) -> privilege.Account:
    """As root, before anything starts: SettingError naming the install step where it was not done, or
    naming a folder the workers cannot write in; changes nothing. The service's user."""
    service = privilege.service_account(settings)
    if front:
        privilege.front_account(settings)
    privilege.check_import_path(service)
    if not settings.database_url:
        embedded.check_admitted(embedded.pgdata(settings.data_dir), service)
    if process.metrics_dir:
        privilege.check_writable(service, process.metrics_dir, "PROMETHEUS_MULTIPROC_DIR")
    return service
