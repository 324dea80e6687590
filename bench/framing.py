"""Hostile HTTP framing as raw bytes, and what a server does with it (issue 23's reproductions).

The tests (tests/web/test_front.py, tests/web/test_serving.py) assert what each gets
from the served stack; `python -m bench.fronts` sends the same bytes to each
candidate front, to choose between them.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from dataclasses import dataclass

HEAD = b"POST /webhooks/stripe HTTP/1.1\r\nHost: hostile\r\n"
CHUNKED = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
# The 75 bytes that froze a worker of the home-made buffering layer.
NEGATIVE_CHUNK = CHUNKED + b"-6\r\n"
# A chunk size over any body cap, and then nothing.
OVER_CAP_CHUNK = CHUNKED + b"FFFFFFF\r\n"
# A request head over 64 KiB that never ends.
ENDLESS_HEAD = HEAD + b"X-Padding: " + b"a" * (64 * 1024)
# Framings no parser should accept, each answered with a 4xx.
MALFORMED_CHUNKED = {
    "chunk size -6, then a body": NEGATIVE_CHUNK + b"abcdef\r\n0\r\n\r\n",
    "chunk size not hex": CHUNKED + b"zz\r\nabc\r\n0\r\n\r\n",
    "chunk size with 0x": CHUNKED + b"0x2\r\nab\r\n0\r\n\r\n",
    "chunk size over 64 bits": CHUNKED + b"1" + b"0" * 20 + b"\r\nab\r\n0\r\n\r\n",
    "chunk longer than its size": CHUNKED + b"2\r\nabcdef\r\n0\r\n\r\n",
    "no CRLF after a chunk": CHUNKED + b"2\r\nab0\r\n\r\n",
    "Content-Length and chunked": HEAD + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
}
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: hostile\r\n\r\n"
# A database query per request, as /metrics was on the public listener.
READYZ = b"GET /readyz HTTP/1.1\r\nHost: hostile\r\n\r\n"
# Lines ended by LF alone (RFC 9112 section 2.2 lets a server accept them).
BARE_LF = b"GET /healthz HTTP/1.1\nHost: hostile\n\n"
_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})")


def expect_continue(version: str, headers: dict[str, str], body: bytes) -> tuple[bytes, bytes]:
    """A request head asking for `100 Continue`, and its body (sent after a pause)."""
    head = f"POST /webhooks/stripe HTTP/{version}\r\nHost: hostile\r\nExpect: 100-continue\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode(), body


def chunked(
    headers: dict[str, str], body: bytes, extension: bytes = b"", trailer: bytes = b"", pieces: int = 16
) -> bytes:
    """`body` chunked in `pieces`, each size line carrying `extension`, and `trailer` after the last."""
    head = "POST /webhooks/stripe HTTP/1.1\r\nHost: hostile\r\nTransfer-Encoding: chunked\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    step = -(-len(body) // pieces)
    chunks = b"".join(
        b"%x%s\r\n%s\r\n" % (len(body[i : i + step]), extension, body[i : i + step])
        for i in range(0, len(body), step)
    )
    return head.encode() + b"\r\n" + chunks + b"0\r\n" + trailer + b"\r\n"


@dataclass
class Answer:
    data: bytes
    first_byte_s: float | None  # None: no byte came back
    last_byte_s: float | None
    ended: str  # "closed", "reset", or "open" when reading stopped
    ended_s: float

    def statuses(self) -> list[int]:
        return [int(code) for code in _STATUS.findall(self.data)]

    def status(self) -> int | None:
        return next(iter(self.statuses()), None)

    def body(self) -> bytes:
        return self.data.split(b"\r\n\r\n", 1)[-1]


def exchange(
    address: tuple[str, int],
    data: bytes,
    wait_s: float = 5.0,
    half_close: bool = False,
    quiet_s: float = 0.5,
    then: bytes = b"",
    pause_s: float = 0.0,
) -> Answer:
    """Send `data` on a new connection (and `then` after `pause_s`), and read until the
    server closes it, `quiet_s` passes without a byte after an answer, or `wait_s` in all."""
    with socket.create_connection(address, timeout=wait_s) as conn:
        started = time.monotonic()
        _send_what_it_takes(conn, data)
        if then:
            time.sleep(pause_s)
            _send_what_it_takes(conn, then)
        if half_close:
            conn.shutdown(socket.SHUT_WR)
        return read_answer(conn, started, wait_s, quiet_s)


def _send_what_it_takes(conn: socket.socket, data: bytes) -> None:
    try:
        conn.sendall(data)
    except OSError:
        pass  # refused before all of it was read: the answer is waiting


def read_answer(conn: socket.socket, started: float, wait_s: float, quiet_s: float = 0.5) -> Answer:
    """What `conn` sends back until it closes, `quiet_s` passes without a byte after an answer,
    or `wait_s` in all."""
    data, first, last, ended = b"", None, None, "open"
    deadline = started + wait_s
    while (now := time.monotonic()) < deadline:
        conn.settimeout(min(deadline - now, quiet_s) if data else deadline - now)
        try:
            chunk = conn.recv(1 << 16)
        except TimeoutError:
            break
        except ConnectionResetError:
            ended = "reset"
            break
        if not chunk:
            ended = "closed"
            break
        last = time.monotonic() - started
        first = first if first is not None else last
        data += chunk
    return Answer(data, first, last, ended, time.monotonic() - started)


class Held:
    """Connections that sent `data` (as much as the server takes) and then nothing, reading nothing
    until asked: what a client that stalls, or never reads its answers, does."""

    def __init__(
        self, address: tuple[str, int], data: bytes | list[bytes], count: int, source: str | None = None
    ):
        """`count` connections from `source`, each sending `data`, or the next of a list of them."""
        sent = data if isinstance(data, list) else [data] * count
        self.conns = [_opened(address, source) for _ in range(count)]
        self.received = [b""] * count
        for conn, data in zip(self.conns, sent, strict=True):
            conn.setblocking(False)
            with contextlib.suppress(OSError):
                conn.send(data)

    def poll(self) -> list[str]:
        """How each one stands: "closed", "reset" or "open"; what came back is kept in `received`."""
        states = []
        for number, conn in enumerate(self.conns):
            state, data = _drain(conn)
            self.received[number] += data
            states.append(state)
        return states

    def statuses(self) -> list[int | None]:
        return [int(found[1]) if (found := _STATUS.match(data)) else None for data in self.received]

    def close(self) -> None:
        for conn in self.conns:
            conn.close()

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _opened(address: tuple[str, int], source: str | None) -> socket.socket:
    return socket.create_connection(address, source_address=(source, 0) if source else None)


def _drain(conn: socket.socket) -> tuple[str, bytes]:
    data = b""
    try:
        while chunk := conn.recv(1 << 16):
            data += chunk
        return "closed", data
    except BlockingIOError:
        return "open", data
    except OSError:
        return "reset", data


def pipeline(address: tuple[str, int], request: bytes, total_bytes: int, wait_s: float = 30.0):
    """`request` repeated to `total_bytes`, written while its answers are read:
    (answers, seconds to the last of them, how the connection ended)."""
    count = total_bytes // len(request)
    with socket.create_connection(address, timeout=wait_s) as conn:
        writer = threading.Thread(target=_send_what_it_takes, args=(conn, request * count), daemon=True)
        started = time.monotonic()
        writer.start()
        answer = read_answer(conn, started, wait_s, quiet_s=2.0)
    return answer.data.count(b"HTTP/1.1 200"), answer.last_byte_s or answer.ended_s, answer.ended
