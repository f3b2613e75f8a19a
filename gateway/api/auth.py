"""Bearer API keys -> tenant, with a small cache and an optional per-key rate limit.

Keys are looked up by their SHA-256 (see `gateway.crypto.hash_api_key`). A hit is cached for
`api_key_cache_seconds` (10 s by default) so the hot path costs no database read: a key revoked with
`gateway keys revoke` stops working within that time. Misses are not cached, so a key created a
moment ago (`gateway keys create`) works at once. The rate limit is a token bucket per key, in memory: it
protects one instance from one noisy client, it is not a global quota.

Invalid keys have their own budget per client address (`auth_failure_rate_per_second`,
`auth_failure_burst`): each costs a database read, so a client spraying made-up keys could otherwise
keep the store busy at no cost to itself. Once an address has spent its budget, a key it has not
shown valid here before is answered 429 without a read; a key this instance has seen valid is
still looked up (it may have been revoked), so a valid client behind the same address keeps working.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from starlette.requests import Request

from gateway.api.errors import ApiError
from gateway.crypto import hash_api_key
from gateway.runtime import Runtime

#: The budgets' and the cache's clock (seconds, monotonic); tests hold it still.
_clock = time.monotonic

_CACHE_MAX = 10_000
_FAILURE_ADDRESSES_MAX = 10_000
_UNAUTHENTICATED_HEADERS = {"WWW-Authenticate": "Bearer"}


@dataclass
class _Bucket:
    tokens: float
    updated: float

    def level(self, rate: float, burst: int, now: float) -> float:
        """The tokens there are at `now`: refilled at `rate` per second, up to `burst`."""
        return min(float(burst), self.tokens + (now - self.updated) * rate)


@dataclass
class AuthState:
    """Per-app state: lives on `app.state` so several apps in one process never share it."""

    cache: dict[str, tuple[str, float]] = field(default_factory=dict)
    buckets: dict[str, _Bucket] = field(default_factory=dict)
    failures: dict[str, _Bucket] = field(default_factory=dict)  # invalid keys, by client address

    def cached(self, digest: str, now: float) -> str | None:
        hit = self.cache.get(digest)
        if hit is None or hit[1] < now:
            return None
        return hit[0]

    def remember(self, digest: str, tenant: str, now: float, ttl: float) -> None:
        if len(self.cache) >= _CACHE_MAX:
            self.cache.clear()  # crude but bounded; refilling costs one read per key
        self.cache[digest] = (tenant, now + ttl)

    def known(self, digest: str) -> bool:
        """Whether this key was valid here recently (its cache entry may have expired since)."""
        return digest in self.cache

    def take(self, digest: str, rate: float, burst: int, now: float) -> float:
        """Take one token; 0.0 when allowed, else the seconds until a token is back."""
        return _take(self.buckets, digest, rate, burst, now)

    def failure_wait(self, address: str, rate: float, burst: int, now: float) -> float:
        """0.0 when `address` may try an unknown key, else the seconds until it may again."""
        bucket = self.failures.get(address)
        if bucket is None:
            return 0.0
        tokens = bucket.level(rate, burst, now)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / rate

    def record_failure(self, address: str, rate: float, burst: int, now: float) -> None:
        """`address` sent a key the store does not know: one token of its budget is spent."""
        if address not in self.failures and len(self.failures) >= _FAILURE_ADDRESSES_MAX:
            # bounded: forget the addresses whose budget is whole again, else start over
            full = [a for a, b in self.failures.items() if b.level(rate, burst, now) >= burst]
            for a in full:
                del self.failures[a]
            if len(self.failures) >= _FAILURE_ADDRESSES_MAX:
                self.failures.clear()
        _take(self.failures, address, rate, burst, now)


def _take(buckets: dict[str, _Bucket], name: str, rate: float, burst: int, now: float) -> float:
    """Token bucket: take one token; 0.0 when allowed, else the seconds until a token is back."""
    bucket = buckets.get(name)
    if bucket is None:
        bucket = buckets[name] = _Bucket(tokens=float(burst), updated=now)
    bucket.tokens = bucket.level(rate, burst, now)
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
    now = _clock()
    tenant = state.cached(digest, now)
    runtime = runtime_of(request)
    if tenant is None:
        settings = runtime.settings
        failure_rate = settings.auth_failure_rate_per_second
        # a key seen valid before is always looked up: it may have been revoked since, and its
        # owner must not be locked out by someone else at the same address
        guarded = failure_rate > 0 and not state.known(digest)
        address = request.client.host if request.client is not None else ""
        if guarded:
            wait = state.failure_wait(address, failure_rate, settings.auth_failure_burst, now)
            if wait > 0:
                raise _rate_limited(wait, "too many invalid API keys from this address")
        # Only an invalid key spends the budget (not a valid one, nor a store failure): a client
        # starting with many concurrent requests on a key not yet cached must not trip it.
        # Concurrent invalid keys can overrun it by the requests in flight when it runs out.
        tenant = await runtime.store.tenant_for_key(digest)
        if tenant is None:
            state.cache.pop(digest, None)  # revoked: from now on it spends the budget like any other
            if failure_rate > 0:
                state.record_failure(address, failure_rate, settings.auth_failure_burst, now)
            raise _unauthenticated("the API key is not valid")
        state.remember(digest, tenant, now, runtime.settings.api_key_cache_seconds)
    rate = runtime.settings.rate_limit_per_second
    if rate > 0:
        wait = state.take(digest, rate, runtime.settings.rate_limit_burst, now)
        if wait > 0:
            raise _rate_limited(wait, "too many requests for this API key")
    return tenant


def _rate_limited(wait: float, why: str) -> ApiError:
    retry_after = max(1, math.ceil(wait))
    return ApiError(
        429, "rate_limited", f"{why}; retry in {retry_after} s", headers={"Retry-After": str(retry_after)}
    )
