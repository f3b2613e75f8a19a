"""Which compiled policy a job uses: the tenant's own (set through the API), else the file policy
of that name under `config/policies/`. Compiled policies are cached; a tenant policy is re-read at
most every `ttl` seconds so a change made through another instance takes effect quickly."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.store.base import Store
from rules import CompiledPolicy, PolicyError, compile_policy, load_policy_dir


class PolicyRegistry:
    def __init__(self, store: Store, policy_dir: Path, *, ttl: float = 2.0) -> None:
        self._store = store
        self._files: dict[str, CompiledPolicy] = load_policy_dir(policy_dir) if policy_dir.is_dir() else {}
        self._ttl = ttl
        # (tenant, name) -> (checked_at, updated_at or None, compiled or None)
        self._cache: dict[tuple[str, str], tuple[float, float | None, CompiledPolicy | None]] = {}

    @property
    def file_policies(self) -> Mapping[str, CompiledPolicy]:
        return self._files

    @staticmethod
    def validate(name: str, source: Mapping[str, Any]) -> CompiledPolicy:
        """Compile or raise PolicyError (the API turns it into a 422 naming the rule)."""
        return compile_policy(source, name=name)

    async def get(self, tenant_id: str, name: str) -> CompiledPolicy | None:
        key = (tenant_id, name)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < self._ttl:
            return hit[2] or self._files.get(name)
        record = await self._store.get_policy(tenant_id, name)
        if record is None:
            self._cache[key] = (now, None, None)
            return self._files.get(name)
        if hit is not None and hit[1] == record.updated_at and hit[2] is not None:
            compiled = hit[2]
        else:
            try:
                compiled = compile_policy(record.source, name=name)
            except PolicyError:  # stored before a rule change made it invalid: fall back, never crash
                compiled = None
        self._cache[key] = (now, record.updated_at, compiled)
        return compiled or self._files.get(name)

    def forget(self, tenant_id: str, name: str) -> None:
        self._cache.pop((tenant_id, name), None)
