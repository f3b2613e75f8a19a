"""Random bytes from the OS CSPRNG, fetched in blocks.

`os.urandom` is a system call that releases the GIL; on the create hot path (a job id, a webhook
secret, a nonce: several per request) each release lets the SQLite writer thread take the GIL, and
the request then waits to get it back. Reading 4 KiB at a time makes that one call per ~100 requests.

The bytes are the OS's; each is handed out once (a lock guards the cursor, so two threads never get
the same bytes: nonces must never repeat), and a forked child drops its copy of the block, so a
parent and its child never share random bytes either.
"""

from __future__ import annotations

import os
import threading

_BLOCK = 4096


class _Pool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._block = b""
        self._pos = 0

    def take(self, n: int) -> bytes:
        if n > _BLOCK // 4:
            return os.urandom(n)
        with self._lock:
            pos = self._pos
            if pos + n > len(self._block):
                self._block = os.urandom(_BLOCK)
                pos = 0
            self._pos = pos + n
            return self._block[pos : pos + n]

    def forget(self) -> None:
        """After fork, in the child: never hand out bytes the parent may also hand out."""
        self._lock = threading.Lock()
        self._block = b""
        self._pos = 0


_pool = _Pool()
os.register_at_fork(after_in_child=_pool.forget)


def token_bytes(n: int) -> bytes:
    """`n` bytes from the OS CSPRNG (as `secrets.token_bytes`), fetched in blocks."""
    return _pool.take(n)
