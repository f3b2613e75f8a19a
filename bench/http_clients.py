"""Which HTTP client should deliver webhooks? Measure, on this machine, with the peers in the same run.

Starts a local aiohttp receiver in a separate process (127.0.0.1 only; it stops by itself after a
bounded number of requests, a deadline, or when this process goes away), then posts ~1 KB JSON
bodies with:

  aiohttp      a raw `aiohttp.ClientSession` (the ceiling we compare against)
  httpx        `httpx.AsyncClient`
  aio-ours     our `AiohttpTransport` (static SSRF check, capped read, result classification)
  h1-ours      our `H1Transport` (the same duties on a lean HTTP/1.1 client over httptools)
  h1+signing   `H1Transport` plus `webhook_headers` signing per request (the real per-attempt cost)

at several concurrency levels, on uvloop as the server runs, printing requests/s, the ratio to raw
aiohttp, and this process's CPU time per request: requests/s is capped by the receiver (one
process on the other core), CPU per request is what a client costs the gateway's event loop.

    .venv/bin/python bench/http_clients.py [--requests 3000] [--concurrency 16,64,256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
import httpx
import uvloop

from gateway.crypto import new_webhook_secret
from gateway.delivery.h1 import H1Transport
from gateway.delivery.sender import AiohttpTransport, Transport
from gateway.delivery.signing import webhook_headers

BODY = json.dumps(
    {
        "event": "job.completed",
        "job_id": "job_01hzzzzzzzzzzzzzzzzzzzzzzz",
        "status": "completed",
        "timestamp": "2025-01-01T00:00:00.000Z",
        "metadata": {"tenant": "bench"},
        "data": {
            "inbound": {"verdict": "allowed", "message": "x" * 400, "matches": []},
            "outbound": {"verdict": "allowed", "message": "y" * 400, "matches": []},
        },
    },
    separators=(",", ":"),
).encode()
SECRET = new_webhook_secret()
HEADERS = webhook_headers("msg_bench", int(time.time()), BODY, SECRET)

# ---------------------------------------------------------------------------------------------
# The receiver (child process)


def _receiver(conn: Connection, max_requests: int, deadline_seconds: float) -> None:
    from aiohttp import web

    async def main() -> None:
        served = 0
        done = asyncio.Event()
        parent = os.getppid()

        async def hook(request: web.Request) -> web.Response:
            nonlocal served
            await request.read()
            served += 1
            if served >= max_requests:
                done.set()
            return web.Response(body=b'{"ok":true}', content_type="application/json")

        app = web.Application()
        app.router.add_post("/hook", hook)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        server = site._server
        assert server is not None and hasattr(server, "sockets")
        conn.send(server.sockets[0].getsockname()[1])

        async def watch() -> None:
            end = time.monotonic() + deadline_seconds
            while time.monotonic() < end and os.getppid() == parent:
                if conn.poll():
                    break
                await asyncio.sleep(0.2)
            done.set()

        watcher = asyncio.create_task(watch())
        await done.wait()
        watcher.cancel()
        await runner.cleanup()

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# The clients

Post = Callable[[], Awaitable[None]]


async def _drive(post: Post, requests: int, concurrency: int) -> tuple[float, float]:
    """Run `requests` posts with `concurrency` workers; return (requests/s, CPU µs per request)."""
    remaining = requests

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await post()

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return requests / (time.perf_counter() - started), 1e6 * (time.process_time() - cpu) / requests


async def bench_aiohttp(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def post() -> None:
            async with session.post(url, data=BODY, headers=HEADERS) as resp:
                await resp.read()
                assert resp.status == 200

        await _drive(post, min(200, requests), concurrency)  # warm the pool
        return await _drive(post, requests, concurrency)


async def bench_httpx(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:

        async def post() -> None:
            resp = await client.post(url, content=BODY, headers=HEADERS)
            assert resp.status_code == 200

        await _drive(post, min(200, requests), concurrency)
        return await _drive(post, requests, concurrency)


async def bench_transport(
    url: str, requests: int, concurrency: int, sign: bool = False, kind: type[Transport] = AiohttpTransport
) -> tuple[float, float]:
    transport = kind(
        timeout_seconds=30.0,
        max_connections=concurrency,
        max_per_host=concurrency,
        allow_private_networks=True,  # the receiver is on loopback
    )
    try:

        async def post() -> None:
            headers = webhook_headers("msg_bench", int(time.time()), BODY, SECRET) if sign else HEADERS
            result = await transport.post(url, headers, BODY)
            assert result.outcome == "success", result

        await _drive(post, min(200, requests), concurrency)
        return await _drive(post, requests, concurrency)
    finally:
        await transport.close()


async def bench_h1(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    return await bench_transport(url, requests, concurrency, kind=H1Transport)


async def bench_h1_signing(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    return await bench_transport(url, requests, concurrency, sign=True, kind=H1Transport)


CLIENTS: dict[str, Callable[[str, int, int], Coroutine[Any, Any, tuple[float, float]]]] = {
    "aiohttp": bench_aiohttp,
    "httpx": bench_httpx,
    "aio-ours": bench_transport,
    "h1-ours": bench_h1,
    "h1+signing": bench_h1_signing,
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=3000, help="timed requests per run (default 3000)")
    parser.add_argument("--httpx-requests", type=int, default=1000, help="timed requests for httpx (slower)")
    parser.add_argument("--concurrency", default="16,64,256", help="comma-separated levels")
    parser.add_argument("--rounds", type=int, default=3, help="repeat each run; the best round counts")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]

    def count(name: str) -> int:
        return int(args.httpx_requests if name == "httpx" else args.requests)

    budget = sum((count(n) + 200) * args.rounds for n in CLIENTS) * len(levels) + 1000
    ctx = mp.get_context("spawn")
    parent_conn, child_conn = ctx.Pipe()
    receiver = ctx.Process(target=_receiver, args=(child_conn, budget, 600.0), daemon=True)
    receiver.start()
    try:
        if not parent_conn.poll(30):
            print("receiver did not start", file=sys.stderr)
            return 1
        port = parent_conn.recv()
        url = f"http://127.0.0.1:{port}/hook"
        print(f"receiver pid {receiver.pid} on {url}; body {len(BODY)} bytes; cpus {os.cpu_count()}")
        print(f"{'client':<10} {'conc':>5} {'req/s':>9} {'vs aiohttp':>11} {'cpu us/req':>11}")
        results: list[dict[str, object]] = []
        for level in levels:
            # Rounds interleave the clients, so drift on a shared machine hits them all alike.
            best: dict[str, tuple[float, float]] = dict.fromkeys(CLIENTS, (0.0, float("inf")))
            for _ in range(args.rounds):
                for name, fn in CLIENTS.items():
                    rps, cpu = uvloop.run(fn(url, count(name), level))
                    best[name] = (max(best[name][0], rps), min(best[name][1], cpu))
            for name, (rps, cpu) in best.items():
                ratio = rps / best["aiohttp"][0]
                print(f"{name:<10} {level:>5} {rps:>9.0f} {ratio:>10.0%} {cpu:>11.1f}", flush=True)
                results.append(
                    {"client": name, "concurrency": level, "rps": round(rps), "ratio": ratio, "cpu_us": cpu}
                )
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=2))
    finally:
        parent_conn.send("stop")
        receiver.join(10)
        if receiver.is_alive():
            receiver.terminate()
            receiver.join(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
