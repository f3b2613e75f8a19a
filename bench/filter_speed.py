"""Speed of the content filter against Presidio's pattern recognizers, on the same texts.

    .venv/bin/python bench/filter_speed.py [CORPORA_DIR] [--mb 8] [--min-ratio 100]

What is measured, the same way for both sides: total wall time over all texts / total KB (UTF-8).

- ours: the real CLI, `gateway filter --jsonl`, in a subprocess, with a policy enabling every pack
  (pii, secrets, prompt_injection, unicode, and custom keyword + regex rules), fed the corpora
  texts repeated to about `--mb` MB. Its start-up time (measured on a one-line input) is
  reported and subtracted for the steady-state figure; the figure with start-up is printed too.
- ours in-process: compile + `scan_many` and a plain per-text `scan` loop, for reference.
- Presidio: EmailRecognizer, CreditCardRecognizer, PhoneRecognizer, IbanRecognizer,
  UsSsnRecognizer, IpRecognizer, each called as `Recognizer.analyze(text, entities, None)` on every
  text (no NLP engine), over the corpora texts (repeated `--presidio-repeat` times).

Exits 1 if the steady-state ratio is below --min-ratio.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPORA = (REPO.parent / "shared" / "corpora").resolve()
sys.path.insert(0, str(REPO))

ALL_PACKS_POLICY = """
[inbound]
packs = ["pii", "secrets", "prompt_injection", "unicode", "custom"]
[inbound.actions]
prompt_injection = "block"
pii = "redact"
secrets = "redact"
unicode = "strip"
[[inbound.custom]]
id = "custom.competitors"
keywords = ["acme corp", "globex", "initech", "umbrella corporation", "hooli", "vandelay industries"]
action = "flag"
[[inbound.custom]]
id = "custom.ticket"
regex = "TICKET-[0-9]{6}"
action = "redact"
placeholder = "[TICKET]"
[outbound]
packs = ["pii", "secrets"]
"""


def load_texts(corpora: Path) -> list[str]:
    texts: list[str] = []
    for name in ("pii_spans.jsonl", "prompt_injection.jsonl", "secrets.jsonl"):
        with (corpora / name).open("rb") as fh:
            texts += [orjson.loads(line)["text"] for line in fh if line.strip()]
    return texts


def kb_of(texts: list[str]) -> float:
    return sum(len(t.encode("utf-8")) for t in texts) / 1024


def gateway_binary() -> list[str]:
    exe = Path(sys.executable).with_name("gateway")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("gateway")
    if found:
        return [found]
    return [sys.executable, "-m", "gateway.cli"]


def run_cli(cmd: list[str], payload: bytes, workdir: Path) -> tuple[float, bytes]:
    src = workdir / "input.jsonl"
    src.write_bytes(payload)
    with src.open("rb") as stdin:
        start = time.perf_counter()
        proc = subprocess.run(cmd, stdin=stdin, capture_output=True, check=False, cwd=REPO)
        elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode(errors="replace"))
        raise SystemExit(f"gateway filter exited with {proc.returncode}")
    return elapsed, proc.stdout


def bench_ours(texts: list[str], target_mb: float, workdir: Path) -> dict[str, float]:
    policy_dir = workdir / "policies"
    policy_dir.mkdir()
    (policy_dir / "allpacks.toml").write_text(ALL_PACKS_POLICY)
    cmd = [
        *gateway_binary(),
        "filter",
        "--direction",
        "inbound",
        "--policy",
        "allpacks",
        "--policy-dir",
        str(policy_dir),
        "--jsonl",
    ]
    lines = [orjson.dumps({"text": t}) for t in texts]
    one_copy = b"\n".join(lines) + b"\n"
    copies = max(1, round(target_mb * 1024 * 1024 / len(one_copy)))
    payload = one_copy * copies
    all_texts = texts * copies
    kb = kb_of(all_texts)
    startup = min(run_cli(cmd, lines[0] + b"\n", workdir)[0] for _ in range(3))
    elapsed, out = run_cli(cmd, payload, workdir)
    got = out.count(b"\n")
    if got != len(all_texts):
        raise SystemExit(f"expected {len(all_texts)} verdict lines, got {got}")
    return {
        "texts": len(all_texts),
        "kb": kb,
        "startup_s": startup,
        "wall_s": elapsed,
        "us_per_kb": max(elapsed - startup, 1e-9) * 1e6 / kb,
        "us_per_kb_with_startup": elapsed * 1e6 / kb,
    }


def bench_in_process(texts: list[str]) -> dict[str, float]:
    import tomllib

    from rules import compile_policy

    start = time.perf_counter()
    policy = compile_policy(tomllib.loads(ALL_PACKS_POLICY), "allpacks")
    compile_s = time.perf_counter() - start
    policy.scan_many(texts[:50], "inbound")  # warm the RE2 DFA caches, as a long-running worker has
    kb = kb_of(texts)
    start = time.perf_counter()
    policy.scan_many(texts, "inbound")
    batch_s = time.perf_counter() - start
    start = time.perf_counter()
    for t in texts:
        policy.scan(t, "inbound")
    single_s = time.perf_counter() - start
    return {
        "compile_ms": compile_s * 1e3,
        "batch_us_per_kb": batch_s * 1e6 / kb,
        "single_us_per_kb": single_s * 1e6 / kb,
    }


def bench_presidio(texts: list[str]) -> dict[str, float]:
    logging.disable(logging.WARNING)  # tldextract warns that it cannot fetch the suffix list offline
    os.environ.setdefault("TLDEXTRACT_CACHE", tempfile.mkdtemp())
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        EmailRecognizer,
        IbanRecognizer,
        IpRecognizer,
        PhoneRecognizer,
        UsSsnRecognizer,
    )

    recognizers = [
        (EmailRecognizer(), ["EMAIL_ADDRESS"]),
        (CreditCardRecognizer(), ["CREDIT_CARD"]),
        (PhoneRecognizer(), ["PHONE_NUMBER"]),
        (IbanRecognizer(), ["IBAN_CODE"]),
        (UsSsnRecognizer(), ["US_SSN"]),
        (IpRecognizer(), ["IP_ADDRESS"]),
    ]
    for recognizer, entities in recognizers:  # first calls load lazily; keep them out of the timing
        recognizer.analyze(texts[0], entities, None)  # type: ignore[arg-type]
    kb = kb_of(texts)
    start = time.perf_counter()
    for text in texts:
        for recognizer, entities in recognizers:
            recognizer.analyze(text, entities, None)  # type: ignore[arg-type]  # no NLP engine needed
    elapsed = time.perf_counter() - start
    return {"texts": len(texts), "kb": kb, "wall_s": elapsed, "us_per_kb": elapsed * 1e6 / kb}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("corpora", nargs="?", type=Path, default=DEFAULT_CORPORA)
    parser.add_argument("--mb", type=float, default=8.0, help="input size for the CLI run (default 8)")
    parser.add_argument(
        "--presidio-repeat", type=int, default=1, help="corpora copies for Presidio (default 1)"
    )
    parser.add_argument("--min-ratio", type=float, default=100.0)
    args = parser.parse_args(argv)
    texts = load_texts(args.corpora)
    print(f"corpora: {args.corpora} ({len(texts)} texts, {kb_of(texts):.0f} KB)")
    with tempfile.TemporaryDirectory() as tmp:
        ours = bench_ours(texts, args.mb, Path(tmp))
    inproc = bench_in_process(texts * 4)
    presidio = bench_presidio(texts * args.presidio_repeat)
    print()
    print("gateway filter --jsonl (subprocess, all packs):")
    print(f"  {ours['texts']:.0f} texts, {ours['kb'] / 1024:.1f} MB, wall {ours['wall_s']:.2f} s, "
          f"start-up {ours['startup_s'] * 1e3:.0f} ms")  # fmt: skip
    steady, with_startup = ours["us_per_kb"], ours["us_per_kb_with_startup"]
    print(f"  {steady:.1f} us/KB steady state; {with_startup:.1f} us/KB with start-up")
    print("rules in-process (same policy):")
    print(f"  compile {inproc['compile_ms']:.0f} ms; scan_many {inproc['batch_us_per_kb']:.1f} us/KB; "
          f"scan per text {inproc['single_us_per_kb']:.1f} us/KB")  # fmt: skip
    print("Presidio pattern recognizers (6, in-process, analyze() per text):")
    print(f"  {presidio['texts']:.0f} texts, {presidio['kb']:.0f} KB, wall {presidio['wall_s']:.2f} s")
    print(f"  {presidio['us_per_kb']:.1f} us/KB")
    ratio = presidio["us_per_kb"] / ours["us_per_kb"]
    ratio_startup = presidio["us_per_kb"] / ours["us_per_kb_with_startup"]
    ratio_inproc = presidio["us_per_kb"] / inproc["single_us_per_kb"]
    print()
    print(f"ratio (Presidio / ours): {ratio:.0f}x steady state, {ratio_startup:.0f}x including CLI start-up, "
          f"{ratio_inproc:.0f}x in-process per-text scan")  # fmt: skip
    ok = ratio >= args.min_ratio
    print(f"target >= {args.min_ratio:.0f}x: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
