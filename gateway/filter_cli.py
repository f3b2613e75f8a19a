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
import gc
import json
import multiprocessing
import os
import select
import sys
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from rules import CompiledPolicy, PolicyError, Verdict, load_policy_file
from rules.engine import Decision, RuleSet

_READ_SIZE = 1 << 20  # bytes per read: one batch is whatever complete lines this brings
_IDLE_POLL_SECONDS = 0.002  # input idle, work out in the workers: how often to look at both
_WARM_SIZE = 1 << 18  # bulk input: bytes scanned before the worker processes are forked
#: Bulk input: the collector's first threshold. A batch allocates tens of thousands of short-lived
#: objects (texts, findings) that reference counting frees; the default (700) collected many
#: times per batch for nothing.
_BULK_GC_THRESHOLD = 50_000


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
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="--jsonl: processes for bulk input (default: one per CPU, up to 8; 1 disables)",
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
    if all(m.type is not None for m in verdict.matches):
        # orjson writes the frozen dataclasses itself, field by field: the same JSON as
        # to_dict() (which leaves out a missing type), without building the dicts
        try:
            return orjson.dumps(verdict, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:  # lone surrogates in the message: the careful path below
            pass
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


@dataclass(frozen=True, slots=True)
class _Batch:
    """The verdict lines for one batch of input lines, and what the exit status needs."""

    output: bytes
    bad_lines: int
    blocked: int


def _scan_batch(rules: RuleSet, chunk: bytes, first: int) -> _Batch:
    """Verdict lines for the lines of `chunk` (numbered from `first`), in order."""
    texts: list[str] | None = None
    try:  # the common case, every line a valid {"text": ...}: one parse for the whole batch
        # (a JSON value holds no raw newline, so each line is one element of the array)
        parsed = orjson.loads(b"[" + chunk.replace(b"\n", b",") + b"]")
        if len(parsed) == chunk.count(b"\n") + 1:
            texts = [obj["text"] for obj in parsed]
            if set(map(type, texts)) != {str}:
                texts = None
    except (orjson.JSONDecodeError, TypeError, KeyError):
        texts = None
    if texts is None:
        return _scan_careful(rules, chunk.split(b"\n"), first)
    decisions = rules.decide_sparse(texts)
    blocked = sum(1 for d in decisions.values() if d[0] == "blocked")
    return _Batch(_encoder(rules).lines(texts, decisions), 0, blocked)


_ALLOWED_OPEN = b'{"verdict":"allowed","message":"'
_ALLOWED_CLOSE = b'","matches":[]}\n'


class _LineEncoder:
    """A batch's verdict lines, byte for byte what `_encode` writes for each text's `Verdict`,
    without making the verdicts: the texts are serialised by one orjson call and each match
    from pieces prepared once per rule."""

    def __init__(self, rules: RuleSet) -> None:
        self._rules = rules
        self._open: dict[str, bytes] = {}  # '{"rule":...,"category":...,"action":...,"start":'
        self._close: dict[str, bytes] = {}  # ',"type":...}'
        for rule_id, info in rules.rules.items():
            self._open[rule_id] = b"".join(
                (b'{"rule":', orjson.dumps(rule_id), b',"category":', orjson.dumps(info.category),
                 b',"action":', orjson.dumps(rules.action(rule_id)), b',"start":')
            )  # fmt: skip
            self._close[rule_id] = b"}" if info.type is None else b',"type":' + orjson.dumps(info.type) + b"}"
        self._heads = {
            v: b'{"verdict":' + orjson.dumps(v) + b',"message":' for v in ("allowed", "redacted", "blocked")
        }
        self._scores: dict[float, bytes] = {}

    def lines(self, texts: Sequence[str], decisions: Mapping[int, Decision]) -> bytes:
        if not texts:
            return b""
        try:
            data = orjson.dumps(texts)
        except TypeError:  # lone surrogates: text by text, the careful way
            wrap = self._rules.verdict_of
            return b"".join(
                _encode(wrap(decisions[i])) if i in decisions else _ALLOWED_HEAD + _dumps(t) + _ALLOWED_TAIL
                for i, t in enumerate(texts)
            )
        # ["a","b",...]: a quote inside a JSON string is always escaped, so '","' can only be
        # the boundary between two strings
        quoted = data[2:-2].split(b'","')
        between = _ALLOWED_CLOSE + _ALLOWED_OPEN
        out: list[bytes] = []
        done = 0
        for i in sorted(decisions):
            if i > done:
                out.append(_ALLOWED_OPEN + between.join(quoted[done:i]) + _ALLOWED_CLOSE)
            out.append(self._line(decisions[i]))
            done = i + 1
        if done < len(quoted):
            out.append(_ALLOWED_OPEN + between.join(quoted[done:]) + _ALLOWED_CLOSE)
        return b"".join(out)

    def _line(self, decision: Decision) -> bytes:
        verdict, message, kept = decision
        opens, closes, scores = self._open, self._close, self._scores
        matches = []
        for s, e, rule, score in kept:
            sj = scores.get(score)
            if sj is None:
                sj = orjson.dumps(score)
                if len(scores) < 1024:
                    scores[score] = sj
            matches.append(b'%b%d,"end":%d,"score":%b%b' % (opens[rule], s, e, sj, closes[rule]))
        message_json = b"null" if message is None else orjson.dumps(message)
        return b'%b%b,"matches":[%b]}\n' % (self._heads[verdict], message_json, b",".join(matches))


_ENCODERS: dict[RuleSet, _LineEncoder] = {}


def _encoder(rules: RuleSet) -> _LineEncoder:
    found = _ENCODERS.get(rules)
    if found is None:
        found = _ENCODERS[rules] = _LineEncoder(rules)
    return found


def _scan_careful(rules: RuleSet, lines: Sequence[bytes], first: int) -> _Batch:
    """Line by line: skip blank lines, answer invalid ones with an error, keep the order."""
    texts: list[str] = []
    slots: list[bytes | None] = []  # None: take the next verdict; bytes: an error line
    bad = 0
    for number, line in enumerate(lines, first):
        if not line.strip():
            continue
        result = _parse_line(line)
        if isinstance(result, str):
            texts.append(result)
            slots.append(None)
        else:
            slots.append(_line_error(number, str(result)))
            bad += 1
    verdicts = iter(rules.scan_many(texts))
    chunks: list[bytes] = []
    blocked = 0
    for slot in slots:
        if slot is None:
            verdict = next(verdicts)
            blocked += verdict.verdict == "blocked"
            chunks.append(_encode(verdict))
        else:
            chunks.append(slot)
    return _Batch(b"".join(chunks), bad, blocked)


def _batches(source: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """(number of the first line, complete lines joined by newlines) as input arrives.

    A batch is whatever is available now, up to about _READ_SIZE: a pipe fed one line at a time
    gets an answer per line, bulk input is scanned a megabyte at a time.
    """
    read = getattr(source, "read1", source.read)
    fd = _fileno(source)
    pending = b""
    line_no = 1
    while True:
        chunk = read(_READ_SIZE)
        if not chunk:
            break
        parts = [pending, chunk] if pending else [chunk]
        size = len(pending) + len(chunk)
        while size < _READ_SIZE and fd is not None and _readable(fd):
            more = read(_READ_SIZE - size)
            if not more:
                break
            parts.append(more)
            size += len(more)
        data = b"".join(parts)
        cut = data.rfind(b"\n")
        if cut < 0:
            pending = data
            continue
        pending = data[cut + 1 :]
        chunk = data[:cut]
        yield line_no, chunk
        line_no += chunk.count(b"\n") + 1
    if pending:
        yield line_no, pending


def _fileno(source: IO[bytes]) -> int | None:
    """The descriptor to ask whether input is waiting; None for in-memory input (never waits)."""
    try:
        return source.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _readable(fd: int) -> bool:
    """Whether more input is there right now (so reading it will not wait for the writer)."""
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


# A worker process's rule set: set in the parent before the fork, inherited by the children.
_WORKER_RULES: RuleSet | None = None


def _work(first: int, chunk: bytes) -> _Batch:
    """In a worker process: the lines travel as one bytes object (cheap to pass)."""
    assert _WORKER_RULES is not None
    return _scan_batch(_WORKER_RULES, chunk, first)


def _run_jsonl(policy: CompiledPolicy, args: argparse.Namespace) -> int:
    global _WORKER_RULES
    rules = policy.rule_set(args.direction)
    out = sys.stdout.buffer
    bad = blocked = 0
    source = sys.stdin.buffer
    batches = _batches(source)
    fd = _fileno(source)
    workers = _worker_count(args.workers)
    pool: Any = None
    pending: deque[Any] = deque()
    try:
        for first, chunk in batches:
            if len(chunk) >= _READ_SIZE // 2 and gc.get_threshold()[0] < _BULK_GC_THRESHOLD:
                _tune_gc_for_bulk()
            if pool is None and workers > 1 and len(chunk) >= _READ_SIZE // 2:
                # Bulk input (a full read): spread batches over processes. Small or interactive
                # input never gets here and keeps the single-process latency.
                cut = chunk.find(b"\n", _WARM_SIZE)
                if cut > 0:
                    # Scan the first lines here first: RE2 builds its automata's states as text
                    # needs them, mostly on the first few hundred KB, and the workers forked
                    # next start with them instead of each building them again.
                    result = _scan_batch(rules, chunk[:cut], first)
                    out.write(result.output)
                    out.flush()
                    bad += result.bad_lines
                    blocked += result.blocked
                    first += chunk.count(b"\n", 0, cut) + 1
                    chunk = chunk[cut + 1 :]
                _WORKER_RULES = rules
                pool = multiprocessing.get_context("fork").Pool(workers)
            if pool is None:
                result = _scan_batch(rules, chunk, first)
                out.write(result.output)
                out.flush()
                bad += result.bad_lines
                blocked += result.blocked
                continue
            pending.append(pool.apply_async(_work, (first, chunk)))
            # Write what is done; wait for the rest only while no more input is there: a writer
            # that sends a line and waits for its answer must get it without sending more.
            while pending:
                head = pending[0]
                if len(pending) < 2 * workers and not head.ready():
                    if fd is None or _readable(fd):
                        break
                    head.wait(_IDLE_POLL_SECONDS)
                    continue
                result = pending.popleft().get()
                out.write(result.output)
                out.flush()
                bad += result.bad_lines
                blocked += result.blocked
        while pending:
            result = pending.popleft().get()
            out.write(result.output)
            out.flush()
            bad += result.bad_lines
            blocked += result.blocked
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    if bad:
        return 1
    return 1 if args.fail_on_block and blocked else 0


def _tune_gc_for_bulk() -> None:
    """Bulk input: what start-up built (modules, the compiled policy, phone metadata) is never
    garbage, so `gc.freeze()` keeps collections from walking it again (in forked workers each
    such walk also copied the pages it touched), and the first threshold goes up."""
    gc.freeze()
    _, second, third = gc.get_threshold()
    gc.set_threshold(_BULK_GC_THRESHOLD, second, third)


def _worker_count(requested: int) -> int:
    if requested > 0:
        return requested
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(os.cpu_count() or 1, 8))


def _list_rules(policy: CompiledPolicy, only: str | None) -> int:
    """Every rule of the policy with its action, for both directions or, with --direction, one."""
    listing: dict[str, Any] = {"policy": policy.name, "description": policy.description}
    for direction in (only,) if only else ("inbound", "outbound"):
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
        return _list_rules(policy, args.direction)
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
