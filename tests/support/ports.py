"""Free ports for the servers a test starts, from a range of this xdist worker's own.

A port the kernel picks (bind to 0) is free when asked but may be handed to
another worker's probe before the server binds it. Each worker instead picks
from its own range, below the kernel's ephemeral ones, starting at a random
place in it (two runs of the suite on one machine rarely meet), and goes
round it in turn, skipping the ports that are taken.
"""

from __future__ import annotations

import os
import random
import socket

_BASE = 20000
_SPAN = 1000
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_FIRST = _BASE + (_WORKER % 12) * _SPAN
_next = random.randrange(_SPAN)


def _free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port no process listens on, the next in this worker's range."""
    global _next
    for _ in range(_SPAN):
        port = _FIRST + _next % _SPAN
        _next += 1
        if _free(host, port):
            return port
    raise RuntimeError(f"no free port left in {_FIRST}-{_FIRST + _SPAN - 1}")
