"""`gateway keys create --tenant NAME`: prints a new API key once, alone on standard output."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time

from gateway.crypto import hash_api_key, new_api_key
from gateway.settings import Settings
from gateway.store import open_store

_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = sub.add_parser("create", help="create an API key for a tenant and print it once")
    create.add_argument("--tenant", required=True, help="tenant the key belongs to (letters, digits, _ . -)")


async def create_key(settings: Settings, tenant: str) -> str:
    store = open_store(settings)
    await store.open()
    try:
        key = new_api_key()
        await store.add_api_key(tenant, hash_api_key(key), time.time())
        return key
    finally:
        await store.close()


def run(args: argparse.Namespace) -> int:
    if not _TENANT.match(args.tenant):
        print("gateway keys: --tenant must be 1-64 letters, digits, '_', '.' or '-'", file=sys.stderr)
        return 2
    key = asyncio.run(create_key(Settings(), args.tenant))
    print(key)
    return 0
