"""How much of an HTTP/1.1 request a buffer holds: enough to hand it to gunicorn, or not yet.

Only the framing is read here (where the head ends, Content-Length or
chunked, Expect: 100-continue); gunicorn's own parser still parses and
validates every request a thread takes.
"""
from __future__ import annotations

# Beyond this many header bytes gunicorn's parser refuses the request anyway
# (limit_request_line, limit_request_fields x limit_request_field_size).
_HEAD_CAP = 64 * 1024


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
