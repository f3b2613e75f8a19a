"""Blocked randomness: every byte handed out once, across threads and across a fork."""

from __future__ import annotations

import os
import threading

import pytest

from gateway import rand


def test_no_two_takes_share_bytes_across_threads() -> None:
    seen: list[bytes] = []
    lock = threading.Lock()

    def work() -> None:
        mine = [rand.token_bytes(12) for _ in range(2000)]
        with lock:
            seen.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 16000 and all(len(b) == 12 for b in seen)
    assert len(set(seen)) == len(seen)  # 96-bit values: a repeat means a byte was handed out twice


def test_sizes_and_large_requests() -> None:
    assert rand.token_bytes(0) == b""
    assert len(rand.token_bytes(1)) == 1
    big = rand.token_bytes(10_000)  # larger than a block: straight from the OS
    assert len(big) == 10_000 and len(set(big)) > 200


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_reuse_the_parents_block() -> None:
    rand.token_bytes(16)  # make sure the parent holds a partly used block
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send what it draws next, then leave without cleanup
        os.close(read_end)
        os.write(write_end, rand.token_bytes(32))
        os._exit(0)
    os.close(write_end)
    child = os.read(read_end, 32)
    os.close(read_end)
    os.waitpid(pid, 0)
    parent = rand.token_bytes(32)
    assert len(child) == 32 and child != parent
