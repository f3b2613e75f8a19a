"""Stores behind one protocol; `open_store` picks one from the database URL."""

from __future__ import annotations

from gateway.settings import Settings
from gateway.store.base import Store


def open_store(settings: Settings) -> Store:
    url = settings.database_url
    if url.startswith("sqlite:"):
        from gateway.store.sqlite import SqliteStore

        return SqliteStore(
            url, synchronous=settings.sqlite_synchronous, busy_timeout=settings.sqlite_busy_timeout_seconds
        )
    if url.startswith(("postgresql:", "postgres:")):
        from gateway.store.postgres import PostgresStore

        store: Store = PostgresStore(
            url,
            min_size=settings.database_pool_min,
            max_size=max(settings.database_pool_min, settings.database_pool_max),
            schema=settings.database_schema,
        )
        return store
    raise ValueError(f"unsupported GATEWAY_DATABASE_URL scheme: {url.split(':', 1)[0]!r}")
