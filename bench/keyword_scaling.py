"""Cost of a custom keyword rule as its list grows from 10 to 100,000 terms.

    .venv/bin/python bench/keyword_scaling.py [CORPORA_DIR] [--max-ratio 3]

Keyword rules compile into an Aho-Corasick automaton (pyahocorasick), whose scan time depends on
the text, not on the number of terms. This measures it: a policy with only the `custom` pack and
one keyword rule of N terms (synthetic, lower-case letters; a few real words are included so
that the rule also fires), scanning the corpora texts, for N = 10, 1,000, 10,000 and 100,000.
Prints us/KB for each (best of several runs, after a warm-up run) and the ratio 100k / 10.
Exits 1 if that ratio exceeds --max-ratio.
"""

from __future__ import annotations

import argparse
import random
import string
import sys
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPORA = (REPO.parent / "shared" / "corpora").resolve()
sys.path.insert(0, str(REPO))

from rules import compile_policy  # noqa: E402

SIZES = (10, 1_000, 10_000, 100_000)
REAL_WORDS = ["password", "account", "instructions", "summary", "email"]


def load_texts(corpora: Path) -> list[str]:
    texts: list[str] = []
    for name in ("pii_spans.jsonl", "prompt_injection.jsonl", "secrets.jsonl"):
        with (corpora / name).open("rb") as fh:
            texts += [orjson.loads(line)["text"] for line in fh if line.strip()]
    return texts


def keywords(n: int, rng: random.Random) -> list[str]:
    words = set(REAL_WORDS)
    while len(words) < n:
        words.add("".join(rng.choices(string.ascii_lowercase, k=rng.randint(5, 12))))
    return sorted(words)[:n] if n < len(REAL_WORDS) else sorted(words)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("corpora", nargs="?", type=Path, default=DEFAULT_CORPORA)
    parser.add_argument("--repeat", type=int, default=4, help="corpora copies per scan (default 4)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-ratio", type=float, default=4.0)
    args = parser.parse_args(argv)
    texts = load_texts(args.corpora) * args.repeat
    kb = sum(len(t.encode("utf-8")) for t in texts) / 1024
    rng = random.Random(1234)
    print(f"{len(texts)} texts, {kb:.0f} KB per scan; custom pack only, one keyword rule")
    results: dict[int, float] = {}
    for n in SIZES:
        terms = keywords(n, rng)
        start = time.perf_counter()
        policy = compile_policy(
            {"inbound": {"custom": [{"id": "custom.terms", "keywords": terms, "action": "flag"}]}}, "scaling"
        )
        compile_s = time.perf_counter() - start
        rules = policy.rule_set("inbound")
        rules.scan_many(texts)  # warm-up
        best = float("inf")
        matches = 0
        for _ in range(args.runs):
            start = time.perf_counter()
            verdicts = rules.scan_many(texts)
            best = min(best, time.perf_counter() - start)
            matches = sum(len(v.matches) for v in verdicts)
        results[n] = best * 1e6 / kb
        print(
            f"  {n:>7,d} terms: {results[n]:6.2f} us/KB  "
            f"(compile {compile_s * 1e3:6.0f} ms, {matches} matches)"
        )
    ratio = results[SIZES[-1]] / results[SIZES[0]]
    ok = ratio <= args.max_ratio
    print(f"ratio 100k / 10 terms: {ratio:.2f} (target <= {args.max_ratio}: {'met' if ok else 'MISSED'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
