"""Hosts on one machine: network namespaces joined to this one by veth pairs, and links to cut.

Each `Host` is a network namespace (`ip netns`) with one veth pair to the
root namespace, on its own /24 of 10.<net>.0.0/16:

- 10.<net>.<i>.2 is the host's end;
- 10.<net>.<i>.1 is the root's end, the address the root's clients (the
  senders, the outbox's receiver) use with the host;
- 10.<net>.<i>.3 is a second address on the root's end, for PostgreSQL, so
  that the host's link to the database can be cut while the senders still
  reach the host.

A cut is a blackhole, one per direction: a route in the host for what it
sends to the database, a routing rule in the root for what the database
sends back. Dropping only the way back lets a COMMIT reach the server and
its result never return: the outcome the client cannot know. Routes and
rules need only iproute2, where `tc netem` needs a kernel built with it
(CONFIG_NET_SCH_NETEM), which this project's machines lack. Packets are
dropped silently, as a dead network drops them: no reset, no ICMP, so the
client learns of the cut only from its own timeouts.

Everything made is named with the `wh` prefix and removed on exit, failure
included. Runs that use the same /16 take turns (a lock file), since their
addresses would clash.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field

from tests.support import machine

PREFIX = "wh"
# Where the root's end is told apart from the database's in a rule's priority.
_RULE_PRIORITY = 100
TO_DATABASE, FROM_DATABASE = "to_database", "from_database"
BOTH = (TO_DATABASE, FROM_DATABASE)


def unavailable() -> str | None:
    """Why hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (apt-get install iproute2)"
    probe = f"{PREFIX}probe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def require() -> None:
    """Skip where hosts cannot be made; fail instead under WEBHOOKS_REQUIRE_NETNS (CI)."""
    machine.require("WEBHOOKS_REQUIRE_NETNS", unavailable())


def _ip(*args: str, check: bool = True) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass
class Host:
    net: int
    index: int
    cuts: set[str] = field(default_factory=set)

    @property
    def name(self) -> str:
        return f"{PREFIX}{self.net}h{self.index}"

    @property
    def address(self) -> str:
        return f"10.{self.net}.{self.index}.2"

    @property
    def root_address(self) -> str:
        return f"10.{self.net}.{self.index}.1"

    @property
    def database_address(self) -> str:
        return f"10.{self.net}.{self.index}.3"

    @property
    def _root_link(self) -> str:
        return f"{self.name}r"

    def argv(self, argv: list[str]) -> list[str]:
        """`argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def create(self) -> None:
        self.remove()  # left over from a run that was killed
        _ip("netns", "add", self.name)
        _ip("link", "add", self._root_link, "type", "veth", "peer", "name", "eth0", "netns", self.name)
        # The first address is the one the root's connections to the host come from.
        for address in (self.root_address, self.database_address):
            _ip("addr", "add", f"{address}/24", "dev", self._root_link)
        _ip("link", "set", self._root_link, "up")
        _ip("-n", self.name, "addr", "add", f"{self.address}/24", "dev", "eth0")
        _ip("-n", self.name, "link", "set", "eth0", "up")
        _ip("-n", self.name, "link", "set", "lo", "up")
        # Every other host's root-side addresses (a receiver's, say) are reached through the root.
        _ip("-n", self.name, "route", "add", "default", "via", self.root_address)

    def cut(self, *directions: str) -> None:
        """Drop the host's traffic with the database in `directions` (default: both)."""
        for direction in directions or BOTH:
            if direction not in self.cuts:
                _ip(*self._blackhole(direction, "add"))
                self.cuts.add(direction)

    def restore(self) -> None:
        for direction in sorted(self.cuts):
            _ip(*self._blackhole(direction, "del"), check=False)
        self.cuts.clear()

    def _blackhole(self, direction: str, verb: str) -> list[str]:
        if direction == TO_DATABASE:
            return ["-n", self.name, "route", verb, "blackhole", f"{self.database_address}/32"]
        return [
            "rule", verb, "priority", str(_RULE_PRIORITY + self.index),
            "from", self.database_address, "to", self.address, "blackhole",
        ]  # fmt: skip

    def remove(self) -> None:
        self.restore()
        _ip("rule", "del", "priority", str(_RULE_PRIORITY + self.index), check=False)
        # Deleting the namespace deletes its end of the pair, and so the root's end.
        _ip("netns", "del", self.name, check=False)
        _ip("link", "del", self._root_link, check=False)


@contextlib.contextmanager
def hosts(count: int, net: int = 27) -> Iterator[list[Host]]:
    """`count` hosts on 10.<net>.0.0/16, removed on exit whatever happened."""
    with open(f"/tmp/{PREFIX}-netns-{net}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = [Host(net, i) for i in range(1, count + 1)]
        try:
            for host in made:
                host.create()
            yield made
        finally:
            for host in made:
                host.remove()
