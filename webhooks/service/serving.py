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

A worker holds at most `worker_connections` connections. At that cap gthread
stops accepting, so enough slow connections would keep every delivery out
until their read timeout. Instead a slot is kept free by cutting, at the
cap, the connection that has been sending its request longest (408), or an
idle kept-alive one. A delivery's request arrives whole in milliseconds, so
the connections cut are the ones that are not sending it.

What reaches a thread is served by gthread unchanged, from the buffer.
"""
from __future__ import annotations

import resource
import selectors
import time

from gunicorn.workers.gthread import ThreadWorker

from .config import Settings
from .framing import Framing

_RECV = 64 * 1024
_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# At the connection cap, how long a connection that has sent nothing is
# spared: a client sends its request as soon as it has connected.
_SILENT_GRACE_S = 1.0
# Descriptors a worker needs besides its clients' sockets and its pooled
# database connections: listeners, the poller and its wake-up pipe, log and
# metrics files, a reconnect or two.
_OTHER_DESCRIPTORS = 64


class BufferingThreadWorker(ThreadWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        settings = Settings.from_env()
        self.read_timeout_s = settings.request_read_timeout_s
        # A byte of slack over the app's cap, so the app sees and refuses the overflow.
        self.body_cap = settings.max_body_bytes + 1
        self.reading = {}
        self.other_descriptors = settings.pool_max_size + _OTHER_DESCRIPTORS

    def init_process(self):
        self._fit_descriptor_limit()
        super().init_process()

    def _fit_descriptor_limit(self) -> None:
        """Room for `worker_connections` sockets, or a cap that fits the room there is.

        Without it a worker at its cap runs out of descriptors first (a
        soft limit of 1,024 is common): gthread's accept raises EMFILE and
        the worker dies, and the pool cannot open a connection either.
        Measured with a soft limit of 256 and 600 slow connections: 53
        worker restarts in 12 s, deliveries answered 503.
        """
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = self.worker_connections + self.other_descriptors
        if soft == resource.RLIM_INFINITY or soft >= wanted:
            return
        soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        if soft < wanted:
            self.worker_connections = max(soft - self.other_descriptors, self.cfg.threads + 1)
            self.max_keepalived = self.worker_connections - self.cfg.threads
            self.log.warning("worker_connections lowered to %d: the open-file limit is %d",
                             self.worker_connections, soft)

    def enqueue_req(self, conn):
        if getattr(conn, "whole", None) is not None:
            super().enqueue_req(conn)
            return
        leftover = conn.parser.unreader.take_buffered() if conn.parser else b""
        conn.buf = bytearray(leftover)
        conn.read_from = time.monotonic()
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
        timed_out_from = now - self.read_timeout_s
        # A stopping worker cuts them all: none has a request to finish.
        for conn in [c for c in self.reading if c.read_from <= timed_out_from or not self.alive]:
            self._cut(conn)
        # Runs once per turn of the event loop, which accepts at most one
        # connection per turn: a slot kept free here keeps it accepting.
        while self.nr_conns >= self.worker_connections - 1 and self._make_room(now):
            pass

    def _make_room(self, now: float) -> bool:
        """Cut one connection to free a slot; False if none should go.

        First the longest-reading one that has sent part of its request (a
        delivery arrives whole), then the longest idle kept-alive one, then
        one that has sent nothing for `_SILENT_GRACE_S`. A connection
        accepted a moment ago may not have sent its first bytes yet.
        """
        # dicts keep insertion order: longest reading first
        started = next((conn for conn in self.reading if conn.buf), None)
        if started is not None:
            self._cut(started)
            return True
        if self.keepalived_conns:
            idle = self.keepalived_conns.popleft()
            self.poller.unregister(idle.sock)
            self.nr_conns -= 1
            idle.close()
            return True
        spared_from = now - _SILENT_GRACE_S
        silent = next((conn for conn in self.reading if conn.read_from <= spared_from), None)
        if silent is None:
            return False
        self._cut(silent)
        return True

    def _cut(self, conn):
        self._forget(conn, registered=True)
        _send_quietly(conn.sock, _TIMED_OUT)
        self.nr_conns -= 1
        conn.close()


def _send_quietly(sock, data: bytes) -> None:
    try:
        sock.send(data)
    except OSError:
        pass  # the peer is gone or its window is full: it is being cut anyway
