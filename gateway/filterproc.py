"""The rule engine in a helper process, so the event loop's thread is left to HTTP, the store and
delivery (`GATEWAY_FILTER_PROCESS`, on by default where there are two CPUs or more).

Why: `gateway serve` is one event-loop thread, and that thread is what limits it. Inside it a scan
costs two to three times what it costs alone (the bench prompt and answer: 64-92 us against 27-32
us), because everything else the loop touches between two scans evicts the automata RE2 walks. In a
process of its own, on the other CPU, the engine stays warm; the loop only pickles the texts and
unpickles the verdicts. Measured under `bench/e2e_throughput.py` load: the loop thread's CPU per
job fell by about a quarter, and the CPU of both processes together fell too.

The protocol: length-prefixed pickles over a socket pair. The parent sends a policy's source once
(`policy`), then scans that name it by number (`scan`), and `drop` once the compiled policy is
garbage. The helper answers each `scan` with one verdict per text, in order, stopping after the
first blocked one (a blocked prompt's answer is never filtered). It runs requests in the order
they came and writes all the answers of one read together.

Nothing depends on the helper being there. A scan that cannot go to it (not started yet, dead,
too far behind, a large text) runs on the event loop as before, and scans in flight when it dies
are run again there; the helper is then started again. Its verdicts are the engine's own (the same
`plan.scan_chain` on the same policy source), so where a text is scanned never changes what is decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from gateway import plan
from rules import CompiledPolicy, compile_policy

log = logging.getLogger("gateway.filter")

#: The directory holding the `gateway` package: the helper imports the same code as its parent.
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)

_LEN = struct.Struct("<I")
#: Verdict and the seconds the engine took for it.
Result = tuple[dict[str, Any], float]


class FilterUnavailable(Exception):
    """The helper cannot take this scan: run it on the event loop instead."""


def _frame(message: tuple[Any, ...]) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(payload)) + payload


def _frames(buffer: bytearray) -> list[Any]:
    """Take every complete frame off the front of `buffer`."""
    out = []
    pos = 0
    size = len(buffer)
    while size - pos >= 4:
        (n,) = _LEN.unpack_from(buffer, pos)
        if size - pos - 4 < n:
            break
        out.append(pickle.loads(buffer[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    del buffer[:pos]
    return out


class FilterProcess(asyncio.Protocol):
    """The parent's end: start the helper, hand it scans, restart it when it dies."""

    def __init__(
        self,
        *,
        max_pending: int = 64,
        hang_seconds: float = 10.0,
        restart_delay: float = 1.0,
        python: str = sys.executable,
    ) -> None:
        self.max_pending = max_pending
        self.hang_seconds = hang_seconds
        self.restart_delay = restart_delay
        self._python = python
        self._keys = itertools.count(1)
        self._ids = itertools.count(1)
        self._registered: weakref.WeakKeyDictionary[CompiledPolicy, int] = weakref.WeakKeyDictionary()
        #: The `drop` notice of each policy the current helper has, by key (detached on restart).
        self._finalizers: dict[int, weakref.finalize[Any, Any]] = {}
        self._pending: dict[int, tuple[asyncio.Future[list[Result]], float]] = {}
        self._out: list[bytes] = []
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._child: asyncio.subprocess.Process | None = None
        self._ready = False
        self._closing = False
        self._flush_scheduled = False
        self._watchdog: asyncio.TimerHandle | None = None
        self._restart: asyncio.TimerHandle | None = None
        self._starting: asyncio.Task[None] | None = None
        self.starts = 0  # how many helpers were started: 1 + restarts
        self.scanned = 0  # texts the helpers scanned
        #: Compiled in every helper before it takes scans (the file policies).
        self.preload: list[CompiledPolicy] = []

    # ---- life -----------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._ready and self._transport is not None

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    async def start(self) -> None:
        """Start the helper. It takes scans once it says it is ready (after its imports); until
        then every scan runs on the event loop."""
        if self._closing:
            return
        ours, theirs = socket.socketpair()
        path = os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))
        try:
            self._child = await asyncio.create_subprocess_exec(
                self._python,
                "-m",
                "gateway.filterproc",
                str(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONPATH=path),
                # Its own process group: Ctrl-C in a terminal signals the foreground group, and
                # the parent, not the keyboard, decides when the helper stops (it closes the
                # socket). A signal arriving during its imports would otherwise kill it there.
                start_new_session=True,
            )
        except OSError:
            ours.close()
            log.exception("cannot start the filter process; filtering on the event loop")
            self._schedule_restart()
            return
        finally:
            theirs.close()
        self.starts += 1
        self._registered = weakref.WeakKeyDictionary()
        for notice in self._finalizers.values():  # the old helper's numbers mean nothing to this one
            notice.detach()
        self._finalizers.clear()
        loop = asyncio.get_running_loop()
        await loop.create_unix_connection(lambda: self, sock=ours)
        for policy in self.preload:
            self._register(policy)
        self._send(("hello",))  # answered with "ready" once the preloaded policies are compiled
        self._watchdog = loop.call_later(self.hang_seconds / 2, self._check_hung)

    async def close(self, grace: float = 5.0) -> None:
        """Stop the helper (it exits when its end of the socket closes); scans still waiting for
        it are run on the event loop by their callers."""
        self._closing = True
        starting = self._starting
        if starting is not None and not starting.done():
            # A restart is spawning a helper right now: let it finish, so that the helper it
            # spawns is the one stopped here rather than left running until this process exits.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(starting), grace)
        for timer in (self._watchdog, self._restart):
            if timer is not None:
                timer.cancel()
        if self._transport is not None:
            self._transport.close()
        child = self._child
        if child is not None:
            try:
                await asyncio.wait_for(child.wait(), grace)
            except TimeoutError:
                child.kill()
                await child.wait()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._ready = False
        self._buffer = bytearray()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._ready = False
        self._out.clear()
        pending, self._pending = self._pending, {}
        for future, _ in pending.values():
            if not future.done():
                future.set_exception(FilterUnavailable("the filter process stopped"))
        if self._watchdog is not None:
            self._watchdog.cancel()
        child = self._child
        if child is not None and child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.kill()  # a broken socket from a live helper: start afresh (asyncio reaps it)
        if not self._closing:
            log.warning(
                "the filter process stopped (exit %s); filtering on the event loop until it is back",
                child.returncode if child is not None else None,
            )
            self._schedule_restart()

    def _schedule_restart(self) -> None:
        if self._closing:
            return
        loop = asyncio.get_running_loop()

        def restart() -> None:
            self._restart = None
            self._starting = loop.create_task(self.start())

        self._restart = loop.call_later(self.restart_delay, restart)

    def _check_hung(self) -> None:
        """A helper that has sat on a scan for `hang_seconds` is stuck: kill it (its scans are then
        run on the event loop, and a new helper is started)."""
        self._watchdog = None
        if self._transport is None:
            return
        oldest = next(iter(self._pending.values()), None)
        if oldest is not None and time.monotonic() - oldest[1] > self.hang_seconds:
            log.error("the filter process has not answered for %.0f s: restarting it", self.hang_seconds)
            if self._child is not None:
                with contextlib.suppress(ProcessLookupError):
                    self._child.kill()
            return
        loop = asyncio.get_running_loop()
        self._watchdog = loop.call_later(self.hang_seconds / 2, self._check_hung)

    # ---- scans ----------------------------------------------------------------------------

    def scan(self, policy: CompiledPolicy, texts: Sequence[tuple[str, str]]) -> asyncio.Future[list[Result]]:
        """Verdicts for `texts` ((text, direction) pairs) in order, stopping after the first one
        blocked. Raises FilterUnavailable at once if the helper cannot take it now."""
        if not self.ready or len(self._pending) >= self.max_pending:
            raise FilterUnavailable("the filter process is not taking scans now")
        key = self._registered.get(policy) or self._register(policy)
        rid = next(self._ids)
        future: asyncio.Future[list[Result]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = (future, time.monotonic())
        self._send(("scan", rid, key, tuple(texts)))
        return future

    def _register(self, policy: CompiledPolicy) -> int:
        """Send the helper `policy`'s source to compile, under a new number."""
        if policy.source is None:
            raise FilterUnavailable("this policy has no source to send")
        key = next(self._keys)
        self._registered[policy] = key
        self._send(("policy", key, policy.name, policy.source))
        self._finalizers[key] = weakref.finalize(policy, self._drop, key)
        return key

    def _drop(self, key: int) -> None:
        self._finalizers.pop(key, None)
        if self._transport is not None:
            with contextlib.suppress(RuntimeError):  # no running loop (interpreter exit)
                self._send(("drop", key))

    def _send(self, message: tuple[Any, ...]) -> None:
        """Queue a message; everything queued in one event-loop turn goes out in one write."""
        self._out.append(_frame(message))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._transport is not None and self._out:
            self._transport.write(b"".join(self._out))
        self._out.clear()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        for message in _frames(self._buffer):
            kind = message[0]
            if kind == "ok":
                entry = self._pending.pop(message[1], None)
                self.scanned += len(message[2])
                if entry is not None and not entry[0].done():
                    entry[0].set_result(message[2])
            elif kind == "unavailable":
                entry = self._pending.pop(message[1], None)
                if entry is not None and not entry[0].done():
                    entry[0].set_exception(FilterUnavailable(message[2]))
            elif kind == "ready":
                self._ready = True


# ---- the helper ---------------------------------------------------------------------------------


def _serve(sock: socket.socket) -> None:
    policies: dict[int, CompiledPolicy | str] = {}
    buffer = bytearray()
    while True:
        data = sock.recv(1 << 20)
        if not data:
            return  # the parent closed its end, or died
        buffer += data
        replies = []
        for message in _frames(buffer):
            kind = message[0]
            if kind == "scan":
                _, rid, key, texts = message
                policy = policies.get(key)
                if isinstance(policy, CompiledPolicy):
                    replies.append(_frame(("ok", rid, plan.scan_chain(policy, texts))))
                else:
                    replies.append(_frame(("unavailable", rid, policy or "unknown policy")))
            elif kind == "policy":
                _, key, name, source = message
                try:
                    compiled = compile_policy(source, name)
                    compiled.warm()
                    policies[key] = compiled
                except Exception as exc:  # the parent compiled it; this should not happen
                    policies[key] = f"cannot compile policy {name!r}: {exc}"
            elif kind == "drop":
                policies.pop(message[1], None)
            elif kind == "hello":
                replies.append(_frame(("ready",)))
        if replies:
            sock.sendall(b"".join(replies))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    # The parent decides when we stop (it closes the socket). We run in a process group of our
    # own, so a terminal's Ctrl-C does not reach us; a SIGINT sent to us by pid is ignored too.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=int(args[0]))
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        _serve(sock)
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
