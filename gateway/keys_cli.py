"""`gateway keys create --tenant NAME`: prints a new API key once, alone on standard output.
`gateway keys revoke [KEY | -]`: revokes a key (read from standard input when '-' or not given, so
it need not appear in the process list or the shell's history)."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gateway.crypto import hash_api_key, new_api_key
from gateway.settings import Settings
from gateway.store import open_store
from gateway.store.base import Store

T = TypeVar("T")

_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = sub.add_parser("create", help="create an API key for a tenant and print it once")
    create.add_argument("--tenant", required=True, help="tenant the key belongs to (letters, digits, _ . -)")
    revoke = sub.add_parser(
        "revoke",
        help="revoke an API key: every instance refuses it within GATEWAY_API_KEY_CACHE_SECONDS (10 s)",
    )
    revoke.add_argument("key", nargs="?", default="-", help="the key; '-' or nothing reads it from stdin")


async def _on_store(settings: Settings, work: Callable[[Store], Awaitable[T]]) -> T:
    """Open the configured store, do `work` with it, close it."""
    store = open_store(settings)
    await store.open()
    try:
        return await work(store)
    finally:
        await store.close()


async def create_key(settings: Settings, tenant: str) -> str:
    key = new_api_key()
    await _on_store(settings, lambda store: store.add_api_key(tenant, hash_api_key(key), time.time()))
    return key


async def revoke_key(settings: Settings, key: str) -> bool:
    """True when a live key was revoked; False when the store has no live key like it."""
    return await _on_store(settings, lambda store: store.revoke_api_key(hash_api_key(key), time.time()))


def run(args: argparse.Namespace) -> int:
    if args.keys_command == "revoke":
        return _revoke(args.key)
    if not _TENANT.match(args.tenant):
        print("gateway keys: --tenant must be 1-64 letters, digits, '_', '.' or '-'", file=sys.stderr)
        return 2
    key = asyncio.run(create_key(Settings(), args.tenant))
    print(key)
    return 0


def _revoke(given: str) -> int:
    key = sys.stdin.readline().strip() if given == "-" else given.strip()
    if not key:
        print("gateway keys revoke: no key given (pass it, or write it to standard input)", file=sys.stderr)
        return 2
    if not asyncio.run(revoke_key(Settings(), key)):
        print("gateway keys revoke: no live key matches (unknown, or revoked already)", file=sys.stderr)
        return 1
    print("gateway keys revoke: revoked", file=sys.stderr)
    return 0
