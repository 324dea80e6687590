"""The outbox rows' receiver: answers 200, and remembers when each Idempotency-Key first arrived.

At once, or after $RECEIVER_DELAY_MS, as an API across a network would;
with an empty body, or one of $RECEIVER_ANSWER_BYTES (bench.answers).

Run as its own process (`python -m bench.receiver`, on $HOST:$PORT), so what
the rows time is the worker, not a receiver sharing the bench's interpreter.
`GET /received?prefix=P` tells how many POSTs carried a key starting with P
and when each such key first arrived (epoch seconds).
"""

from __future__ import annotations

import asyncio
import os
import time

from aiohttp import web

EFFECTS = "/effects"


def app(delay_s: float = 0.0, answer_bytes: int = 0) -> web.Application:
    answer = b"x" * answer_bytes
    arrivals: dict[str, float] = {}
    posts: dict[str, int] = {}

    async def effect(request: web.Request) -> web.Response:
        await request.read()
        key = request.headers.get("Idempotency-Key", "")
        arrivals.setdefault(key, time.time())
        posts[key] = posts.get(key, 0) + 1
        if delay_s:
            await asyncio.sleep(delay_s)
        return web.Response(body=answer)

    async def received(request: web.Request) -> web.Response:
        prefix = request.query.get("prefix", "")
        return web.json_response(
            {
                "posts": sum(n for key, n in posts.items() if key.startswith(prefix)),
                "arrivals": {key: t for key, t in arrivals.items() if key.startswith(prefix)},
            }
        )

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    application = web.Application()
    application.router.add_post(EFFECTS, effect)
    application.router.add_get("/received", received)
    application.router.add_get("/healthz", healthz)
    return application


if __name__ == "__main__":
    host, port = os.environ.get("HOST", "127.0.0.1"), int(os.environ["PORT"])
    delay_s = float(os.environ.get("RECEIVER_DELAY_MS", 0)) / 1000
    answer_bytes = int(os.environ.get("RECEIVER_ANSWER_BYTES", 0))
    web.run_app(app(delay_s, answer_bytes), host=host, port=port, print=None, access_log=None)
