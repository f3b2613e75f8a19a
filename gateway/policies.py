"""Which compiled policy a job uses: the tenant's own (set through the API), else the file policy
of that name under `config/policies/`. Compiled policies are cached; a tenant policy is re-read at
most every `ttl` seconds so a change made through another instance takes effect quickly.

Compiling builds every matcher of a policy (tens of milliseconds): it runs on the offload
threads, never on the event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.offload import Offload
from gateway.store.base import Store
from rules import CompiledPolicy, PolicyError, compile_policy, load_policy_dir


class PolicyRegistry:
    def __init__(self, store: Store, policy_dir: Path, offload: Offload, *, ttl: float = 2.0) -> None:
        self._store = store
        self._offload = offload
        self._files: dict[str, CompiledPolicy] = load_policy_dir(policy_dir) if policy_dir.is_dir() else {}
        self._ttl = ttl
        # (tenant, name) -> (checked_at, updated_at or None, compiled or None)
        self._cache: dict[tuple[str, str], tuple[float, float | None, CompiledPolicy | None]] = {}
        # (tenant, name, updated_at) -> the compile under way: a burst of requests right after a
        # change waits for one compile instead of queueing one each
        self._compiling: dict[tuple[str, str, float], asyncio.Future[CompiledPolicy | None]] = {}

    @property
    def file_policies(self) -> Mapping[str, CompiledPolicy]:
        return self._files

    async def compile(self, name: str, source: Mapping[str, Any]) -> CompiledPolicy:
        """Compile or raise PolicyError (the API turns it into a 422 naming the rule)."""
        return await self._offload.run(compile_policy, source, name)

    async def warm(self) -> None:
        """Run each file policy once in both directions, before the process serves: the first
        scan of a fresh policy costs 5-11 ms more than the next (automata states, caches)."""
        for compiled in self._files.values():
            await self._offload.run(compiled.warm)

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
        # The same version as cached: compiled already (by another request while we read the
        # store, or before the TTL ran out), or known not to compile (stored before a rule change
        # made it invalid): either way, no compile again.
        hit = self._cache.get(key)
        if hit is not None and hit[1] == record.updated_at:
            compiled: CompiledPolicy | None = hit[2]
            self._cache[key] = (now, record.updated_at, compiled)
        else:
            compiled = await self._compile_once(tenant_id, name, record.updated_at, record.source)
        return compiled or self._files.get(name)

    async def _compile_once(
        self, tenant_id: str, name: str, updated_at: float, source: Mapping[str, Any]
    ) -> CompiledPolicy | None:
        key = (tenant_id, name, updated_at)
        future = self._compiling.get(key)
        if future is None:
            future = asyncio.ensure_future(self._compile_stored(tenant_id, name, updated_at, source))
            self._compiling[key] = future
            future.add_done_callback(lambda _: self._compiling.pop(key, None))
        return await asyncio.shield(future)  # one waiter giving up does not cancel the others' compile

    async def _compile_stored(
        self, tenant_id: str, name: str, updated_at: float, source: Mapping[str, Any]
    ) -> CompiledPolicy | None:
        try:
            compiled: CompiledPolicy | None = await self.compile(name, source)
        except PolicyError:  # stored before a rule change made it invalid: fall back, never crash
            compiled = None
        # Cached before the compile counts as done, so no request reading the store meanwhile
        # starts another; unless a newer put got there first.
        latest = self._cache.get((tenant_id, name))
        if latest is None or latest[1] is None or latest[1] <= updated_at:
            self._cache[(tenant_id, name)] = (time.monotonic(), updated_at, compiled)
        return compiled

    def remember(self, tenant_id: str, name: str, compiled: CompiledPolicy, updated_at: float) -> None:
        """`compiled` was just stored as the tenant's policy `name` at `updated_at`: use it from now
        on without compiling it again."""
        self._cache[(tenant_id, name)] = (time.monotonic(), updated_at, compiled)

    def forget(self, tenant_id: str, name: str) -> None:
        self._cache.pop((tenant_id, name), None)
