from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import SecretStr

from gateway.app import build_runtime
from gateway.crypto import hash_api_key
from gateway.settings import Settings


async def test_bootstrap_key_is_created_once_even_when_instances_start_together(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/g.db",
        var_dir=tmp_path,
        bootstrap_api_key=SecretStr("gwk_bootstrap_for_the_race_test_0123456789"),
    )
    first = await build_runtime(settings)
    second = await build_runtime(settings)
    try:
        await asyncio.gather(first.ensure_bootstrap_key(), second.ensure_bootstrap_key())
        digest = hash_api_key("gwk_bootstrap_for_the_race_test_0123456789")
        assert await first.store.tenant_for_key(digest) == "default"
        assert await first.store.count_api_keys() == 1
    finally:
        await first.shutdown()
        await second.shutdown()
