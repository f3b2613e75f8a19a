"""The `pii` pack: e-mail addresses, phone numbers, payment cards, IBANs, US SSNs, IP addresses.

Every entity is found by a cheap shape pattern and then *validated* (Luhn and issuer ranges,
mod-97 and country length, SSA numbering rules, address parsing, the `phonenumbers` metadata), so
that look-alikes such as order numbers, version strings, dates and hashes are not redacted. Where a
shape alone is ambiguous (a national phone number without a country code), the words around it
decide, the way a human reader would.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Any

from rules.detectors._checks import IBAN_LENGTHS, card_issuer_ok, iban_ok, luhn_ok, ssn_ok
from rules.detectors.base import Doc, Finding, RuleInfo, compile_re2, group_spans, indexed_spans

CATEGORY = "pii"

EMAIL = "pii.email"
PHONE = "pii.phone"
CARD = "pii.credit_card"
IBAN = "pii.iban"
SSN = "pii.us_ssn"
IP = "pii.ip_address"

RULES: tuple[RuleInfo, ...] = (
    RuleInfo(EMAIL, CATEGORY, "EMAIL_ADDRESS", "[EMAIL_ADDRESS]", "e-mail address"),
    RuleInfo(PHONE, CATEGORY, "PHONE_NUMBER", "[PHONE_NUMBER]", "phone number, national or international"),
    RuleInfo(CARD, CATEGORY, "CREDIT_CARD", "[CREDIT_CARD]", "payment card number (Luhn + issuer range)"),
    RuleInfo(IBAN, CATEGORY, "IBAN_CODE", "[IBAN_CODE]", "IBAN (mod-97 + country length)"),
    RuleInfo(SSN, CATEGORY, "US_SSN", "[US_SSN]", "US social security number"),
    RuleInfo(IP, CATEGORY, "IP_ADDRESS", "[IP_ADDRESS]", "IPv4 or IPv6 address"),
)

#: Regions tried for a national-format phone number (no "+" prefix) that has no phone word
#: around it. Each region costs a `phonenumbers` parse, so the default list is short.
DEFAULT_PHONE_REGIONS: tuple[str, ...] = ("US", "GB", "DE", "FR", "IN", "CA", "BR", "AU")

# --- patterns ------------------------------------------------------------------------------------

# One RE2 pass over the ASCII view finds every candidate shape; Python validates each. RE2 has
# no look-around, so the boundary checks the shapes need are done on the candidate afterwards.
_CANDIDATES = compile_re2(
    rb"(?:@)"
    rb"|(?:\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})"
    rb"|(?:[A-Za-z]{2}\d{2}(?:[ ]?[A-Za-z0-9]{4}){2,8}(?:[ ]?[A-Za-z0-9]{1,4})?)"
    rb"|(?:(?:\+|\()?\d(?:[ .\-/()]{0,2}\d){6,}\)?(?:[ ]?(?:[xX]|ext\.?|extension)[ ]?\d{1,6})?)"
    rb"|(?:[0-9A-Fa-f]{0,4}:[0-9A-Fa-f]{0,4}:[0-9A-Fa-f:.]*)",
    view=True,
)

#: The local part: the run of these characters (at most 64) that ends at the "@". Matched on the
#: reversed window before the "@": one match, where a search for `[...]{1,64}\Z` tried every start.
_LOCAL_RUN = re.compile(r"[\w!#$%&'*+/=?^`{|}~.-]*")
_DOMAIN = re.compile(r"(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.)+([^\W\d_]{2,63})(?![\w-])")
_EXT = re.compile(r"[ ]?(?:x|ext\.?|extension)[ ]?\d{1,6}\Z", re.IGNORECASE)
_GROUPS = re.compile(r"\d+")
_IPV4 = re.compile(r"(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)")
_IPV6_TAIL = re.compile(r"[0-9A-Fa-f:.]*")
_NUM_GLUE = frozenset("+-./_")
_IPV4_SHAPE = re.compile(rb"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}")
_NUM_PY = re.compile(r"\d(?:[ .\-/()]{0,2}\d){6,}\)?")
#: Pieces of a number run tried apart when the run as a whole is nothing (see `_parts`).
_MAX_PARTS = 12

_DATE = re.compile(
    r"(?:\d{4}[-/.](?:0?[1-9]|1[0-2])[-/.](?:0?[1-9]|[12]\d|3[01])"
    r"|(?:0?[1-9]|[12]\d|3[01])[-/.](?:0?[1-9]|1[0-2])[-/.](?:\d{4}|\d{2})"
    r"|(?:0?[1-9]|1[0-2])[-/.](?:0?[1-9]|[12]\d|3[01])[-/.](?:\d{4}|\d{2}))(?!\d)"
)

_PHONE_BEFORE = re.compile(
    r"\b(?:phone|phones|tel|tel\.|telephone|telefon|telefono|teléfono|téléphone|mobile|mobil|mob|cell|"
    r"cellphone|fax|desk|office|home|work|call|calls|calling|called|text|texts|sms|whatsapp|signal|contact|"
    r"reach|reached|dial|ring|hotline|helpline|landline|messages?|answering|answer|tlf|"
    r"(?:my|your|his|her|their|our) (?:number|no))\b"
)
_NOT_PHONE_BEFORE = re.compile(
    r"\b(?:licen[cs]e|passport|account|acct|iban|routing|swift|bic|order|invoice|ssn|social|tax|vat|"
    r"isbn|serial|tracking|ticket|zip|postal|postcode|po|box|apt|suite|unit|born|dob|birthday|card|cc|"
    r"credit|debit|amount|total|price|population|id|ref|reference|code|pin|version|policy|patient|"
    r"member|employee|customer|case|claim|record)\b"
)
_PHONE_AFTER = re.compile(
    r"[\s\-–,:()\\]{0,3}(?:office|fax|mobile|cell|home|work|phone|tel|landline|desk|direct)\b"
)
_STREET_AFTER = re.compile(
    r"[ \t]+(?:(?:[A-Z][\w'-]*\.?[ \t]+){1,3}(?:St|Street|Rd|Road|Ave|Avenue|Dr|Drive|Ln|Lane|La|Blvd|"
    r"Boulevard|Way|Ct|Court|Pl|Place|Sq|Square|Ter|Terrace|Hwy|Highway|Pkwy|Parkway|Cres|Crescent)\b|"
    r"(?:Rue|Via|Calle|Avenida|Av\.|Rua|Strada|Viale|Piazza)\b)"
)
_WORD_AFTER = re.compile(r"[ \t]+[^\W\d_]")
_CARD_BEFORE = re.compile(r"\b(?:card|cards|cc|credit|debit|visa|mastercard|amex|payment|pan|maestro)\b")
_SSN_BEFORE = re.compile(r"\b(?:ssn|ssns|social security|social sec|ss#|ss no)\b")
_VERSION_BEFORE = re.compile(r"\b(?:version|ver|release|build|v|section|chapter|step|rule|oid)[ .:]*\Z")


def _context_before(text: str, seg_start: int, pos: int, width: int = 48) -> str:
    """The words before `pos` on its line, or on the line above when it starts the line.

    Labels sit either just before a value ("Phone: ...") or on the line above it ("Phone:\n...");
    anything further up belongs to other values and must not vote.
    """
    lo = max(seg_start, pos - width)
    nl = text.rfind("\n", lo, pos)
    if nl >= 0:
        if text[nl + 1 : pos].strip():
            lo = nl + 1
        else:
            prev = text.rfind("\n", lo, nl)
            lo = prev + 1 if prev >= 0 else lo
    return text[lo:pos].lower()


_LABELS = re.compile(f"(?P<pos>{_PHONE_BEFORE.pattern})|(?P<neg>{_NOT_PHONE_BEFORE.pattern})")


#: `_LABELS` for RE2, used on ASCII windows, where RE2's ASCII-only `\b` and Python's Unicode one
#: agree: one pass instead of Python trying the whole alternation at every character.
_LABELS_RE2 = compile_re2(_LABELS.pattern.encode(), capture=True)


def _label_before(window: str) -> tuple[int, int]:
    """End offsets of the last phone word and of the last other-number word in `window` (-1 when
    none): the nearer label says what the number is."""
    pos = neg = -1
    if window.isascii():
        for found in group_spans(_LABELS_RE2, window.encode()):
            if found[1][0] >= 0:
                pos = found[0][1]
            else:
                neg = found[0][1]
        return pos, neg
    for m in _LABELS.finditer(window):
        if m.lastgroup == "pos":
            pos = m.end()
        else:
            neg = m.end()
    return pos, neg


class PiiDetector:
    """Finds and validates PII entities; see the module docstring for the approach."""

    category = CATEGORY

    def __init__(self, phone_regions: Sequence[str] = DEFAULT_PHONE_REGIONS) -> None:
        self.phone_regions = tuple(phone_regions)
        self._pn: Any = None  # phonenumbers, imported on first use: it is only needed for phones

    @property
    def rules(self) -> tuple[RuleInfo, ...]:
        return RULES

    def find(self, doc: Doc) -> list[Finding]:
        out: list[Finding] = []
        text = doc.text
        view = doc.view
        # Dispatch on the candidate's first byte and shape: cheaper than asking RE2 which
        # alternative matched, which the Python wrapper computes slowly.
        starts, ends = doc.starts, doc.ends
        for s, e, i in indexed_spans(_CANDIDATES, doc):
            first = view[s]
            if first == 64:  # "@"
                self._email(text, s, starts[i], ends[i], out)
            elif view.find(b":", s, e) >= 0:
                self._ipv6(text, s, e, starts[i], ends[i], out)
            elif first > 64:  # a letter: IBAN
                self._iban(text, s, e, starts[i], ends[i], out)
            elif e - s <= 15 and view.count(b".", s, e) == 3 and _IPV4_SHAPE.fullmatch(view, s, e):
                self._ipv4(text, s, e, starts[i], ends[i], out)
            else:
                self._number(text, s, e, starts[i], ends[i], out)
        return out

    # -- e-mail -----------------------------------------------------------------------------------

    def _email(self, text: str, i: int, seg_start: int, seg_end: int, out: list[Finding]) -> None:
        run = _LOCAL_RUN.match(text[max(seg_start, i - 64) : i][::-1])
        if run is None or run.end() == 0:  # (`*` always matches; None only for the type checker)
            return
        start = i - run.end()
        while start < i and text[start] == ".":
            start += 1
        if start == i or text[i - 1] == ".":
            return
        dm = _DOMAIN.match(text, i + 1, seg_end)
        if dm is None:
            return
        if dm.group(1).lower() in _FILE_SUFFIXES and re.match(r"\d+x\.", text[i + 1 : dm.end()]):
            return  # "icon@2x.png": a retina asset name, not an address
        out.append((start, dm.end(), EMAIL, 1.0))

    # -- IP addresses -----------------------------------------------------------------------------

    def _ipv4(self, text: str, s: int, e: int, seg_start: int, seg_end: int, out: list[Finding]) -> None:
        if not _IPV4.fullmatch(text, s, e) or (text[e : e + 1] == "." and text[e + 1 : e + 2].isdigit()):
            # "03.93.92.16.85": not an address but maybe a phone; give it to the number rules
            m = _NUM_PY.match(text, s, seg_end)
            if m is not None:
                self._number(text, s, m.end(), seg_start, seg_end, out)
            return
        if s > seg_start and (text[s - 1].isalnum() or text[s - 1] in "._"):
            return  # "v1.2.3.4", "1.1.2.3.4": part of a version or an OID
        if (
            e < seg_end
            and (text[e].isalnum() or text[e] == "_" or text[e : e + 2].rstrip(".") != text[e : e + 2])
            and not (text[e] == "." and (e + 1 == seg_end or not text[e + 1].isdigit()))
        ):
            return
        if _VERSION_BEFORE.search(_context_before(text, seg_start, s, 16)):
            return
        out.append((s, e, IP, 0.95))

    def _ipv6(self, text: str, s: int, e: int, seg_start: int, seg_end: int, out: list[Finding]) -> None:
        if s > seg_start and (text[s - 1].isalnum() or text[s - 1] in "_:."):
            return
        cand = text[s:e].rstrip(".")
        e = s + len(cand)
        if e < seg_end and (text[e].isalnum() or text[e] == "_"):
            return
        if cand.count(":") < 2:
            return
        try:
            addr = ipaddress.IPv6Address(cand)
        except ValueError:
            return
        groups = [g for g in re.split(r"[:.]", cand) if g]
        if len(groups) < 3 and not addr.is_loopback:
            return  # "a::b", "dead::beef": too little to tell from code
        out.append((s, e, IP, 0.95))

    # -- IBAN -------------------------------------------------------------------------------------

    def _iban(self, text: str, s: int, e: int, seg_start: int, seg_end: int, out: list[Finding]) -> None:
        if s > seg_start and text[s - 1].isalnum():
            return
        want = IBAN_LENGTHS.get(text[s : s + 2].upper(), 0)
        if want == 0:
            return
        chars: list[str] = []
        end = s
        for j in range(s, e):
            c = text[j]
            if c != " ":
                chars.append(c)
                if len(chars) == want:
                    end = j + 1
                    break
        if len(chars) != want or (end < seg_end and text[end].isalnum()):
            return  # too short, or the IBAN-length prefix of a longer token
        if iban_ok("".join(chars)):
            out.append((s, end, IBAN, 1.0))

    # -- numbers: cards, SSNs, phones -------------------------------------------------------------

    def _number(self, text: str, s: int, e: int, seg_start: int, seg_end: int, out: list[Finding]) -> None:
        found = len(out)
        self._whole_number(text, s, e, seg_start, seg_end, out)
        if len(out) == found and " " in text[s:e]:
            # Nothing as a whole: the run may be an entity with other numbers beside it, joined by
            # spaces ("4242 4242 4242 4242 12/25", "12 10.0.0.1", "Room 101 536-22-1234").
            self._parts(text, s, e, seg_start, seg_end, out)

    def _parts(self, text: str, s: int, e: int, seg_start: int, seg_end: int, out: list[Finding]) -> None:
        """Cards, SSNs and IPv4 addresses among the space-separated pieces of a number run, longest
        first, each piece used once. Phones are not tried: any few digits in a row could be one."""
        tokens: list[tuple[int, int]] = []
        pos = s
        for piece in text[s:e].split(" "):
            if piece:
                tokens.append((pos, pos + len(piece)))
            pos += len(piece) + 1
        n = len(tokens)
        if not 2 <= n <= _MAX_PARTS:
            return
        taken = [False] * n
        for size in range(n - 1, 0, -1):
            for i in range(n - size + 1):
                if any(taken[i : i + size]):
                    continue
                found: list[Finding] = []
                self._part(text, tokens[i][0], tokens[i + size - 1][1], seg_start, seg_end, found)
                if found:
                    out.extend(found)
                    taken[i : i + size] = [True] * size

    def _part(self, text: str, s: int, e: int, seg_start: int, seg_end: int, out: list[Finding]) -> None:
        body = text[s:e]
        if not (body[0].isdigit() and body[-1].isdigit()):
            return
        if body.count(".") == 3 and _IPV4.fullmatch(body):
            self._ipv4(text, s, e, seg_start, seg_end, out)
            return
        digits = "".join(_GROUPS.findall(body))
        if 14 <= len(digits) <= 19:  # not the short Maestro lengths: every window is one more try
            self._card(text, body, digits, s, seg_start, out)
        elif len(digits) == 9:
            self._ssn(text, body, digits, s, seg_start, out)

    def _whole_number(
        self, text: str, s: int, e: int, seg_start: int, seg_end: int, out: list[Finding]
    ) -> None:
        if s > seg_start:
            prev = text[s - 1]
            if prev.isalnum() or prev in _NUM_GLUE:
                return  # glued to a word, a decimal or a longer number
        run = text[s:e]
        ext = _EXT.search(run) if ("x" in run or "X" in run) else None
        body = run[: ext.start()] if ext else run
        if body[-1] == ")" and "(" not in body:
            body = body[:-1]
            e = s + len(body)
        groups = _GROUPS.findall(body)
        digits = "".join(groups)
        n = len(digits)
        if ext is None and 12 <= n <= 19 and self._card(text, body, digits, s, seg_start, out):
            return
        if ext is None and n == 9 and self._ssn(text, body, digits, s, seg_start, out):
            return
        if 7 <= n <= 15:
            self._phone(text, run, body, groups, digits, s, e, seg_start, seg_end, out)

    def _card(self, text: str, body: str, digits: str, s: int, seg_start: int, out: list[Finding]) -> bool:
        if not _card_grouping(body) or not luhn_ok(digits) or digits.count(digits[0]) == len(digits):
            return False
        if card_issuer_ok(digits):
            out.append((s, s + len(body), CARD, 1.0))
            return True
        # An issuer range we do not list, but the text says it is a card and the check digit agrees.
        if _CARD_BEFORE.search(_context_before(text, seg_start, s)):
            out.append((s, s + len(body), CARD, 0.8))
            return True
        return False

    def _ssn(self, text: str, body: str, digits: str, s: int, seg_start: int, out: list[Finding]) -> bool:
        shaped = len(body) == 11 and body[3] == body[6] and body[3] in "- " and body[:3].isdigit()
        if not shaped and not body.isdigit():
            return False
        if not ssn_ok(digits):
            return False
        context = _SSN_BEFORE.search(_context_before(text, seg_start, s)) is not None
        if not (shaped or context):
            return False
        out.append((s, s + len(body), SSN, 1.0 if context else 0.85))
        return True

    def _phone(
        self,
        text: str,
        run: str,
        body: str,
        groups: list[str],
        digits: str,
        s: int,
        e: int,
        seg_start: int,
        seg_end: int,
        out: list[Finding],
    ) -> None:
        if digits.count(digits[0]) == len(digits) or _DATE.match(body):
            return
        if len(groups) == 2 and "." in body and " " not in body:
            return  # a decimal number
        if e < seg_end and text[e] == " " and _STREET_AFTER.match(text, e, seg_end):
            return  # "4966 Bond Street": a house number
        international = body[0] == "+" or (body.startswith("00") and len(groups) > 1)
        pos_at, neg_at = _label_before(_context_before(text, seg_start, s))
        labelled_after = _PHONE_AFTER.match(text[e : min(seg_end, e + 24)].lower()) is not None
        context = pos_at > neg_at or labelled_after
        if neg_at > pos_at and not international and not labelled_after:
            return
        if context and (international or len(groups) > 1 or len(digits) >= 8):
            out.append((s, e, PHONE, 0.85))
            return
        pn = self._phonenumbers()
        if international:
            number = "+" + body[2:] if body.startswith("00") else body
            try:
                parsed = pn.parse(number, None)
            except pn.NumberParseException:
                return
            if pn.is_valid_number(parsed):
                out.append((s, e, PHONE, 0.95))
            elif context or pn.is_possible_number(parsed):
                out.append((s, e, PHONE, 0.75))
            return
        if len(groups) < 2 or _thousands(groups, body) or _WORD_AFTER.match(text, e, seg_end):
            # Without a phone word around it, a bare digit string, "1 234 567" or "4966 Bond
            # Street" (a house number and a street) is not evidence enough.
            return
        for region in self.phone_regions:
            try:
                parsed = pn.parse(body, region)
            except pn.NumberParseException:
                continue
            if pn.is_valid_number(parsed):
                out.append((s, e, PHONE, 0.7))
                return

    def _phonenumbers(self) -> Any:
        if self._pn is None:
            import phonenumbers

            self._pn = phonenumbers
        return self._pn


_FILE_SUFFIXES = frozenset({"png", "jpg", "jpeg", "gif", "svg", "webp", "ico", "bmp"})


def _card_grouping(body: str) -> bool:
    """Card numbers are written as one block or in groups of 4 (Amex/Diners 4-6-5 / 4-6-4)."""
    if body.isdigit():
        return True
    if body.strip("0123456789 -"):
        return False
    groups = [len(g) for g in body.replace("-", " ").split(" ")]
    if all(g == 4 for g in groups[:-1]) and 1 <= groups[-1] <= 4:
        return True
    return groups in ([4, 6, 5], [4, 6, 4])


def _thousands(groups: list[str], body: str) -> bool:
    """'1 234 567' / '1.234.567': digit grouping of an amount rather than a phone layout."""
    return (
        len(groups[0]) <= 3
        and all(len(g) == 3 for g in groups[1:])
        and len(set(body) - set("0123456789")) == 1
    )
