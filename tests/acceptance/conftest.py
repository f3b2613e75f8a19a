from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.acceptance.harness import Receiver, Server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(root=Path(tmp_path_factory.mktemp("gateway")))
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rcv = Receiver()
    await rcv.start()
    try:
        yield rcv
    finally:
        await rcv.stop()
