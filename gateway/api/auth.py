"""Bearer API keys -> tenant, with a small cache and an optional per-key rate limit.

Keys are looked up by their SHA-256 (see `gateway.crypto.hash_api_key`). A hit is cached for a few
seconds so the hot path costs no database read; misses are not cached, so a key created a moment
ago (`gateway keys create`) works at once. The rate limit is a token bucket per key, in memory: it
protects one instance from one noisy client, it is not a global quota.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from starlette.requests import Request

from gateway.api.errors import ApiError
from gateway.crypto import hash_api_key
from gateway.runtime import Runtime

CACHE_TTL_SECONDS = 10.0
_CACHE_MAX = 10_000
_UNAUTHENTICATED_HEADERS = {"WWW-Authenticate": "Bearer"}


@dataclass
class _Bucket:
    tokens: float
    updated: float


@dataclass
class AuthState:
    """Per-app state: lives on `app.state` so several apps in one process never share it."""

    cache: dict[str, tuple[str, float]] = field(default_factory=dict)
    buckets: dict[str, _Bucket] = field(default_factory=dict)

    def cached(self, digest: str, now: float) -> str | None:
        hit = self.cache.get(digest)
        if hit is None or hit[1] < now:
            return None
        return hit[0]

    def remember(self, digest: str, tenant: str, now: float) -> None:
        if len(self.cache) >= _CACHE_MAX:
            self.cache.clear()  # crude but bounded; refilling costs one read per key
        self.cache[digest] = (tenant, now + CACHE_TTL_SECONDS)

    def take(self, digest: str, rate: float, burst: int, now: float) -> float:
        """Take one token; 0.0 when allowed, else the seconds until a token is back."""
        bucket = self.buckets.get(digest)
        if bucket is None:
            bucket = self.buckets[digest] = _Bucket(tokens=float(burst), updated=now)
        bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / rate


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _state(request: Request) -> AuthState:
    state = getattr(request.app.state, "gateway_auth", None)
    if state is None:
        state = AuthState()
        request.app.state.gateway_auth = state
    return state


def _unauthenticated(message: str) -> ApiError:
    return ApiError(401, "unauthenticated", message, headers=_UNAUTHENTICATED_HEADERS)


def bearer_token(request: Request) -> str:
    header = request.headers.get("authorization")
    if header is None:
        raise _unauthenticated("an API key is required: send Authorization: Bearer <key>")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise _unauthenticated("the Authorization header must be: Bearer <key>")
    return token


async def authenticate(request: Request) -> str:
    """The caller's tenant, or 401; 429 when the key is over its rate limit."""
    token = bearer_token(request)
    digest = hash_api_key(token)
    state = _state(request)
    now = time.monotonic()
    tenant = state.cached(digest, now)
    runtime = runtime_of(request)
    if tenant is None:
        tenant = await runtime.store.tenant_for_key(digest)
        if tenant is None:
            raise _unauthenticated("the API key is not valid")
        state.remember(digest, tenant, now)
    rate = runtime.settings.rate_limit_per_second
    if rate > 0:
        wait = state.take(digest, rate, runtime.settings.rate_limit_burst, now)
        if wait > 0:
            retry_after = max(1, math.ceil(wait))
            raise ApiError(
                429,
                "rate_limited",
                f"too many requests for this API key; retry in {retry_after} s",
                headers={"Retry-After": str(retry_after)},
            )
    return tenant
