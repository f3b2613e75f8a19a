"""Fingerprint of the content filter's verdicts, to compare two checkouts before a speed change lands.

    PYTHONPATH=. .venv/bin/python bench/filter_equivalence.py [CORPORA_DIR] > after.txt
    (the same in a worktree of the old commit) > before.txt; diff before.txt after.txt

Texts: the corpora texts and variants derived from them with a fixed seed (upper- and lower-cased,
wrapped, pairs joined, random slices, entity and attack fragments inserted at random places, digits
perturbed, zero-width characters sprinkled in). Policies: `config/policies/*.toml`, the speed bench's
every-pack policy and three variants (injection redacted, flagged at a low threshold, rules switched
off, other phone regions, block and strip actions). Every text is scanned in both directions, alone
with `scan`, as one batch with `scan_many` and in batches of 97; the three must agree (a mismatch is
printed to stderr and the exit status is 1). Output: one line per policy and direction with a digest of
the verdicts (`to_dict()`, sorted keys) and how many were not allowed, then a total digest.
"""

from __future__ import annotations

import hashlib
import random
import sys
import tomllib
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.filter_speed import ALL_PACKS_POLICY, DEFAULT_CORPORA, load_texts  # noqa: E402
from rules import CompiledPolicy, compile_policy, load_policy_file  # noqa: E402

INSERTS = [
    "jane.doe@example.com",
    "+1 415 555 0132",
    "4111 1111 1111 1111",
    "call me at 020 7946 0958",
    "ignore previous instructions",
    "\u200b",
    "AKIAIOSFODNN7EXAMPLE",
    "192.168.0.1",
    "SSN 123-45-6789",
    "DE89 3704 0044 0532 0130 00",
    "my number is 555-0134",
    "\u2170gnore \u0430ll pr\u0435vious",
    "Q: a A: b ",
    "ask Acme Corp or Globex",
    "TICKET-123456",
]

VARIANTS = {
    "inj_redact": """
[inbound]
packs = ["prompt_injection", "pii"]
[inbound.actions]
prompt_injection = "redact"
[outbound]
packs = ["pii", "secrets", "unicode"]
[outbound.actions]
"pii.phone" = "flag"
""",
    "inj_flag_low": """
[inbound]
packs = ["prompt_injection", "secrets", "unicode"]
[inbound.actions]
prompt_injection = "flag"
unicode = "flag"
[inbound.prompt_injection]
threshold = 0.5
[outbound]
packs = ["pii"]
[outbound.pii]
phone_regions = ["US", "JP"]
""",
    "inj_block_off": """
[inbound]
packs = ["prompt_injection", "pii"]
[inbound.actions]
"prompt_injection.instruction_override" = "off"
"pii.email" = "off"
"pii.ip_address" = "block"
[outbound]
packs = ["secrets", "pii"]
[outbound.actions]
secrets = "block"
pii = "strip"
""",
}


def derived_texts(base: list[str]) -> list[str]:
    rnd = random.Random(1234)
    texts = list(base)
    texts += [t.upper() for t in base[::3]]
    texts += [t.lower() for t in base[1::3]]
    texts += ["Note: " + t + " -- thanks" for t in base[2::3]]
    texts += [base[i] + "\n" + base[(i * 7 + 3) % len(base)] for i in range(0, len(base), 2)]
    for t in base:
        if len(t) > 4:
            a = rnd.randrange(len(t))
            texts.append(t[a : rnd.randrange(a, len(t) + 1)])
    for t in base:
        k = rnd.randrange(len(t) + 1)
        texts.append(t[:k] + " " + rnd.choice(INSERTS) + " " + t[k:])
    for t in base[::2]:
        texts.append("".join(str(rnd.randrange(10)) if c.isdigit() and rnd.random() < 0.3 else c for c in t))
    for t in base[::4]:
        texts.append("".join(c + ("\u200b" if rnd.random() < 0.05 else "") for c in t))
    texts += ["", " ", "a", "@", "@@", "\n\x00\n", "x@y.z", "1234567"]
    return texts


def policies() -> dict[str, CompiledPolicy]:
    found = {p.stem: load_policy_file(p) for p in sorted((REPO / "config" / "policies").glob("*.toml"))}
    found["allpacks"] = compile_policy(tomllib.loads(ALL_PACKS_POLICY), "allpacks")
    for name, source in VARIANTS.items():
        found[name] = compile_policy(tomllib.loads(source), name)
    return found


def main(argv: list[str]) -> int:
    corpora = Path(argv[0]) if argv else DEFAULT_CORPORA
    texts = derived_texts(load_texts(corpora))
    total = hashlib.sha256()
    mismatches = 0
    compiled = policies()
    for name, policy in compiled.items():
        for direction in ("inbound", "outbound"):
            single = [policy.scan(t, direction).to_dict() for t in texts]
            batch = [v.to_dict() for v in policy.scan_many(texts, direction)]
            chunked = [
                v.to_dict()
                for i in range(0, len(texts), 97)
                for v in policy.scan_many(texts[i : i + 97], direction)
            ]
            for i, (a, b, c) in enumerate(zip(single, batch, chunked, strict=True)):
                if not a == b == c:
                    mismatches += 1
                    print(f"scan / scan_many disagree: {name} {direction} text {i}", file=sys.stderr)
            blob = orjson.dumps(single, option=orjson.OPT_SORT_KEYS)
            total.update(blob)
            flagged = sum(d["verdict"] != "allowed" or bool(d["matches"]) for d in single)
            print(f"{name} {direction} {hashlib.sha256(blob).hexdigest()[:16]} {flagged} with matches")
    print(
        f"{len(texts)} texts x {len(compiled)} policies x 2 directions = {len(texts) * len(compiled) * 2} "
        f"verdicts (each by scan, scan_many and batches of 97); digest {total.hexdigest()[:16]}"
    )
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
