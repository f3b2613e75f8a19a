"""The HTTP transports' tests run on both event loops: the server runs on uvloop, and a protocol
can behave differently there (uvloop's transports are not asyncio subclasses, for one)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop

_BOTH_LOOPS = {"test_h1_client.py", "test_http_sender.py"}


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    if item.path.name in _BOTH_LOOPS:
        return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}
