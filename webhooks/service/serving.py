"""gunicorn's gthread worker, reading each request whole before a thread takes it.

A thread-per-request server blocks a thread in recv() for as long as a client
takes to send its request, so a few hundred connections trickling a body (or
sending headers and no body) hold every thread and stall real deliveries.
gunicorn 27 has no header or body read timeout. This worker buffers each
request in the worker's event loop, which costs a slow connection a few bytes
of memory and no thread, and hands it to a thread only once the headers and
the whole body (Content-Length or chunked) are in. A request not complete
within `request_read_timeout_s` of its first byte (or of the connection's
accept) is answered 408 and closed: no thread was ever blocked on it, so no
worker is killed and nothing is logged for it.

What reaches a thread is served by gthread unchanged, from the buffer.
"""
from __future__ import annotations

import selectors
import time

from gunicorn.workers.gthread import ThreadWorker

from .config import Settings

# Beyond this many header bytes gunicorn's parser refuses the request anyway
# (limit_request_line, limit_request_fields x limit_request_field_size).
_HEAD_CAP = 64 * 1024
_RECV = 64 * 1024
_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Framing:
    """How much of a request `buf` holds: complete, or what is still awaited."""

    def __init__(self, buf: bytes, body_cap: int):
        self.complete = False
        # True when the request is handed over unfinished (over a cap, or
        # malformed for the parser to refuse): the connection must then close.
        self.close_after = False
        self.expects_continue = False
        head_end = buf.find(b"\r\n\r\n")
        if head_end < 0:
            self.complete = self.close_after = len(buf) > _HEAD_CAP
            return
        headers = _headers(buf[:head_end])
        self.expects_continue = headers.get(b"expect", b"").lower() == b"100-continue"
        body = memoryview(buf)[head_end + 4 :]
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            self.complete, self.close_after = _chunked_complete(body, body_cap)
        elif b"content-length" in headers:
            self.complete, self.close_after = _length_complete(
                len(body), headers[b"content-length"], body_cap
            )
        else:
            self.complete = True


def _headers(head: bytes) -> dict[bytes, bytes]:
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    return fields


def _length_complete(have: int, raw: bytes, body_cap: int) -> tuple[bool, bool]:
    try:
        length = int(raw)
    except ValueError:
        return True, True
    if length > body_cap or length < 0:
        return True, True  # the app refuses it from the header alone
    return have >= length, False


def _chunked_complete(body: memoryview, body_cap: int) -> tuple[bool, bool]:
    pos, size_total = 0, 0
    data = bytes(body)
    while True:
        line_end = data.find(b"\r\n", pos)
        if line_end < 0:
            return False, False
        try:
            size = int(data[pos:line_end].split(b";")[0], 16)
        except ValueError:
            return True, True
        size_total += size
        if size_total > body_cap:
            return True, True  # enough for the app to see it is over the cap
        if size == 0:
            # The last chunk is followed by trailers, if any, and a blank line.
            return data.find(b"\r\n\r\n", line_end) >= 0, False
        pos = line_end + 2 + size + 2
        if pos > len(data):
            return False, False


class BufferingThreadWorker(ThreadWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        settings = Settings.from_env()
        self.read_timeout_s = settings.request_read_timeout_s
        # A byte of slack over the app's cap, so the app sees and refuses the overflow.
        self.body_cap = settings.max_body_bytes + 1
        self.reading = {}

    def enqueue_req(self, conn):
        if getattr(conn, "whole", None) is not None:
            super().enqueue_req(conn)
            return
        leftover = conn.parser.unreader.take_buffered() if conn.parser else b""
        conn.buf = bytearray(leftover)
        conn.deadline = time.monotonic() + self.read_timeout_s
        conn.continued = False
        if conn.sock.getblocking():
            # Only after a read-ahead: gthread hands keep-alive and new
            # connections over non-blocking, and each setblocking is a syscall.
            conn.sock.setblocking(False)
        self._read(conn, register=True)

    def _read(self, conn, register=False):
        try:
            chunk = conn.sock.recv(_RECV)
        except BlockingIOError:
            chunk = None
        except OSError:
            chunk = b""
        if chunk:
            conn.buf += chunk
        framing = Framing(bytes(conn.buf), self.body_cap)
        if chunk == b"" and not conn.buf:
            self._forget(conn, registered=not register)
            self.nr_conns -= 1
            conn.close()
            return
        if framing.complete or chunk == b"":
            # A peer that stopped sending before its request was complete is
            # served what it sent: the app answers a short body with 400.
            self._dispatch(conn, close_after=framing.close_after or chunk == b"", registered=not register)
            return
        if framing.expects_continue and not conn.continued:
            conn.continued = True
            _send_quietly(conn.sock, _CONTINUE)
        if register:
            self.reading[conn] = None
            self.poller.register(conn.sock, selectors.EVENT_READ, lambda _sock, c=conn: self._read(c))

    def _forget(self, conn, registered):
        if registered:
            self.reading.pop(conn, None)
            self.poller.unregister(conn.sock)

    def _dispatch(self, conn, close_after, registered):
        self._forget(conn, registered)
        conn.whole = bytes(conn.buf)
        conn.close_after = close_after
        conn.data_ready = True
        conn.buf = None
        self.enqueue_req(conn)

    def handle(self, conn):
        whole, conn.whole = conn.whole, None
        conn.init()
        conn.parser.unreader.unread(whole)
        return super().handle(conn)

    def _keepalive_after(self, conn, keepalive):
        if conn.close_after:
            return False
        return super()._keepalive_after(conn, keepalive)

    def murder_pending(self):
        super().murder_pending()
        now = time.monotonic()
        # A stopping worker cuts them all: none has a request to finish.
        for conn in [c for c in self.reading if c.deadline <= now or not self.alive]:
            self._forget(conn, registered=True)
            _send_quietly(conn.sock, _TIMED_OUT)
            self.nr_conns -= 1
            conn.close()


def _send_quietly(sock, data: bytes) -> None:
    try:
        sock.send(data)
    except OSError:
        pass  # the peer is gone or its window is full: it is being cut anyway
