"""Quality of the content-filter packs on the public corpora, with the peers side by side.

    .venv/bin/python bench/filter_quality.py [CORPORA_DIR]      # default: ../shared/corpora

PII (pii_spans.jsonl): spans of EMAIL_ADDRESS, CREDIT_CARD, PHONE_NUMBER, IBAN_CODE, US_SSN and
IP_ADDRESS. A predicted span matches a gold span when both have the same type and their overlap
is at least half of their union (IoU >= 0.5); each gold span is matched at most once. Precision =
matched predictions / predictions; recall = matched gold spans / gold spans. Other gold types
(PERSON, STREET_ADDRESS, ...) are not ours to find, but a prediction on one of them counts as a
false positive. Peer: Presidio's pattern recognizers, each called as
`Recognizer.analyze(text, [entity], None)`, every result counted (Presidio's own default threshold
of 0).

Secrets (secrets.jsonl): a row is flagged when the pack reports any match; recall over the rows
labelled secret, false-positive rate over the others. Peer: detect-secrets with its default
plugins, line by line.

Prompt injection (prompt_injection.jsonl): a row is detected when the default policy's inbound
injection settings block it. Recall overall, per PurpleLlama variant and for llm-guard's attacks;
the 11 benign llm-guard prompts must all be allowed.

Benign text: every pii_spans.jsonl text must almost never be blocked by the injection pack or
flagged by the secrets pack (< 0.5 % each).

Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import tomllib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPORA = (REPO.parent / "shared" / "corpora").resolve()
sys.path.insert(0, str(REPO))

from rules import compile_policy  # noqa: E402

PII_TYPES = ("EMAIL_ADDRESS", "CREDIT_CARD", "PHONE_NUMBER", "IBAN_CODE", "US_SSN", "IP_ADDRESS")
TARGETS = {
    "pii_recall": 0.97,
    "pii_precision": 0.95,
    "secrets_recall": 0.95,
    "secrets_fpr": 0.10,
    "injection_recall": 0.60,
    "benign_blocked": 0.005,
}

Span = tuple[int, int, str]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open("rb") as fh:
        return [orjson.loads(line) for line in fh if line.strip()]


def policy_for(direction_set: dict[str, Any]) -> Any:
    return compile_policy({"inbound": direction_set}, "bench")


# -- PII -------------------------------------------------------------------------------------------


def iou(a: Span, b: Span) -> float:
    inter = min(a[1], b[1]) - max(a[0], b[0])
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union if inter > 0 and union > 0 else 0.0


def score_spans(rows: list[dict[str, Any]], predict: Callable[[str], Iterable[Span]]) -> dict[str, Any]:
    per_type: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        gold = [(s["start"], s["end"], s["type"]) for s in row["spans"] if s["type"] in PII_TYPES]
        predicted = sorted(set(predict(row["text"])))
        used: set[int] = set()
        for p in predicted:
            best = max(
                (i for i, g in enumerate(gold) if g[2] == p[2] and i not in used and iou(p, g) >= 0.5),
                key=lambda i: iou(p, gold[i]),
                default=None,
            )
            if best is None:
                per_type[p[2]]["fp"] += 1
            else:
                used.add(best)
                per_type[p[2]]["tp"] += 1
        for i, g in enumerate(gold):
            if i not in used:
                per_type[g[2]]["fn"] += 1
    total: Counter[str] = Counter()
    for counts in per_type.values():
        total.update(counts)
    return {"per_type": per_type, "total": total}


def ratios(c: Counter[str]) -> tuple[float, float]:
    precision = c["tp"] / (c["tp"] + c["fp"]) if c["tp"] + c["fp"] else 1.0
    recall = c["tp"] / (c["tp"] + c["fn"]) if c["tp"] + c["fn"] else 1.0
    return precision, recall


def ours_pii() -> Callable[[str], list[Span]]:
    policy = policy_for({"packs": ["pii"]})

    def predict(text: str) -> list[Span]:
        return [(m.start, m.end, m.type or "") for m in policy.scan(text, "inbound").matches]

    return predict


def presidio_pii() -> Callable[[str], list[Span]]:
    logging.disable(logging.WARNING)  # tldextract cannot fetch its suffix list offline; it says so
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
        (EmailRecognizer(), "EMAIL_ADDRESS"),
        (CreditCardRecognizer(), "CREDIT_CARD"),
        (PhoneRecognizer(), "PHONE_NUMBER"),
        (IbanRecognizer(), "IBAN_CODE"),
        (UsSsnRecognizer(), "US_SSN"),
        (IpRecognizer(), "IP_ADDRESS"),
    ]

    def predict(text: str) -> list[Span]:
        out: list[Span] = []
        for recognizer, entity in recognizers:
            # no NLP engine: the pattern recognizers are called directly, as their docs show
            for r in recognizer.analyze(text, [entity], None) or []:  # type: ignore[arg-type]
                out.append((r.start, r.end, r.entity_type))
        return out

    return predict


# -- secrets ---------------------------------------------------------------------------------------


def ours_secrets() -> Callable[[str], bool]:
    policy = policy_for({"packs": ["secrets"]})
    return lambda text: bool(policy.scan(text, "inbound").matches)


def detect_secrets_flags() -> Callable[[str], bool]:
    """detect-secrets as it scans a repository: each text written to a file, `scan_file` with the
    default plugins and filters (its ad-hoc string mode reports every word as a candidate)."""
    from detect_secrets.core.scan import scan_file
    from detect_secrets.settings import default_settings

    workdir = Path(tempfile.mkdtemp())
    counter = [0]

    def flagged(text: str) -> bool:
        counter[0] += 1
        path = workdir / f"row{counter[0]}.txt"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        with default_settings():
            found = any(True for _ in scan_file(str(path)))
        path.unlink()
        return found

    return flagged


def secrets_scores(
    rows: list[dict[str, Any]], flagged: Callable[[str], bool]
) -> tuple[float, float, list[str]]:
    tp = fn = fp = tn = 0
    misses: list[str] = []
    for row in rows:
        hit = flagged(row["text"])
        if row["secret"]:
            tp += hit
            fn += not hit
            if not hit:
                misses.append(f"missed {row['id']} ({row['kind']})")
        else:
            fp += hit
            tn += not hit
            if hit:
                misses.append(f"false positive {row['id']} ({row['kind']})")
    return tp / (tp + fn), fp / (fp + tn), misses


# -- report ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("corpora", nargs="?", type=Path, default=DEFAULT_CORPORA)
    parser.add_argument("--misses", action="store_true", help="list every miss and false positive")
    args = parser.parse_args(argv)
    corpora: Path = args.corpora
    pii_rows = read_jsonl(corpora / "pii_spans.jsonl")
    secret_rows = read_jsonl(corpora / "secrets.jsonl")
    injection_rows = read_jsonl(corpora / "prompt_injection.jsonl")
    failures: list[str] = []

    def check(name: str, value: float, ok: bool) -> str:
        if not ok:
            failures.append(name)
        return "ok" if ok else "MISSED"

    print(f"corpora: {corpora}")
    print()
    print("PII spans (match = same type and IoU >= 0.5)")
    ours = score_spans(pii_rows, ours_pii())
    theirs = score_spans(pii_rows, presidio_pii())
    print(f"  {'type':14s} {'ours P':>7s} {'ours R':>7s}   {'Presidio P':>10s} {'Presidio R':>10s}   gold")
    for kind in PII_TYPES:
        op, orc = ratios(ours["per_type"][kind])
        tp, tr = ratios(theirs["per_type"][kind])
        gold = ours["per_type"][kind]["tp"] + ours["per_type"][kind]["fn"]
        print(f"  {kind:14s} {op:7.3f} {orc:7.3f}   {tp:10.3f} {tr:10.3f}   {gold}")
    op, orc = ratios(ours["total"])
    tp, tr = ratios(theirs["total"])
    print(f"  {'all':14s} {op:7.3f} {orc:7.3f}   {tp:10.3f} {tr:10.3f}")
    print(
        f"  ours: recall {orc:.3f} (target >= {TARGETS['pii_recall']}: "
        f"{check('pii recall', orc, orc >= TARGETS['pii_recall'])}), precision {op:.3f} "
        f"(target >= {TARGETS['pii_precision']}: "
        f"{check('pii precision', op, op >= TARGETS['pii_precision'])})"
    )
    print()

    print("Secrets (secrets.jsonl: row flagged = any match)")
    recall, fpr, misses = secrets_scores(secret_rows, ours_secrets())
    ds_recall, ds_fpr, _ = secrets_scores(secret_rows, detect_secrets_flags())
    positives = sum(1 for r in secret_rows if r["secret"])
    print(f"  rows: {positives} secrets, {len(secret_rows) - positives} look-alikes")
    print(f"  ours:           recall {recall:.3f}  false-positive rate {fpr:.3f}")
    print(f"  detect-secrets: recall {ds_recall:.3f}  false-positive rate {ds_fpr:.3f}")
    print(
        f"  targets: recall >= {TARGETS['secrets_recall']} "
        f"({check('secrets recall', recall, recall >= TARGETS['secrets_recall'])}), "
        f"FPR <= {TARGETS['secrets_fpr']} ({check('secrets fpr', fpr, fpr <= TARGETS['secrets_fpr'])})"
    )
    if args.misses:
        for line in misses:
            print(f"    {line}")
    print()

    print("Prompt injection (detected = blocked by the default inbound settings)")
    with (REPO / "config" / "policies" / "default.toml").open("rb") as fh:
        default = tomllib.load(fh)
    injection = default["inbound"].get("prompt_injection", {})
    policy = policy_for(
        {
            "packs": ["prompt_injection"],
            "actions": {"prompt_injection": "block"},
            "prompt_injection": injection,
        }
    )
    per_variant: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    benign_blocked: list[str] = []
    benign_total = 0
    for row in injection_rows:
        blocked = policy.scan(row["text"], "inbound").verdict == "blocked"
        if row["injection"]:
            key = f"{row['source']}:{row['variant']}" if row["variant"] else row["source"]
            per_variant[key][0] += blocked
            per_variant[key][1] += 1
        else:
            benign_total += 1
            if blocked:
                benign_blocked.append(row["id"])
    detected = sum(v[0] for v in per_variant.values())
    attacks = sum(v[1] for v in per_variant.values())
    for key, (hit, n) in sorted(per_variant.items()):
        print(f"  {key:45s} {hit:3d}/{n:<3d} {hit / n:.2f}")
    recall = detected / attacks
    print(
        f"  overall recall {recall:.3f} ({detected}/{attacks}; target >= {TARGETS['injection_recall']}: "
        f"{check('injection recall', recall, recall >= TARGETS['injection_recall'])})"
    )
    ok = not benign_blocked
    print(
        f"  benign llm-guard prompts allowed: {benign_total - len(benign_blocked)}/{benign_total} "
        f"({check('benign role-play allowed', 0, ok)})"
        + ("" if ok else " blocked: " + ", ".join(benign_blocked))
    )
    print()

    print("Benign text (every pii_spans.jsonl text)")
    secrets_policy = policy_for({"packs": ["secrets"]})
    inj_blocked = sum(policy.scan(r["text"], "inbound").verdict == "blocked" for r in pii_rows)
    sec_flagged = sum(bool(secrets_policy.scan(r["text"], "inbound").matches) for r in pii_rows)
    ds = detect_secrets_flags()
    ds_flagged = sum(ds(r["text"]) for r in pii_rows)
    n = len(pii_rows)
    limit = TARGETS["benign_blocked"]
    print(
        f"  injection pack blocked: {inj_blocked}/{n} = {inj_blocked / n:.4f} (target < {limit}: "
        f"{check('benign blocked by injection', 0, inj_blocked / n < limit)})"
    )
    print(
        f"  secrets pack flagged:   {sec_flagged}/{n} = {sec_flagged / n:.4f} (target < {limit}: "
        f"{check('benign flagged by secrets', 0, sec_flagged / n < limit)}); detect-secrets flagged "
        f"{ds_flagged}/{n} = {ds_flagged / n:.4f}"
    )
    print()
    if failures:
        print("targets MISSED: " + ", ".join(failures))
        return 1
    print("all targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
