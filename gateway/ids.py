"""Identifiers: time-ordered, URL-safe, unguessable.

A job id sorts by creation time (48-bit milliseconds then 80 random bits, Crockford base32, like a
ULID), so listing newest-first is an index scan on the id alone and the cursor is just an id.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time

from gateway.rand import token_bytes

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


# Every pair of digits, so a 130-bit id is 13 table lookups (base64.b32encode is pure Python in
# 3.11 and cost ~12 µs an id; this ~2 µs).
_PAIRS = tuple(a + b for a in _ALPHABET for b in _ALPHABET)


def _b32(value: int, length: int) -> str:
    """`value` mod 32**length as `length` Crockford base32 digits, most significant first (so ids
    sort by time)."""
    value &= (1 << (5 * length)) - 1
    head = ""
    if length % 2:
        length -= 1
        head = _ALPHABET[value >> (5 * length)]
        value &= (1 << (5 * length)) - 1
    pairs = _PAIRS
    return head + "".join([pairs[(value >> shift) & 1023] for shift in range(5 * length - 10, -1, -10)])


_RAND_BITS = 80
_last = [0, 0]  # (ms, random part) of the previous id made in this process
_lock = threading.Lock()


def ulid(now: float | None = None) -> str:
    """Within one process, ids made in the same millisecond still sort in creation order (ULID's
    monotonic mode): the random part of the previous id plus one. Across processes, the millisecond
    orders them."""
    ms = int((time.time() if now is None else now) * 1000) & ((1 << 48) - 1)
    with _lock:
        if ms == _last[0] and _last[1] + 1 < (1 << _RAND_BITS):
            rand = _last[1] + 1
        else:
            rand = int.from_bytes(token_bytes(_RAND_BITS // 8), "big") >> 1  # room to count up
        _last[0], _last[1] = ms, rand
    return _b32((ms << _RAND_BITS) | rand, 26)


def job_id(now: float | None = None) -> str:
    return "job_" + ulid(now)


def webhook_id(now: float | None = None) -> str:
    return "msg_" + ulid(now)


def webhook_id_for(job: str, event: str) -> str:
    """The one webhook-id of a (job, event): derived, not random, so a job re-run after its worker
    died re-sends under the same id and the receiver's dedupe holds even across crashes."""
    digest = hashlib.sha256(f"{job}\x00{event}".encode()).digest()
    return "msg_" + _b32(int.from_bytes(digest[:17], "big") >> 6, 26)


def worker_id() -> str:
    return f"w_{os.getpid()}_{os.urandom(4).hex()}"
