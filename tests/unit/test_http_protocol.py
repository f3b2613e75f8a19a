"""The response-writing shim: a head and its body leave in one write, and nothing is ever held back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.http_protocol import _OneWrite


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else None


def _pair() -> tuple[FakeTransport, _OneWrite]:
    transport = FakeTransport()
    return transport, _OneWrite(transport)  # type: ignore[arg-type]


async def test_head_and_body_leave_in_one_write() -> None:
    transport, shim = _pair()
    shim.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 2\r\n\r\n")
    assert transport.writes == []
    shim.write(b"{}")
    assert transport.writes == [b"HTTP/1.1 202 Accepted\r\ncontent-length: 2\r\n\r\n{}"]
    shim.write(b"more")  # later writes pass straight through
    assert transport.writes[-1] == b"more"
    await asyncio.sleep(0)  # the scheduled flush finds nothing left to send
    assert len(transport.writes) == 2


async def test_100_continue_is_not_held() -> None:
    transport, shim = _pair()
    shim.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # before the response starts: the client waits on it
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    shim.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 2\r\n\r\n")  # the response's head is held
    shim.write(b"{}")
    assert transport.writes[1:] == [b"HTTP/1.1 202 Accepted\r\ncontent-length: 2\r\n\r\n{}"]


async def test_a_head_without_a_body_in_the_same_turn_is_flushed() -> None:
    transport, shim = _pair()
    shim.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    await asyncio.sleep(0)
    assert transport.writes == [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"]


async def test_close_sends_a_held_head_first_and_delegates_the_rest() -> None:
    transport, shim = _pair()
    shim.write(b"HEAD")
    shim.close()
    assert transport.writes == [b"HEAD"] and transport.closed
    assert shim.is_closing() and shim.get_extra_info("peername") == ("127.0.0.1", 1)


async def test_a_flush_after_the_client_left_writes_nothing() -> None:
    transport, shim = _pair()
    shim.write(b"HEAD")
    transport.closed = True
    await asyncio.sleep(0)
    assert transport.writes == []


pytestmark = pytest.mark.asyncio
