"""The `secrets` pack: cloud and SaaS credentials, private keys, JWTs, credentials in URLs and
`password=`-style assignments.

Each provider's token has a documented shape (a fixed prefix, a length, an alphabet, sometimes a
structure such as the JWT's JSON header); a rule is that shape plus the checks that separate a
real token from the words and identifiers around it: boundaries, a JSON-decodable JWT, an
entropy floor for free-form assignments, and no `${VARIABLE}`-style placeholders.

All rules are joined into one RE2 pattern that walks the text once; only its hits are handed to
the Python patterns (which may use look-around) and validators.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from rules.detectors._atoms import first_chars
from rules.detectors._checks import char_classes, shannon_entropy
from rules.detectors.base import Doc, Finding, RuleInfo, anchor_set, compile_re2, doc_spans

CATEGORY = "secrets"


@dataclass(frozen=True, slots=True)
class _Spec:
    """One secret rule: `pattern` is shared by the RE2 gate and the Python confirmation.

    `left`/`right` are the boundary checks RE2 cannot express: the character before/after the
    token must not be one of `*_chars` (None: no check). `value` names the group to report when
    only part of the match is the secret (the value of `password = ...`).

    `anchor` feeds the single RE2 pass over the text. It is kept short on purpose: the full
    patterns, joined, give RE2 a DFA too large to cache, and then it crawls.
    """

    name: str
    type: str
    pattern: str
    score: float = 1.0
    left: str | None = None
    right: str | None = None
    check: Callable[[str], bool] | None = None
    value: bool = False
    description: str = ""
    anchor: str = ""  # RE2 prefilter: a short, distinctive part of the token (default: pattern)
    back: int = 0  # how far before the anchor the token may start
    reach: int = 600  # how far after the anchor it may end


_WORD = "word"  # boundary: not [A-Za-z0-9_]
_TOKEN = "token"  # boundary: not [A-Za-z0-9_-]

_PLACEHOLDER = re.compile(
    r"^(?:\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{\{.*\}\}|<[^>]*>|%\(?\w*\)?s|\*+|x+|X+|\.{3,}|"
    r"(?:process\.env|os\.environ|os\.getenv|getenv|env|ENV)\b.*|"
    r"(?i:null|none|nil|true|false|undefined|changeme|change_me|password|secret|redacted|example|"
    r"your[_-]?\w*|placeholder|dummy|todo|xxx\w*))$"
)


_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _secret_value(value: str) -> bool:
    """A free-form value (after `password=`) is a secret only if it looks random enough.

    UUIDs are excluded: after a generic keyword they are far more often ids (request, session,
    tenant) than credentials; provider rules that use UUID-shaped tokens match them explicitly.
    """
    if len(value) < 6 or _PLACEHOLDER.match(value) or value.count(value[0]) == len(value):
        return False
    if _UUID.fullmatch(value):
        return False
    entropy = shannon_entropy(value)
    classes = char_classes(value)
    if len(value) >= 16:
        return entropy >= 3.0
    return entropy >= 2.5 and classes >= 2 and not value.isalpha()


def _stated_password(value: str) -> bool:
    """ "my password is X": X must look like a password, not the next word of the sentence."""
    value = value.rstrip(".,;:!?)'\"")
    return (
        len(value) >= 6
        and char_classes(value) >= 2
        and not value.isalpha()
        and shannon_entropy(value) >= 2.5
        and not _PLACEHOLDER.match(value)
    )


def _b64json(part: str) -> object:
    padded = part + "=" * (-len(part) % 4)
    try:
        raw = base64.urlsafe_b64decode(padded)
        return orjson.loads(raw)
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        return None


def _jwt(token: str) -> bool:
    """A JWT's first two segments are base64url JSON objects; the header names its algorithm."""
    parts = token.split(".")
    header = _b64json(parts[0].rstrip("="))
    if not isinstance(header, dict) or not ({"alg", "typ", "enc", "kid"} & header.keys()):
        return False
    payload = _b64json(parts[1].rstrip("=")) if len(parts) > 1 else None
    return isinstance(payload, dict) or len(parts) == 5  # JWE payloads are encrypted


def _artifactory(token: str) -> bool:
    tail = token[3:]
    return any(c.islower() or c.isdigit() for c in tail)


def _not_template(value: str) -> bool:
    return not any(t in value for t in ("${", "{{", "<%", "%s", "$("))


_SPECS: tuple[_Spec, ...] = (
    _Spec(
        "private_key",
        "PRIVATE_KEY",
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----",
        description="PEM / OpenSSH / PGP private key block",
        anchor="-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY",
        reach=25000,
    ),
    _Spec(
        "aws_access_key",
        "AWS_ACCESS_KEY",
        r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}",
        left=_WORD,
        right=_WORD,
        description="AWS access key id",
    ),
    _Spec(
        "aws_secret_key",
        "AWS_SECRET_KEY",
        r"(?i:aws)[A-Za-z0-9_.\-]{0,30}(?i:secret|private|key)[A-Za-z0-9_.\-]{0,30}[\"']?\s{0,3}"
        r"(?::=|=>|=|:)\s{0,3}[\"']?(?P<v>[A-Za-z0-9/+]{40})",
        right="b64",
        value=True,
        description="AWS secret access key assignment",
        anchor="(?i:aws)",
    ),
    _Spec(
        "gcp_api_key",
        "GCP_API_KEY",
        r"AIza[0-9A-Za-z_\-]{35}",
        left=_TOKEN,
        right=_TOKEN,
        description="Google Cloud / Firebase API key",
        anchor="AIza",
    ),
    _Spec(
        "gcp_oauth_token",
        "GCP_OAUTH_TOKEN",
        r"ya29\.[0-9A-Za-z_\-]{30,}",
        left=_TOKEN,
        description="Google OAuth access token",
        anchor="ya29\\.",
        reach=4000,
    ),
    _Spec(
        "gcp_oauth_secret",
        "GCP_OAUTH_SECRET",
        r"GOCSPX-[A-Za-z0-9_\-]{28}",
        left=_TOKEN,
        right=_TOKEN,
        description="Google OAuth client secret",
        anchor="GOCSPX-",
    ),
    _Spec(
        "gcp_service_account",
        "GCP_PRIVATE_KEY_ID",
        r"\"private_key_id\"\s*:\s*\"(?P<v>[a-f0-9]{40})\"",
        value=True,
        description="Google service-account key id",
        anchor='\\"private_key_id\\"',
    ),
    _Spec(
        "azure_storage_key",
        "AZURE_STORAGE_KEY",
        r"AccountKey=(?P<v>[A-Za-z0-9+/]{86}==)",
        value=True,
        description="Azure storage account key",
        anchor="AccountKey=",
    ),
    _Spec(
        "azure_client_secret",
        "AZURE_CLIENT_SECRET",
        r"[A-Za-z0-9_~.\-]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}",
        left=_TOKEN,
        right=_TOKEN,
        description="Azure AD / Entra client secret",
        anchor="\\dQ~",
        back=4,
    ),
    _Spec(
        "azure_sas_token",
        "AZURE_SAS_TOKEN",
        r"[?&]sig=(?P<v>[A-Za-z0-9%+/]{40,}(?:%3D|=){0,2})",
        value=True,
        description="Azure shared access signature",
        anchor="[?&]sig=",
    ),
    _Spec(
        "github_token",
        "GITHUB_TOKEN",
        r"(?:(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59})",
        left=_WORD,
        right=_WORD,
        description="GitHub personal / OAuth / app token",
        anchor="gh[pousr]_|github_pat_",
    ),
    _Spec(
        "gitlab_token",
        "GITLAB_TOKEN",
        r"(?:(?:glpat|gldt|glft|glsoat|glrt)-[A-Za-z0-9_\-]{20,50}|GR1348941[A-Za-z0-9_\-]{20,50}"
        r"|glcbt-(?:[0-9a-fA-F]{2}_)?[A-Za-z0-9_\-]{20,50}|glimt-[A-Za-z0-9_\-]{25}"
        r"|glptt-[A-Za-z0-9_\-]{40}|glagent-[A-Za-z0-9_\-]{50,}|gloas-[A-Za-z0-9_\-]{64})",
        left=_WORD,
        right=_WORD,
        description="GitLab tokens (PAT, deploy, runner, CI, trigger, OAuth)",
        anchor="gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-|GR1348941",
        reach=1200,
    ),
    _Spec(
        "slack_token",
        "SLACK_TOKEN",
        r"(?:xox[baprse]-[0-9A-Za-z\-]{10,250}|xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+)",
        left=_WORD,
        description="Slack bot / user / app token",
        anchor="xox[baprse]-|xapp-",
    ),
    _Spec(
        "slack_webhook",
        "SLACK_WEBHOOK",
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{20,}",
        description="Slack incoming webhook URL",
        anchor="hooks\\.slack\\.com/",
        back=8,
    ),
    _Spec(
        "stripe_key",
        "STRIPE_KEY",
        r"(?:sk|rk)_(?:live|test)_[0-9a-zA-Z]{24,247}",
        left=_WORD,
        right=_WORD,
        description="Stripe secret / restricted key",
        anchor="[rs]k_(?:live|test)_",
    ),
    _Spec(
        "webhook_secret",
        "WEBHOOK_SECRET",
        r"whsec_[A-Za-z0-9+/=]{24,}",
        left=_WORD,
        description="Standard Webhooks / Stripe signing secret",
        anchor="whsec_",
    ),
    _Spec(
        "openai_key",
        "OPENAI_API_KEY",
        r"sk-[A-Za-z0-9_\-]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9_\-]{20,}",
        left=_WORD,
        right=_TOKEN,
        description="OpenAI API key",
        anchor="T3BlbkFJ",
        back=200,
    ),
    _Spec(
        "anthropic_key",
        "ANTHROPIC_API_KEY",
        r"sk-ant-(?:api|admin|sid|oat)\d{2}-[A-Za-z0-9_\-]{80,}",
        left=_WORD,
        right=_TOKEN,
        description="Anthropic API key",
        anchor="sk-ant-",
    ),
    _Spec(
        "huggingface_token",
        "HUGGINGFACE_TOKEN",
        r"hf_[A-Za-z]{34}",
        left=_WORD,
        right=_WORD,
        description="Hugging Face access token",
        anchor="hf_[A-Za-z]{34}",
    ),
    _Spec(
        "npm_token",
        "NPM_TOKEN",
        r"npm_[A-Za-z0-9]{36}",
        left=_WORD,
        right=_WORD,
        description="npm token",
        anchor="npm_",
    ),
    _Spec(
        "npmrc_auth",
        "NPM_TOKEN",
        r"//[^\s/]+/:_authToken=\s*(?P<v>npm_[A-Za-z0-9_]+|[A-Fa-f0-9\-]{36})",
        value=True,
        description=".npmrc registry auth token",
        anchor="/:_authToken=",
        back=300,
    ),
    _Spec(
        "pypi_token",
        "PYPI_TOKEN",
        r"pypi-(?:AgEIcHlwaS5vcmc|AgENdGVzdC5weXBpLm9yZw)[A-Za-z0-9_\-]{70,}",
        left=_WORD,
        description="PyPI / TestPyPI upload token",
        anchor="pypi-Ag",
        reach=2000,
    ),
    _Spec(
        "twilio_key",
        "TWILIO_KEY",
        r"(?:AC|SK)[a-z0-9]{32}",
        left=_WORD,
        right=_WORD,
        description="Twilio account SID / API key",
    ),
    _Spec(
        "sendgrid_key",
        "SENDGRID_API_KEY",
        r"SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}",
        left=_WORD,
        right=_TOKEN,
        description="SendGrid API key",
        anchor="SG\\.",
    ),
    _Spec(
        "mailgun_key",
        "MAILGUN_API_KEY",
        r"key-[0-9a-f]{32}",
        left=_TOKEN,
        right=_WORD,
        description="Mailgun API key",
        anchor="key-[0-9a-f]{32}",
    ),
    _Spec(
        "mailchimp_key",
        "MAILCHIMP_API_KEY",
        r"[0-9a-f]{32}-us\d{1,2}",
        left=_WORD,
        right=_WORD,
        description="Mailchimp API key",
        anchor="[0-9a-f]{8}-us\\d",
        back=32,
    ),
    _Spec(
        "discord_token",
        "DISCORD_TOKEN",
        r"[MNO][A-Za-z0-9_\-]{23,25}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,}",
        description="Discord bot token",
        anchor="\\.[A-Za-z0-9_\\-]{6}\\.[A-Za-z0-9_\\-]{27}",
        back=26,
    ),
    _Spec(
        "discord_webhook",
        "DISCORD_WEBHOOK",
        r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_\-]{60,}",
        description="Discord webhook URL",
        anchor="discord(?:app)?\\.com/api/webhooks/",
        back=24,
    ),
    _Spec(
        "telegram_bot_token",
        "TELEGRAM_BOT_TOKEN",
        r"\d{8,10}:AA[0-9A-Za-z_\-]{33}",
        left="telegram",
        right=_TOKEN,
        description="Telegram bot token",
        anchor="\\d:AA",
        back=10,
    ),
    _Spec(
        "artifactory_token",
        "ARTIFACTORY_TOKEN",
        r"(?:AKC[a-zA-Z0-9]{10,}|AP[0-9A-F][a-zA-Z0-9]{8,})",
        left="artifactory",
        right="artifactory",
        check=_artifactory,
        description="JFrog Artifactory token",
        anchor=r"AKC[a-zA-Z0-9]{10}|AP[0-9A-F][a-zA-Z0-9]{8}",
    ),
    _Spec(
        "databricks_token",
        "DATABRICKS_TOKEN",
        r"dapi[a-h0-9]{32}",
        left=_WORD,
        right=_WORD,
        description="Databricks token",
        anchor="dapi",
    ),
    _Spec(
        "digitalocean_token",
        "DIGITALOCEAN_TOKEN",
        r"do[por]_v1_[a-f0-9]{64}",
        left=_WORD,
        right=_WORD,
        description="DigitalOcean token",
        anchor="do[por]_v1_",
    ),
    _Spec(
        "shopify_token",
        "SHOPIFY_TOKEN",
        r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",
        left=_WORD,
        right=_WORD,
        description="Shopify access token",
        anchor="shp(?:at|ca|pa|ss)_",
    ),
    _Spec(
        "square_token",
        "SQUARE_TOKEN",
        r"sq0(?:atp|csp)-[0-9A-Za-z_\-]{22,43}",
        left=_WORD,
        right=_TOKEN,
        description="Square access token / secret",
        anchor="sq0(?:atp|csp)-",
    ),
    _Spec(
        "vault_token",
        "VAULT_TOKEN",
        r"hv[sbr]\.[A-Za-z0-9_\-]{24,}",
        left=_WORD,
        right=_TOKEN,
        description="HashiCorp Vault token",
        anchor="hv[sbr]\\.",
    ),
    _Spec(
        "grafana_token",
        "GRAFANA_TOKEN",
        r"(?:glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2})",
        left=_WORD,
        description="Grafana service account / cloud token",
        anchor="glsa_|glc_",
    ),
    _Spec(
        "age_secret_key",
        "AGE_SECRET_KEY",
        r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
        description="age encryption secret key",
        anchor="AGE-SECRET-KEY-1",
    ),
    _Spec(
        "linear_key",
        "LINEAR_API_KEY",
        r"lin_api_[A-Za-z0-9]{40}",
        left=_WORD,
        right=_WORD,
        description="Linear API key",
        anchor="lin_api_",
    ),
    _Spec(
        "postman_key",
        "POSTMAN_API_KEY",
        r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}",
        left=_WORD,
        right=_WORD,
        description="Postman API key",
        anchor="PMAK-",
    ),
    _Spec(
        "jwt",
        "JWT",
        r"eyJ[A-Za-z0-9_\-]{10,}={0,2}\.[A-Za-z0-9_\-]{2,}={0,2}(?:\.[A-Za-z0-9_\-+/=]*){0,3}",
        left=_TOKEN,
        check=_jwt,
        description="JSON Web Token (header and payload decode to JSON)",
        anchor=r"eyJ[A-Za-z0-9_\-]{10,}={0,2}\.",
        reach=8000,
    ),
    _Spec(
        "url_credentials",
        "URL_CREDENTIALS",
        r"[A-Za-z][A-Za-z0-9+.\-]{1,20}://(?P<v>[^\s:/?#\[\]@'\"<>{}\\`]+:[^\s:/?#\[\]@'\"<>{}\\`]+)@"
        r"[A-Za-z0-9.\-\[\]]",
        value=True,
        check=_not_template,
        description="user:password in a URL",
        anchor=r"://[^\s:/?#@]{1,64}:[^\s/?#@]{1,128}@",
        back=24,
    ),
    _Spec(
        "auth_header",
        "BEARER_TOKEN",
        r"(?i:authorization)[\"']?\s{0,3}[:=]\s{0,3}[\"']?(?i:bearer|token|basic)\s+(?P<v>[A-Za-z0-9\-._~+/]{16,}=*)",
        value=True,
        check=_secret_value,
        description="credential in an Authorization header",
        anchor="(?i:authorization)",
    ),
    _Spec(
        "password_assignment",
        "PASSWORD",
        r"(?i:[a-z0-9_.\-]{0,30}(?:password|passwd|passphrase|pwd|secret|token|api[_\-]?key|apikey|"
        r"access[_\-]?key|auth[_\-]?key|client[_\-]?secret|private[_\-]?key|credentials?))"
        r"[\"']?\]?\s{0,3}(?::=|=>|=|:)\s{0,3}"
        r"(?P<v>\"[^\"\r\n]{4,200}\"|'[^'\r\n]{4,200}'|[^\s\"',;)}\]<>]{4,200})",
        score=0.8,
        value=True,
        check=_secret_value,
        description="password / secret / token = <high-entropy value>",
        anchor=r"(?i:password|passwd|passphrase|pwd|secret|token|api[_\-]?key|apikey|access[_\-]?key|auth[_\-]?key|"
        r"client[_\-]?secret|private[_\-]?key|credentials?)[\"']?\]?\s{0,3}(?::=|=>|=|:)",
        back=40,
    ),
    _Spec(
        "stated_password",
        "PASSWORD",
        r"(?i:password|passcode|passphrase)\s+(?i:is|was)\s*:?\s+[\"']?(?P<v>[^\s\"']{6,64})",
        score=0.7,
        value=True,
        check=_stated_password,
        description='"my password is <value>"',
        anchor="(?i:password|passcode|passphrase)\\s+(?i:is|was)",
    ),
)

RULES: tuple[RuleInfo, ...] = tuple(
    RuleInfo(f"{CATEGORY}.{s.name}", CATEGORY, s.type, f"[{s.type}]", s.description) for s in _SPECS
)

_ANCHORS = [(s.anchor or s.pattern).replace("(?P<v>", "(?:") for s in _SPECS]
_GATE = compile_re2("|".join(f"(?:{a})" for a in _ANCHORS).encode(), view=True)
#: At a gate hit, which rules' anchors match there (several may: "token" is both a generic
#: keyword and part of "_authToken").
_AT = anchor_set(_ANCHORS, view=True)
_PY = tuple(re.compile(s.pattern) for s in _SPECS)
#: For rules whose token may start before the anchor: every start from `back` before it, in order,
#: in one match call (group 1 is the token; the rule's own groups keep their names).
_BACK = {idx: re.compile(f"(?s:.{{0,{s.back}}}?)(?=({s.pattern}))") for idx, s in enumerate(_SPECS) if s.back}
_IDS = tuple(r.id for r in RULES)

#: The provider rules `_specific` tries on a value, with the characters their tokens can start
#: with (None: any), and for each ASCII character the rules that can start with it, in rule order.
_PROVIDERS = tuple((idx, first_chars(s.pattern)) for idx, s in enumerate(_SPECS) if not s.value)
_PROVIDERS_AT = {
    chr(c): tuple(idx for idx, chars in _PROVIDERS if chars is None or chr(c) in chars) for c in range(128)
}

_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_TOKEN_CHARS = _WORD_CHARS | {"-"}
_B64_CHARS = _WORD_CHARS | {"+", "/", "="}
_PEM_END = re.compile(r"-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_BODY = re.compile(r"(?:[ \t]*(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]+:[^\n]*)?\r?\n)+")


def _left_ok(kind: str | None, text: str, s: int, seg_start: int) -> bool:
    if kind is None or s == seg_start:
        return True
    prev = text[s - 1]
    if kind == _WORD:
        return prev not in _WORD_CHARS
    if kind == _TOKEN:
        return prev not in _TOKEN_CHARS
    if kind == "telegram":  # a bare token, or one in a bot API URL (".../bot<token>/...")
        return prev not in _TOKEN_CHARS or (text[max(seg_start, s - 4) : s] == "/bot")
    if kind == "artifactory":  # detect-secrets' rule: start of text, blank, "=", ":" or a quote
        return prev in " \t\r\n=:\"'"
    return True


def _right_ok(kind: str | None, text: str, e: int, seg_end: int) -> bool:
    if kind is None or e >= seg_end:
        return True
    nxt = text[e]
    if kind == _WORD:
        return nxt not in _WORD_CHARS
    if kind == _TOKEN:
        return nxt not in _TOKEN_CHARS
    if kind == "b64":
        return nxt not in _B64_CHARS
    if kind == "artifactory":
        return nxt in " \t\r\n\"'"
    return True


class SecretsDetector:
    """Finds credentials; see the module docstring."""

    category = CATEGORY

    @property
    def rules(self) -> tuple[RuleInfo, ...]:
        return RULES

    def find(self, doc: Doc) -> list[Finding]:
        out: list[Finding] = []
        text = doc.text
        taken = -1
        view = doc.view
        for gs, ge in doc_spans(_GATE, doc):
            if gs < taken:
                continue
            seg_start, seg_end = doc.bounds(gs)
            for idx in _AT.Match(view[gs : gs + 64]) or ():
                hit = self._confirm(idx, text, gs, ge, seg_start, seg_end)
                if hit is not None:
                    out.append(hit)
                    taken = hit[1]
                    break
        return out

    def _confirm(self, idx: int, text: str, gs: int, ge: int, seg_start: int, seg_end: int) -> Finding | None:
        """Run the full pattern of the rule whose anchor hit, and its boundary and value checks.

        Generic rules (an assignment, a header, a URL) hand their value to the provider rules
        first, so `key = "AKIA..."` is reported as an AWS key rather than a password.
        """
        spec = _SPECS[idx]
        hi = min(seg_end, ge + spec.reach)
        if not spec.back:  # the token starts at the anchor: one attempt there, no search ahead
            m = _PY[idx].match(text, gs, hi)
            if m is None or m.end() == gs or not _left_ok(spec.left, text, gs, seg_start):
                return None
            return self._accept(
                idx, spec, gs, m.end(), m.span("v") if spec.value else None, text, seg_start, seg_end
            )
        # The token starts at most `back` before the anchor. `_BACK` tries those starts in order,
        # in one call, instead of a search that would run on past the anchor to `hi` for nothing.
        before = _BACK[idx]
        m = before.match(text, max(seg_start, gs - spec.back), hi)
        while m is not None and m.start(1) <= gs:
            start, end = m.span(1)
            if end > start and _left_ok(spec.left, text, start, seg_start):
                v = m.span("v") if spec.value else None
                hit = self._accept(idx, spec, start, end, v, text, seg_start, seg_end)
                if hit is not None:
                    return hit
            m = before.match(text, start + 1, hi)
        return None

    def _accept(
        self,
        idx: int,
        spec: _Spec,
        start: int,
        end: int,
        v: tuple[int, int] | None,
        text: str,
        seg_start: int,
        seg_end: int,
    ) -> Finding | None:
        """Checks on a match of `spec` at text[start:end]; `v` is the span of its value group."""
        s, e = v if v is not None else (start, end)
        if spec.name == "private_key":
            e = _pem_end(text, end, seg_end)
        elif not _right_ok(spec.right, text, end, seg_end):
            return None
        value = text[s:e]
        if spec.value and len(value) >= 2 and value[0] in "\"'" and value[-1] == value[0]:
            s, e, value = s + 1, e - 1, value[1:-1]
        if spec.value:
            inner = self._specific(text, s, e, seg_start, seg_end)
            if inner is not None:
                return inner
        if spec.check is not None and not spec.check(value):
            return None
        return (s, e, _IDS[idx], spec.score)

    def _specific(self, text: str, s: int, e: int, seg_start: int, seg_end: int) -> Finding | None:
        """A provider token exactly at `text[s:]` (the value of a generic match), if any."""
        if s >= seg_end:
            return None
        first = text[s]
        candidates = _PROVIDERS_AT.get(first)
        if candidates is None:  # a character no ASCII table entry covers
            candidates = tuple(i for i, chars in _PROVIDERS if chars is None or first in chars)
        for idx in candidates:
            spec = _SPECS[idx]
            m = _PY[idx].match(text, s, seg_end)
            if m is not None and m.end() > m.start() and _left_ok(spec.left, text, s, seg_start):
                hit = self._accept(idx, spec, s, m.end(), None, text, seg_start, seg_end)
                if hit is not None:
                    return hit
        return None


def _pem_end(text: str, header_end: int, seg_end: int) -> int:
    """A key block runs to its END line, or (when truncated) over the base64 lines after BEGIN."""
    m = _PEM_END.search(text, header_end, min(seg_end, header_end + 20000))
    if m is not None:
        return m.end()
    body = _PEM_BODY.match(text, header_end, seg_end)
    return body.end() if body is not None else header_end
