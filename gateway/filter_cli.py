"""`gateway filter`: the rule engine on the command line.

    gateway filter --direction inbound "my card is 4111 1111 1111 1111"
    echo "some text" | gateway filter --direction outbound -
    gateway filter --direction inbound --jsonl < texts.jsonl > verdicts.jsonl

With `--jsonl`, standard input holds one JSON object `{"text": ...}` per line and standard output
gets one verdict per line, in the same order. Input is processed in batches as it arrives (each
batch scanned in one pass and flushed), so the command works both as a bulk scanner and behind a
pipe that feeds it a line at a time. Blank lines are skipped; a line that is not a JSON object with
a string "text" gets `{"error": {...}}` in its place and the exit status becomes 1.

Exit status: 0 done, 1 some input line was invalid (or, with --fail-on-block, a text was blocked),
2 the policy is unknown or invalid.

This module imports only the `rules` package (no pydantic, no server), so it starts quickly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from rules import CompiledPolicy, PolicyError, Verdict, load_policy_file

_READ_SIZE = 1 << 20  # bytes per read: one batch is whatever complete lines this brings


def _default_policy_dir() -> Path:
    """`config/policies` under the working directory if present, else the repository's own."""
    local = Path("config/policies")
    if local.is_dir():
        return local
    return Path(__file__).resolve().parent.parent / "config" / "policies"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--direction",
        choices=("inbound", "outbound"),
        help="which rule set of the policy to apply (required unless --list-rules)",
    )
    parser.add_argument(
        "--policy",
        default="default",
        help="policy name (a NAME.toml in the policy directory) or a path to a .toml file (default: default)",
    )
    parser.add_argument(
        "--policy-dir",
        type=Path,
        default=None,
        help="directory of policy files (default: ./config/policies, else the repository's)",
    )
    parser.add_argument(
        "--jsonl",
        action="store_true",
        help='read JSON lines {"text": ...} from standard input, write one verdict per line',
    )
    parser.add_argument("--pretty", action="store_true", help="indent the JSON (single-text mode)")
    parser.add_argument(
        "--fail-on-block", action="store_true", help="exit with status 1 when a text is blocked"
    )
    parser.add_argument(
        "--list-rules", action="store_true", help="print the policy's rules and their actions, then exit"
    )
    parser.add_argument(
        "text", nargs="?", default=None, help="the text to filter; '-' or nothing reads stdin"
    )


def _error(message: str) -> int:
    print(f"gateway filter: {message}", file=sys.stderr)
    return 2


def _load(args: argparse.Namespace) -> CompiledPolicy | int:
    name: str = args.policy
    as_path = Path(name)
    if name.endswith(".toml") or os.sep in name:
        if not as_path.is_file():
            return _error(f"policy file {name!r} does not exist")
        path = as_path
    else:
        directory: Path = args.policy_dir or _default_policy_dir()
        path = directory / f"{name}.toml"
        if as_path.name != name or not path.is_file():
            available = sorted(p.stem for p in directory.glob("*.toml")) if directory.is_dir() else []
            listing = ", ".join(available) if available else "none"
            return _error(f"unknown policy {name!r} in {directory} (available: {listing})")
    try:
        return load_policy_file(path)
    except PolicyError as exc:
        return _error(str(exc))


def _dumps(data: Any, *, pretty: bool = False) -> bytes:
    try:
        return orjson.dumps(data, option=orjson.OPT_INDENT_2 if pretty else 0)
    except TypeError:  # lone surrogates (from a non-UTF-8 argv): fall back to escaped JSON
        return json.dumps(data, indent=2 if pretty else None, ensure_ascii=True).encode()


_ALLOWED_HEAD = b'{"verdict":"allowed","message":'
_ALLOWED_TAIL = b',"matches":[]}\n'


def _encode(verdict: Verdict) -> bytes:
    if not verdict.matches and verdict.message is not None:
        return _ALLOWED_HEAD + _dumps(verdict.message) + _ALLOWED_TAIL
    return _dumps(verdict.to_dict()) + b"\n"


def _line_error(number: int, problem: str) -> bytes:
    error = {"error": {"code": "invalid_argument", "message": f"line {number}: {problem}"}}
    return orjson.dumps(error) + b"\n"


def _parse_line(line: bytes) -> str | Exception | None:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return ValueError(f"not valid JSON ({exc})")
    if not isinstance(obj, dict):
        return ValueError('expected a JSON object {"text": ...}')
    text = obj.get("text")
    if not isinstance(text, str):
        return ValueError('"text" must be a string')
    return text


class _Stream:
    """Turns batches of input lines into verdict lines, keeping order and line numbers."""

    def __init__(self, policy: CompiledPolicy, direction: str, out: IO[bytes]) -> None:
        self.rules = policy.rule_set(direction)
        self.out = out
        self.line_no = 0
        self.bad_lines = 0
        self.blocked = 0

    def batch(self, lines: Sequence[bytes]) -> None:
        first = self.line_no + 1
        self.line_no += len(lines)
        texts: list[str] | None = None
        try:  # the common case, every line a valid {"text": ...}: one parse for the whole batch
            parsed = orjson.loads(b"[" + b",".join(lines) + b"]")
            if len(parsed) == len(lines):
                texts = [obj["text"] for obj in parsed]
                if any(type(t) is not str for t in texts):
                    texts = None
        except (orjson.JSONDecodeError, TypeError, KeyError):
            texts = None
        if texts is not None:
            found = self.rules.scan_sparse(texts)
            if found:
                get = found.get
                chunks = [
                    _encode(v) if (v := get(i)) is not None else _ALLOWED_HEAD + _dumps(t) + _ALLOWED_TAIL
                    for i, t in enumerate(texts)
                ]
                self.blocked += sum(1 for v in found.values() if v.verdict == "blocked")
            else:
                chunks = [_ALLOWED_HEAD + _dumps(t) + _ALLOWED_TAIL for t in texts]
        else:
            chunks = self._careful(lines, first)
        self.out.write(b"".join(chunks))
        self.out.flush()

    def _careful(self, lines: Sequence[bytes], first: int) -> list[bytes]:
        """Line by line: skip blank lines, answer invalid ones with an error, keep the order."""
        texts: list[str] = []
        slots: list[bytes | None] = []  # None: take the next verdict; bytes: an error line
        for number, line in enumerate(lines, first):
            if not line.strip():
                continue
            result = _parse_line(line)
            if isinstance(result, str):
                texts.append(result)
                slots.append(None)
            else:
                slots.append(_line_error(number, str(result)))
                self.bad_lines += 1
        verdicts = iter(self.rules.scan_many(texts))
        chunks: list[bytes] = []
        for slot in slots:
            if slot is None:
                verdict = next(verdicts)
                if verdict.verdict == "blocked":
                    self.blocked += 1
                chunks.append(_encode(verdict))
            else:
                chunks.append(slot)
        return chunks


def _run_jsonl(policy: CompiledPolicy, args: argparse.Namespace) -> int:
    source = sys.stdin.buffer
    # read1 returns whatever is available: a batch as soon as a line arrives, at most _READ_SIZE
    read = getattr(source, "read1", source.read)
    stream = _Stream(policy, args.direction, sys.stdout.buffer)
    pending = b""
    while True:
        chunk = read(_READ_SIZE)
        if not chunk:
            break
        data = pending + chunk if pending else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            pending = data
            continue
        pending = data[cut + 1 :]
        stream.batch(data[:cut].split(b"\n"))
    if pending:
        stream.batch([pending])
    if stream.bad_lines:
        return 1
    return 1 if args.fail_on_block and stream.blocked else 0


def _list_rules(policy: CompiledPolicy) -> int:
    listing: dict[str, Any] = {"policy": policy.name, "description": policy.description}
    for direction in ("inbound", "outbound"):
        rules = policy.rule_set(direction)
        listing[direction] = {
            "threshold": rules.threshold,
            "rules": [
                {"rule": r.id, "category": r.category, "type": r.type, "action": rules.action(r.id),
                 "description": r.description}
                for r in rules.rules.values()
            ],
        }  # fmt: skip
    sys.stdout.buffer.write(_dumps(listing, pretty=True) + b"\n")
    return 0


def run(args: argparse.Namespace) -> int:
    loaded = _load(args)
    if isinstance(loaded, int):
        return loaded
    policy = loaded
    if args.list_rules:
        return _list_rules(policy)
    if args.direction is None:
        return _error("--direction inbound|outbound is required")
    if args.jsonl:
        if args.text not in (None, "-"):
            return _error("--jsonl reads standard input; do not pass TEXT")
        return _run_jsonl(policy, args)
    text: str = sys.stdin.read() if args.text in (None, "-") else args.text
    verdict = policy.scan(text, args.direction)
    sys.stdout.buffer.write(_dumps(verdict.to_dict(), pretty=args.pretty) + b"\n")
    sys.stdout.buffer.flush()
    return 1 if args.fail_on_block and verdict.verdict == "blocked" else 0
