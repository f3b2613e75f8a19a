"""Helpers shared by the benchmarks: a counting webhook receiver and a bare relay, each run as its
own process on 127.0.0.1 so they do not share the measured process's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import socket
import time
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _use_uvloop() -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def _receiver_main(port: int, ready: Any) -> None:
    """Answers 200 to every POST and remembers when each arrived; GET /stats reports them."""
    from aiohttp import web

    _use_uvloop()
    arrivals: list[float] = []

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        arrivals.append(time.time())
        return web.Response(status=200)

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"count": len(arrivals), "last": max(arrivals) if arrivals else None})

    async def reset(request: web.Request) -> web.Response:
        arrivals.clear()
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_get("/stats", stats)
    app.router.add_post("/reset", reset)
    ready.set()
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _relay_main(port: int, target: str, ready: Any) -> None:
    """The ceiling: accept a POST, answer 202, forward the body with aiohttp. No storage, no filter."""
    import aiohttp
    from aiohttp import web

    _use_uvloop()
    tasks: set[asyncio.Task[None]] = set()
    session: dict[str, aiohttp.ClientSession] = {}

    async def forward(body: bytes) -> None:
        async with session["s"].post(target, data=body, headers={"content-type": "application/json"}) as r:
            await r.read()

    async def accept(request: web.Request) -> web.Response:
        body = await request.read()
        task = asyncio.create_task(forward(body))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return web.json_response({"accepted": True}, status=202)

    async def on_start(app: web.Application) -> None:
        session["s"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))

    async def on_stop(app: web.Application) -> None:
        await session["s"].close()

    app = web.Application()
    app.router.add_post("/v1/jobs", accept)
    app.on_startup.append(on_start)
    app.on_cleanup.append(on_stop)
    ready.set()
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


class Proc:
    def __init__(self, target: Any, *args: Any) -> None:
        ctx = mp.get_context("spawn")
        self.ready = ctx.Event()
        self.proc = ctx.Process(target=target, args=(*args, self.ready), daemon=True)

    def start(self, wait_port: int) -> None:
        self.proc.start()
        self.ready.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", wait_port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("process did not start listening")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()


def with_children(pids: list[int]) -> list[int]:
    """These processes and their direct children (the gateway's filter process is one), from
    /proc: what a benchmark charges a server with, CPU time or memory."""
    out = list(pids)
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                out += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
            except OSError:
                continue
    return out


def start_receiver() -> tuple[Proc, int]:
    port = free_port()
    proc = Proc(_receiver_main, port)
    proc.start(port)
    return proc, port


def start_relay(target: str) -> tuple[Proc, int]:
    port = free_port()
    proc = Proc(_relay_main, port, target)
    proc.start(port)
    return proc, port
