"""Checksums and number-plan tables that turn a pattern hit into a validated entity.

Kept apart from the patterns because they are pure functions that the unit tests exercise
directly, and because each one is the reason a look-alike (an order number, a version string, a
random reference) is *not* reported.
"""

from __future__ import annotations

import math
from collections import Counter

# --- payment cards -------------------------------------------------------------------------------

#: (prefix low, prefix high, prefix digits, allowed lengths). Issuer identification ranges of the
#: schemes in circulation (ISO/IEC 7812 as published by the networks); a number outside every
#: range is not a card whatever its Luhn digit says.
_CARD_RANGES: tuple[tuple[int, int, int, frozenset[int]], ...] = (
    (4, 4, 1, frozenset({13, 16, 19})),  # Visa
    (51, 55, 2, frozenset({16})),  # Mastercard
    (2221, 2720, 4, frozenset({16})),  # Mastercard 2-series
    (34, 34, 2, frozenset({15})),  # American Express
    (37, 37, 2, frozenset({15})),
    (300, 305, 3, frozenset({14, 16, 17, 18, 19})),  # Diners Club International
    (3095, 3095, 4, frozenset({14, 16, 17, 18, 19})),
    (36, 36, 2, frozenset({14, 15, 16, 17, 18, 19})),
    (38, 39, 2, frozenset({14, 16, 17, 18, 19})),
    (6011, 6011, 4, frozenset({16, 17, 18, 19})),  # Discover
    (644, 649, 3, frozenset({16, 17, 18, 19})),
    (65, 65, 2, frozenset({16, 17, 18, 19})),
    (622126, 622925, 6, frozenset({16, 17, 18, 19})),
    (3528, 3589, 4, frozenset({16, 17, 18, 19})),  # JCB
    (1800, 1800, 4, frozenset({15})),  # JCB (legacy 15-digit)
    (2131, 2131, 4, frozenset({15})),
    (62, 62, 2, frozenset({16, 17, 18, 19})),  # UnionPay
    (2200, 2204, 4, frozenset({16, 17, 18, 19})),  # Mir
    (50, 50, 2, frozenset(range(12, 20))),  # Maestro
    (56, 58, 2, frozenset(range(12, 20))),
    (639, 639, 3, frozenset(range(12, 20))),
    (67, 67, 2, frozenset(range(12, 20))),
    (6304, 6304, 4, frozenset(range(12, 20))),
    (60, 60, 2, frozenset({16})),  # RuPay
    (81, 82, 2, frozenset({16})),
    (508, 508, 3, frozenset({16})),
    (9792, 9792, 4, frozenset({16})),  # Troy
)


_LUHN_DOUBLED = (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)
#: A doubled digit's digit sum, as a digit: "5" -> 10 -> "1".
_LUHN_DOUBLE = str.maketrans("0123456789", "0246813579")


def luhn_ok(digits: str) -> bool:
    """The Luhn mod-10 check every payment card number carries in its last digit."""
    if digits.isascii():  # digit sums as byte sums, in C
        kept = digits[-1::-2] + digits[-2::-2].translate(_LUHN_DOUBLE)
        return (sum(kept.encode()) - 48 * len(kept)) % 10 == 0
    doubled = _LUHN_DOUBLED
    total = sum(map(int, digits[-1::-2])) + sum(doubled[int(c)] for c in digits[-2::-2])
    return total % 10 == 0


def _expand_ranges() -> frozenset[tuple[str, int]]:
    pairs: set[tuple[str, int]] = set()
    for low, high, width, lengths in _CARD_RANGES:
        for prefix in range(low, high + 1):
            for n in lengths:
                pairs.add((str(prefix).zfill(width), n))
    return frozenset(pairs)


#: (prefix, length) pairs of every issuer range, so a check is a few set lookups.
_CARD_PREFIXES = _expand_ranges()
_PREFIX_WIDTHS = tuple(sorted({width for _, _, width, _ in _CARD_RANGES}))


def card_issuer_ok(digits: str) -> bool:
    """Whether the number starts in a known issuer range with a length that scheme issues.

    Spelled out for the prefix widths of `_CARD_RANGES` (1, 2, 3, 4 and 6 digits; a test checks
    that they still are): a generator over `_PREFIX_WIDTHS` costs more than the lookups."""
    n = len(digits)
    known = _CARD_PREFIXES
    return (
        (digits[:1], n) in known
        or (digits[:2], n) in known
        or (digits[:3], n) in known
        or (digits[:4], n) in known
        or (digits[:6], n) in known
    )


def is_card_number(digits: str) -> bool:
    """A payment card number: 12-19 digits, issuer range, Luhn, and not one repeated digit."""
    return (
        12 <= len(digits) <= 19
        and luhn_ok(digits)
        and card_issuer_ok(digits)
        and digits.count(digits[0]) != len(digits)
    )


# --- IBAN ----------------------------------------------------------------------------------------

#: Country code -> IBAN length (SWIFT IBAN registry).
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HN": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28,
    "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22,
    "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23,
    "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip


def iban_ok(iban: str) -> bool:
    """ISO 13616: registered country, that country's length, check digits 02-98, mod 97 == 1."""
    iban = iban.upper()
    if IBAN_LENGTHS.get(iban[:2]) != len(iban) or not iban[2:4].isdigit():
        return False
    if not 2 <= int(iban[2:4]) <= 98 or not iban.isalnum() or not iban.isascii():
        return False
    rearranged = iban[4:] + iban[:4]
    number = "".join(str(int(c, 36)) for c in rearranged)
    return int(number) % 97 == 1


# --- US SSN --------------------------------------------------------------------------------------

#: Numbers the SSA never issued but that circulate widely (advertising, documentation examples).
_SSN_NEVER_ISSUED = frozenset({"078051120", "219099999", "123456789", "111111111", "987654321"})


def ssn_ok(digits: str) -> bool:
    """SSA rules: area not 000, 666 or 900-999; group not 00; serial not 0000; not a known fake."""
    if len(digits) != 9 or not digits.isdigit():
        return False
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
        return False
    return digits not in _SSN_NEVER_ISSUED and digits.count(digits[0]) != 9


# --- entropy -------------------------------------------------------------------------------------


def shannon_entropy(value: str) -> float:
    """Bits per character: random keys score high, words and repeated filler score low."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def char_classes(value: str) -> int:
    """How many of lower, upper, digit and other characters the value mixes."""
    return (
        any(c.islower() for c in value)
        + any(c.isupper() for c in value)
        + any(c.isdigit() for c in value)
        + any(not c.isalnum() for c in value)
    )
