"""The secrets pack: provider tokens by their documented shapes, and the look-alikes that must
not be taken for them (publishable keys, placeholders, ids, hashes, low-entropy values)."""

from __future__ import annotations

import base64
import json
import random
import string

import pytest

from rules import CompiledPolicy

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
