"""The secrets pack: provider tokens by their documented shapes, and the look-alikes that must
not be taken for them (publishable keys, placeholders, ids, hashes, low-entropy values)."""

from __future__ import annotations

import base64
import json
import random
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rules import CompiledPolicy
from rules.detectors import secrets
from rules.detectors._atoms import first_chars
from rules.detectors.base import Doc, Finding

RNG = random.Random(20240601)
ALNUM = string.ascii_letters + string.digits


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


def b64url(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


JWT = f"{b64url({'alg': 'HS256', 'typ': 'JWT'})}.{b64url({'sub': '42', 'iat': 1700000000})}.{rand(43)}"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA"
    + rand(64)
    + "\n"
    + rand(64)
    + "\n-----END RSA PRIVATE KEY-----"
)

POSITIVES = [
    ("AKIA" + rand(16, string.ascii_uppercase + string.digits), "secrets.aws_access_key"),
    ("ghp_" + rand(36), "secrets.github_token"),
    ("github_pat_" + rand(22) + "_" + rand(59), "secrets.github_token"),
    ("glpat-" + rand(20), "secrets.gitlab_token"),
    ("xoxb-" + rand(10, string.digits) + "-" + rand(24), "secrets.slack_token"),
    ("sk_live_" + rand(24), "secrets.stripe_key"),
    ("sk-" + rand(20) + "T3BlbkFJ" + rand(20), "secrets.openai_key"),
    ("sk-ant-api03-" + rand(93, ALNUM + "-_") + "AA", "secrets.anthropic_key"),
    ("npm_" + rand(36), "secrets.npm_token"),
    ("pypi-AgEIcHlwaS5vcmc" + rand(90, ALNUM + "-_"), "secrets.pypi_token"),
    ("SG." + rand(22) + "." + rand(43), "secrets.sendgrid_key"),
    ("AC" + rand(32, string.ascii_lowercase + string.digits), "secrets.twilio_key"),
    ("M" + rand(23) + "." + rand(6) + "." + rand(27), "secrets.discord_token"),
    (rand(9, string.digits[1:]) + ":AA" + rand(33), "secrets.telegram_bot_token"),
    (rand(32, "0123456789abcdef") + "-us12", "secrets.mailchimp_key"),
    ("AIza" + rand(35), "secrets.gcp_api_key"),
    ("whsec_" + base64.b64encode(RNG.randbytes(24)).decode(), "secrets.webhook_secret"),
    (JWT, "secrets.jwt"),
    (PEM, "secrets.private_key"),
]


@pytest.mark.parametrize(("token", "rule"), POSITIVES, ids=[r for _, r in POSITIVES])
def test_provider_tokens_are_found_and_redacted(
    secrets_policy: CompiledPolicy, token: str, rule: str
) -> None:
    text = f"here it is: {token} -- keep it safe"
    verdict = secrets_policy.scan(text, "inbound")
    assert [(m.rule, text[m.start : m.end]) for m in verdict.matches] == [(rule, token)]
    assert verdict.message is not None and token not in verdict.message


def test_aws_secret_key_assignment_redacts_the_value(secrets_policy: CompiledPolicy) -> None:
    value = rand(40, ALNUM + "/+")
    text = f'aws_secret_access_key = "{value}"'
    verdict = secrets_policy.scan(text, "inbound")
    assert [text[m.start : m.end] for m in verdict.matches] == [value]
    assert verdict.message == 'aws_secret_access_key = "[AWS_SECRET_KEY]"'


def test_credentials_in_a_url(secrets_policy: CompiledPolicy) -> None:
    text = "clone https://deploy:s3cr3t-Pa55@git.example.com/repo.git"
    verdict = secrets_policy.scan(text, "inbound")
    assert verdict.message == "clone https://[URL_CREDENTIALS]@git.example.com/repo.git"


@pytest.mark.parametrize(
    "text",
    [
        'password = "Xk9#mQ2$vL7!pR"',
        "DB_PASSWORD=9f8e7d6c5b4a3210fedcba98",
        '"client_secret": "q8F3kL0pZ2xW9vB7nM4c"',
        "my password is Tr0ub4dor&3",
    ],
)
def test_high_entropy_assignments_are_secrets(secrets_policy: CompiledPolicy, text: str) -> None:
    assert [m.rule for m in secrets_policy.scan(text, "inbound").matches] in (
        ["secrets.password_assignment"],
        ["secrets.stated_password"],
    )


@pytest.mark.parametrize(
    "text",
    [
        "pk_live_" + rand(24),  # Stripe publishable key: meant to be public
        'password = "changeme"',
        "password: ********",
        "token=${GITHUB_TOKEN}",
        "api_key: <your-api-key>",
        "PASSWORD=hunter",  # too short and plain
        "session_token=123e4567-e89b-12d3-a456-426614174000",  # an id, not a credential
        "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
        "foo_" + rand(36),  # GitHub-shaped body with the wrong prefix
        "eyJhbGciOiJub25lIn0.bm90IGpzb24.sig",  # payload is not JSON
        "https://example.com/a:b@c",  # no user:password before the host
        "my password is required",
        "the sk-12345 model",
    ],
)
def test_look_alikes_are_not_secrets(secrets_policy: CompiledPolicy, text: str) -> None:
    assert secrets_policy.scan(text, "inbound").matches == ()


def test_provider_rule_wins_over_generic_assignment(secrets_policy: CompiledPolicy) -> None:
    token = "ghp_" + rand(36)
    (match,) = secrets_policy.scan(f'GITHUB_TOKEN="{token}"', "inbound").matches
    assert match.rule == "secrets.github_token"


def test_truncated_private_key_block_is_still_redacted(secrets_policy: CompiledPolicy) -> None:
    text = "key:\n-----BEGIN OPENSSH PRIVATE KEY-----\n" + rand(70) + "\n" + rand(70) + "\n"
    verdict = secrets_policy.scan(text, "inbound")
    assert verdict.message is not None
    assert "BEGIN OPENSSH" not in verdict.message and text.splitlines()[2] not in verdict.message


# --- the shortcuts in confirming a gate hit ---------------------------------------------------------


class _Reference(secrets.SecretsDetector):
    """The detector as it was before its shortcuts: every rule searched from `back` before its
    anchor to `reach` after it, every value matched against every provider rule."""

    def _confirm(self, idx: int, text: str, gs: int, ge: int, seg_start: int, seg_end: int) -> Finding | None:
        spec = secrets._SPECS[idx]
        lo = max(seg_start, gs - spec.back)
        hi = min(seg_end, ge + spec.reach)
        pattern = secrets._PY[idx]
        m = pattern.search(text, lo, hi)
        while m is not None and m.start() <= gs:
            if m.end() > m.start() and secrets._left_ok(spec.left, text, m.start(), seg_start):
                v = m.span("v") if spec.value else None
                hit = self._accept(idx, spec, m.start(), m.end(), v, text, seg_start, seg_end)
                if hit is not None:
                    return hit
            m = pattern.search(text, m.start() + 1, hi)
        return None

    def _specific(self, text: str, s: int, e: int, seg_start: int, seg_end: int) -> Finding | None:
        for idx, spec in enumerate(secrets._SPECS):
            if spec.value:
                continue
            m = secrets._PY[idx].match(text, s, seg_end)
            if m is not None and m.end() > m.start() and secrets._left_ok(spec.left, text, s, seg_start):
                hit = self._accept(idx, spec, s, m.end(), None, text, seg_start, seg_end)
                if hit is not None:
                    return hit
        return None


PIECES = [
    "password", "PASSWORD", "my_db_password", "api_key", "secret", "token", " = ", ": ", "=", '"', "'",
    "Authorization: Bearer ", "https://", "user:", "@host", "AKIA", "ghp_", "xoxb-", "sk_live_", "eyJ",
    "glpat-", "npm_", "AP6", "AKC", "artifactory", "//registry.npmjs.org/:_authToken=", "-----BEGIN ",
    "PRIVATE KEY-----", "\n", " ", "é", "K", "ſ", "_", "-", ".", "/", "0123456789abcdef",
    "x9$Kq2!vL8#z", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", rand(36), rand(40), rand(24),
    "changeme", "aws_secret_access_key", "Abc8Q~" + rand(33), "s3cr3t-Pa55", "AKCp" + rand(12),
    *(token for token, _ in POSITIVES),
]  # fmt: skip
VALUES = [
    "changeme", "${TOKEN}", "x9$Kq2!vL8#z", "Xk9#mQ2$vL7!pR", "hunter", rand(40, ALNUM + "/+"),
    "743b294a-cd03-11ec-9d64-0242ac120002", "AKCp" + rand(12), *(token for token, _ in POSITIVES[:17]),
]  # fmt: skip
ASSIGNMENT = st.tuples(
    st.sampled_from(["password", "api_key", "my_db_password", "aws_secret_access_key", "token",
                     "client_secret", "//registry.npmjs.org/:_authToken", "Authorization", "passphrase"]),
    st.sampled_from([" = ", "=", ": ", ":=", " => ", ": Bearer ", " is "]),
    st.sampled_from(['"', "'", ""]),
    st.sampled_from(VALUES),
).map(lambda t: f"{t[0]}{t[1]}{t[2]}{t[3]}{t[2]}")  # fmt: skip
SECRETISH = st.lists(st.one_of(st.sampled_from(PIECES), ASSIGNMENT), max_size=10).map(" ".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(SECRETISH, min_size=1, max_size=4))
def test_shortcuts_find_what_the_full_searches_find(texts: list[str]) -> None:
    doc = Doc(texts)
    assert secrets.SecretsDetector().find(doc) == _Reference().find(Doc(texts))


# Provider rules whose tokens can start with only some characters (the others are tried on every value).
_WITH_FIRST_CHARS = [
    i for i, s in enumerate(secrets._SPECS) if not s.value and first_chars(s.pattern) is not None
]


def test_most_provider_rules_have_first_characters() -> None:
    providers = [i for i, s in enumerate(secrets._SPECS) if not s.value]
    assert len(_WITH_FIRST_CHARS) >= len(providers) - 2, "the first-character shortcut barely applies"


@pytest.mark.parametrize("idx", _WITH_FIRST_CHARS)
def test_provider_tokens_start_with_their_first_characters(idx: int) -> None:
    chars = first_chars(secrets._SPECS[idx].pattern)
    assert chars is not None
    pattern = secrets._PY[idx]

    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_regex(pattern, fullmatch=True))
    def check(token: str) -> None:
        assert token[0] in chars

    check()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(VALUES) | st.text(max_size=40), st.sampled_from(["", " ", "=", "x"]))
def test_a_value_meets_the_provider_rules_it_can_start(value: str, before: str) -> None:
    text = before + value
    args = (text, len(before), len(text), 0, len(text))
    assert secrets.SecretsDetector()._specific(*args) == _Reference()._specific(*args)
