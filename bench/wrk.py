"""The compiled load generator: wrk with a Lua script over events signed just before its window.

The Python generator (webhooks.traffic.sender) costs several times the CPU of
a delivery's own HTTP work on the same cores; wrk costs a fraction of it, so
the rows it drives measure the servers rather than the client. It cannot
audit answers, so unique events/s is counted in the database (completed
ledger rows before and after the window) and exactly-once is checked there.

Each event is written K times in a row; wrk's connections take consecutive
requests, so the K copies of an event race each other, as a duplicate storm
does. Running out of events would turn the tail into replays, so the file
holds more than the window can use.
"""

from __future__ import annotations

import re
import resource
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from webhooks.providers import stripe as stripe_wire
from webhooks.traffic import samples

_SCRIPT = """
local reqs = {}
local i = 0
function init(args)
  local f = assert(io.open(args[1], "rb"))
  while true do
    local line = f:read("*l")
    if not line then break end
    reqs[#reqs + 1] = f:read(tonumber(line))
  end
  f:close()
end
function request()
  i = i + 1
  if i > #reqs then i = 1 end
  return reqs[i]
end
"""


@dataclass
class Run:
    requests_per_s: float
    p99_ms: float
    non_2xx: int
    seconds: float
    sent: int  # requests answered
    cpu_s: float  # wrk's own user + system CPU


def write_requests(path: Path, url: str, secret: str, events: list[dict], duplicates: int) -> None:
    """Each event signed now and written `duplicates` times in a row, as wrk's script reads them."""
    host = url.split("://", 1)[1]
    with open(path, "wb") as out:
        for evt in events:
            body = samples.encode(evt)
            head = (
                f"POST /webhooks/stripe HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Stripe-Signature: {stripe_wire.sign(body, secret)}\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            out.write((f"{len(head) + len(body)}\n".encode() + head + body) * duplicates)


def run(url: str, requests: Path, connections: int, seconds: float, cpus: str | None = None) -> Run:
    """wrk sending `requests` to `url` for `seconds`, pinned to `cpus` if given (taskset)."""
    command = _command(url, requests, connections, seconds, cpus)
    cpu_before, started = _children_cpu(), time.monotonic()
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return _parse(output, time.monotonic() - started, _children_cpu() - cpu_before)


class Running:
    """wrk sending `requests` to `url` until stopped, for a window whose length is not known ahead
    (while some other work runs). Its figures cover the window alone: it is sending once this
    returns, and it stops when told."""

    # wrk's own limit on the run, long past any window: stop() ends it.
    _LIMIT_S = 3600

    def __init__(self, url: str, requests: Path, connections: int):
        self._cpu_before = _children_cpu()
        # wrk prints "Running" once its script has read the requests, before its first connection;
        # stdbuf makes its output line-buffered on a pipe, so that line arrives then.
        command = ["stdbuf", "-oL", *_command(url, requests, connections, self._LIMIT_S, None)]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = self.proc.stdout.readline()
        if not first.startswith("Running"):
            self.proc.kill()
            raise RuntimeError(f"wrk did not start: {first.strip()} {self.proc.communicate()[0].strip()}")
        self.started = time.monotonic()

    def stop(self) -> Run:
        self.proc.send_signal(signal.SIGINT)  # wrk closes its connections and prints its figures
        output = self.proc.communicate(timeout=30)[0]
        return _parse(output, time.monotonic() - self.started, _children_cpu() - self._cpu_before)


def _command(url: str, requests: Path, connections: int, seconds: float, cpus: str | None) -> list[str]:
    script = requests.with_suffix(".lua")
    script.write_text(_SCRIPT)
    command = [
        "wrk",
        "-t",
        "1",
        "-c",
        str(connections),
        "-d",
        f"{round(seconds)}s",
        "--latency",
        "-s",
        str(script),
        url + "/webhooks/stripe",
        "--",
        str(requests),
    ]
    return ["taskset", "-c", cpus, *command] if cpus else command


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _parse(output: str, elapsed: float, cpu_s: float) -> Run:
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", output)
    p99_ms = float(p99.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    sent = int(re.search(r"(\d+) requests in", output).group(1))
    return Run(rate, p99_ms, int(non_2xx.group(1)) if non_2xx else 0, elapsed, sent, cpu_s)
