"""The pii pack: validated entities are redacted; look-alikes (order numbers, dates, versions,
house numbers, hashes) are left alone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rules import CompiledPolicy
from rules.detectors import _checks
from rules.detectors._checks import card_issuer_ok, iban_ok, is_card_number, luhn_ok, ssn_ok


def types(policy: CompiledPolicy, text: str) -> list[tuple[str, str]]:
    """(type, matched text) for every PII match."""
    return [(m.type or "", text[m.start : m.end]) for m in policy.scan(text, "inbound").matches]


# -- e-mail ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("write to jane.doe+tag@example.co.uk today", "jane.doe+tag@example.co.uk"),
        ("Contact: ERIK_baader@mail.teleworm.us.", "ERIK_baader@mail.teleworm.us"),
        ("mailto:ops@xn--bcher-kva.example", "ops@xn--bcher-kva.example"),
    ],
)
def test_email_addresses_are_found(pii_policy: CompiledPolicy, text: str, value: str) -> None:
    assert types(pii_policy, text) == [("EMAIL_ADDRESS", value)]


@pytest.mark.parametrize(
    "text",
    [
        "use the icon@2x.png asset",
        "ping @channel about it",
        "user@localhost is not routable",
        "a@b is too short",
    ],
)
def test_email_look_alikes_are_not(pii_policy: CompiledPolicy, text: str) -> None:
    assert types(pii_policy, text) == []


def test_email_is_redacted_with_its_placeholder(pii_policy: CompiledPolicy) -> None:
    verdict = pii_policy.scan("mail bob@example.com now", "inbound")
    assert (verdict.verdict, verdict.message) == ("redacted", "mail [EMAIL_ADDRESS] now")


# -- payment cards ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "number",
    [
        "4111111111111111",  # Visa
        "4111 1111 1111 1111",
        "5555-5555-5555-4444",  # Mastercard
        "2223003122003222",  # Mastercard 2-series
        "378282246310005",  # Amex
        "3782 822463 10005",
        "6011111111111117",  # Discover
        "3530111333300000",  # JCB
        "6759649826438453",  # Maestro
    ],
)
def test_valid_cards_are_found(pii_policy: CompiledPolicy, number: str) -> None:
    assert types(pii_policy, f"card: {number}.") == [("CREDIT_CARD", number)]


@pytest.mark.parametrize(
    "text",
    [
        "order number 4111111111111112 shipped",  # Luhn fails
        "tracking 1234567812345678",  # Luhn fails
        "reference 9999999999999995",  # Luhn passes, no issuer starts with 9
        "invoice 4444444444444444",  # one repeated digit
        "commit 4a1b2c3d4e5f60718293a4b5c6d7e8f901234567",  # a git hash with digits
    ],
)
def test_card_look_alikes_are_not_cards(pii_policy: CompiledPolicy, text: str) -> None:
    assert [t for t, _ in types(pii_policy, text) if t == "CREDIT_CARD"] == []


def test_luhn_valid_number_in_unlisted_range_counts_only_when_called_a_card(
    pii_policy: CompiledPolicy,
) -> None:
    number = "3598899323053410"  # Luhn-valid, outside the JCB range we list
    assert luhn_ok(number) and not card_issuer_ok(number)
    assert types(pii_policy, f"my credit card {number} was stolen") == [("CREDIT_CARD", number)]
    assert [t for t, _ in types(pii_policy, f"parcel {number} arrived")] != ["CREDIT_CARD"]


def test_card_checks() -> None:
    assert is_card_number("4111111111111111")
    assert not is_card_number("4111111111111112")
    assert not is_card_number("41111111111")  # too short


@given(st.text(st.sampled_from("0123456789") | st.characters(categories=["Nd"]), min_size=1, max_size=20))
def test_fast_card_checks_agree_with_their_definitions(digits: str) -> None:
    doubled = (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)
    total = sum(map(int, digits[-1::-2])) + sum(doubled[int(c)] for c in digits[-2::-2])
    assert luhn_ok(digits) == (total % 10 == 0)
    assert _checks._PREFIX_WIDTHS == (1, 2, 3, 4, 6)  # the widths card_issuer_ok spells out
    n = len(digits)
    assert card_issuer_ok(digits) == any((digits[:w], n) in _checks._CARD_PREFIXES for w in (1, 2, 3, 4, 6))


# -- IBAN -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "iban",
    [
        "GB82WEST12345698765432",
        "GB82 WEST 1234 5698 7654 32",
        "DE89370400440532013000",
        "gb82west12345698765432",
    ],
)
def test_valid_ibans_are_found(pii_policy: CompiledPolicy, iban: str) -> None:
    assert types(pii_policy, f"pay to {iban} please") == [("IBAN_CODE", iban)]


@pytest.mark.parametrize(
    "text",
    [
        "GB82WEST12345698765433",  # wrong check digits (mod 97)
        "GB82WEST123456987654",  # wrong length for GB
        "XX82WEST12345698765432",  # not a country
        "GB82WEST12345698765432X",  # glued to more characters
    ],
)
def test_invalid_ibans_are_not(pii_policy: CompiledPolicy, text: str) -> None:
    assert [t for t, _ in types(pii_policy, text) if t == "IBAN_CODE"] == []


def test_iban_checksum() -> None:
    assert iban_ok("GB82WEST12345698765432")
    assert not iban_ok("GB82WEST12345698765433")


# -- US SSN -----------------------------------------------------------------------------------------


def test_ssn_is_found(pii_policy: CompiledPolicy) -> None:
    assert types(pii_policy, "SSN 536-22-1234 on file") == [("US_SSN", "536-22-1234")]
    assert types(pii_policy, "my social security number is 536221234") == [("US_SSN", "536221234")]


# -- entities with other numbers beside them -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Card: 4242 4242 4242 4242 12/25", ("CREDIT_CARD", "4242 4242 4242 4242")),  # expiry after
        ("4242424242424242 123", ("CREDIT_CARD", "4242424242424242")),  # CVV after
        ("card: 12 4242 4242 4242 4242", ("CREDIT_CARD", "4242 4242 4242 4242")),
        ("1. 4242 4242 4242 4242", ("CREDIT_CARD", "4242 4242 4242 4242")),  # a list item
        ("12 378282246310005", ("CREDIT_CARD", "378282246310005")),
        ("SSN: 536-22-1234 5", ("US_SSN", "536-22-1234")),
        ("Room 101 536-22-1234", ("US_SSN", "536-22-1234")),
        ("12 10.0.0.1", ("IP_ADDRESS", "10.0.0.1")),
        ("TICKET 123456 10.0.0.1", ("IP_ADDRESS", "10.0.0.1")),
    ],
)
def test_an_entity_beside_other_numbers_is_still_found(
    pii_policy: CompiledPolicy, text: str, expected: tuple[str, str]
) -> None:
    """The number run reaches across the spaces into the neighbours; the entity inside it must not
    be lost (it was: the run as a whole was nothing, so the card or SSN went out in clear)."""
    assert types(pii_policy, text) == [expected]
    assert expected[1] not in pii_policy.scan(text, "inbound").message


@pytest.mark.parametrize(
    "text",
    [
        "order 1234 5678 9012 3456 7",  # a Luhn-valid 12-digit window: too short to trust alone
        "2000-04-16 11 2006-04-07 09",  # dates and hours
        "4242 4242 4242 4243 12/25",  # fails Luhn
        "v 1.2.3.4 5",  # a version
    ],
)
def test_pieces_of_a_number_run_are_not_entities_by_chance(pii_policy: CompiledPolicy, text: str) -> None:
    assert types(pii_policy, text) == []


@pytest.mark.parametrize("ssn", ["000-12-3456", "666-12-3456", "912-12-3456", "536-00-1234", "536-22-0000"])
def test_ssns_the_ssa_never_issues_are_rejected(pii_policy: CompiledPolicy, ssn: str) -> None:
    assert not ssn_ok(ssn.replace("-", ""))
    assert [t for t, _ in types(pii_policy, f"ssn: {ssn}") if t == "US_SSN"] == []


def test_bare_nine_digits_without_context_are_not_an_ssn(pii_policy: CompiledPolicy) -> None:
    assert [t for t, _ in types(pii_policy, "batch 536221234 done") if t == "US_SSN"] == []


# -- phone numbers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("call +44 20 7946 0958 tomorrow", "+44 20 7946 0958"),
        ("Phone: 0490 75 40 81", "0490 75 40 81"),
        ("Mobile:\n(08) 8747 6301", "(08) 8747 6301"),
        ("fax 345-899-3560x4587 please", "345-899-3560x4587"),
        ("reach me on 001-518-640-0854", "001-518-640-0854"),
        ("our line is (212) 555-0199.", "(212) 555-0199"),
        ("+41 (0)96 471 07 95", "+41 (0)96 471 07 95"),
    ],
)
def test_phone_numbers_are_found(pii_policy: CompiledPolicy, text: str, value: str) -> None:
    assert types(pii_policy, text) == [("PHONE_NUMBER", value)]


@pytest.mark.parametrize(
    "text",
    [
        "released on 2023-04-13 12:20",  # date and time
        "version 10.2.3.4567 is out",  # version string
        "The restaurant is at 17151 2450 Crown St",  # house number and street
        "a population of 1 234 567 people",  # an amount
        "order 12345678 was shipped",  # a bare order number
        "driver's license number is 2270-66-1551",
        "pi is 3.14159265",
    ],
)
def test_phone_look_alikes_are_not_phones(pii_policy: CompiledPolicy, text: str) -> None:
    assert [t for t, _ in types(pii_policy, text) if t == "PHONE_NUMBER"] == []


# -- IP addresses -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("from 192.168.10.254 at noon", "192.168.10.254"),
        ("server [2001:db8::8a2e:370:7334]:443", "2001:db8::8a2e:370:7334"),
        ("addr fe80::1ff:fe23:4567:890a", "fe80::1ff:fe23:4567:890a"),
    ],
)
def test_ip_addresses_are_found(pii_policy: CompiledPolicy, text: str, value: str) -> None:
    assert types(pii_policy, text) == [("IP_ADDRESS", value)]


@pytest.mark.parametrize(
    "text",
    [
        "upgrade to v1.2.3.4 now",
        "version 1.2.3.4",
        "OID 1.3.6.1.4.1.311",
        "999.1.1.1 is not an address",
        "std::cout << x",
        "at 12:30:45 sharp",
    ],
)
def test_ip_look_alikes_are_not(pii_policy: CompiledPolicy, text: str) -> None:
    assert [t for t, _ in types(pii_policy, text) if t == "IP_ADDRESS"] == []


def test_uuid_and_hash_are_not_pii(pii_policy: CompiledPolicy) -> None:
    text = "request 123e4567-e89b-12d3-a456-426614174000 commit 9fceb02d0ae598e95dc970b74767f19372d61af8"
    assert types(pii_policy, text) == []


def test_offsets_point_into_the_original_text_with_non_ascii_before(pii_policy: CompiledPolicy) -> None:
    text = "Grüße 🎉 — écrivez à zoë@example.fr"
    (match,) = pii_policy.scan(text, "inbound").matches
    assert text[match.start : match.end] == "zoë@example.fr"
