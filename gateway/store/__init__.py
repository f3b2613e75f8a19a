"""Stores behind one protocol; `open_store` picks one from the database URL."""

from __future__ import annotations

from gateway.settings import Settings
from gateway.store.base import Store


def open_store(settings: Settings) -> Store:
    url = settings.database_url
    if url.startswith("sqlite:"):
        from gateway.store.sqlite import SqliteStore

        return SqliteStore(url, synchronous=settings.sqlite_synchronous)
    if url.startswith(("postgresql:", "postgres:")):
        from gateway.store.postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]

        store: Store = PostgresStore(url)
        return store
    raise ValueError(f"unsupported GATEWAY_DATABASE_URL scheme: {url.split(':', 1)[0]!r}")
