"""SQL lives in .sql files beside the store that runs it: named blocks (`-- name: foo`) and
numbered migrations (`migrations/<dialect>/NNNN_what.sql`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def load_queries(package: str, filename: str) -> dict[str, str]:
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"{filename}: query {name!r} defined twice")
        queries[name] = body.strip().rstrip(";")
    return queries


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(package: str, dialect: str) -> list[Migration]:
    folder = resources.files(package).joinpath("migrations").joinpath(dialect)
    found: list[Migration] = []
    for entry in folder.iterdir():
        m = re.fullmatch(r"(\d{4})_([a-z0-9_]+)\.sql", entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"{dialect} migrations must be numbered 0001.. without gaps, got {versions}")
    return found
