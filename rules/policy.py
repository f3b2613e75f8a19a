"""The policy format and its validation.

A policy is a mapping (parsed TOML, or the same shape as JSON from the API) with one rule set per
direction:

    description = "..."                       # optional
    [inbound]
    packs = ["pii", "secrets", "prompt_injection", "unicode", "custom"]
    [inbound.actions]                         # per category or per rule id
    pii = "redact"
    "pii.ip_address" = "flag"
    [inbound.prompt_injection]
    threshold = 0.8
    [inbound.pii]
    phone_regions = ["US", "GB"]
    [[inbound.custom]]
    id = "custom.competitors"
    keywords = ["acme", "globex"]
    action = "block"
    [outbound]
    packs = ["pii", "secrets"]

Validation collects every problem before failing, and each problem names the rule (or the path of
the setting) it concerns, so a tenant can fix a policy in one round trip.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rules.detectors import injection, pii, secrets, unicode
from rules.detectors.base import RuleInfo
from rules.detectors.custom import CustomPatternError, CustomRule, compile_regex
from rules.model import ACTIONS, DIRECTIONS

PACKS: tuple[str, ...] = ("pii", "secrets", "prompt_injection", "unicode", "custom")

#: What a category does when the policy says nothing about it.
DEFAULT_ACTIONS: dict[str, str] = {
    "pii": "redact",
    "secrets": "redact",
    "prompt_injection": "block",
    "unicode": "strip",
    "custom": "flag",
}
DEFAULT_THRESHOLD = 0.8

BUILTIN_RULES: dict[str, tuple[RuleInfo, ...]] = {
    "pii": pii.RULES,
    "secrets": secrets.RULES,
    "prompt_injection": injection.RULES,
    "unicode": unicode.RULES,
}

_TOP_KEYS = ("description", "inbound", "outbound")
_SET_KEYS = ("packs", "actions", "prompt_injection", "pii", "custom", "description")
_CUSTOM_KEYS = (
    "id",
    "keywords",
    "regex",
    "action",
    "placeholder",
    "case_sensitive",
    "whole_word",
    "description",
)
_CUSTOM_ID = re.compile(r"custom\.[a-z0-9][a-z0-9_.\-]{0,62}")
_PLACEHOLDER_MAX = 64


class PolicyError(ValueError):
    """A policy that cannot be used. `errors` lists {"rule": ..., "problem": ...} dicts."""

    def __init__(self, name: str, errors: Sequence[Mapping[str, str]]) -> None:
        self.name = name
        self.errors: list[dict[str, str]] = [{"rule": e["rule"], "problem": e["problem"]} for e in errors]
        super().__init__(str(self))

    def __str__(self) -> str:
        lines = [f"policy {self.name!r} is invalid:"]
        lines += [f"  - {e['rule']}: {e['problem']}" for e in self.errors]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class RuleSetSpec:
    """A validated rule set for one direction: everything the engine needs to compile it."""

    packs: tuple[str, ...] = ()
    actions: Mapping[str, str] = field(default_factory=dict)
    custom: tuple[CustomRule, ...] = ()
    custom_actions: Mapping[str, str] = field(default_factory=dict)
    threshold: float = DEFAULT_THRESHOLD
    phone_regions: tuple[str, ...] = pii.DEFAULT_PHONE_REGIONS

    def action_for(self, rule: RuleInfo) -> str:
        """Rule override, then the custom rule's own action, then the category, then the default."""
        if rule.id in self.actions:
            return self.actions[rule.id]
        if rule.id in self.custom_actions:
            return self.custom_actions[rule.id]
        return self.actions.get(rule.category, DEFAULT_ACTIONS[rule.category])


@dataclass(frozen=True, slots=True)
class PolicySpec:
    name: str
    description: str
    rule_sets: Mapping[str, RuleSetSpec]


class _Errors:
    def __init__(self) -> None:
        self.items: list[dict[str, str]] = []

    def add(self, rule: str, problem: str) -> None:
        self.items.append({"rule": rule, "problem": problem})


def _type_name(value: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list"}.get(
        type(value), "a table" if isinstance(value, Mapping) else type(value).__name__
    )


def _unknown_keys(data: Mapping[str, Any], allowed: Sequence[str], path: str, errors: _Errors) -> None:
    for key in data:
        if key not in allowed:
            hint = difflib.get_close_matches(str(key), allowed, n=1)
            also = f"; did you mean {hint[0]!r}?" if hint else f" (expected one of: {', '.join(allowed)})"
            errors.add(f"{path}.{key}" if path else str(key), f"unknown key {key!r}{also}")


def parse_policy(data: Mapping[str, Any], name: str = "default") -> PolicySpec:
    """Validate a policy mapping; raise PolicyError listing every problem."""
    errors = _Errors()
    if not isinstance(data, Mapping):
        raise PolicyError(
            name, [{"rule": "policy", "problem": f"a policy must be a table, not {_type_name(data)}"}]
        )
    _unknown_keys(data, _TOP_KEYS, "", errors)
    description = data.get("description", "")
    if not isinstance(description, str):
        errors.add("description", f"must be a string, not {_type_name(description)}")
        description = ""
    sets: dict[str, RuleSetSpec] = {}
    for direction in DIRECTIONS:
        raw = data.get(direction, {})
        if not isinstance(raw, Mapping):
            errors.add(direction, f"must be a table, not {_type_name(raw)}")
            raw = {}
        sets[direction] = _parse_rule_set(raw, direction, errors)
    if errors.items:
        raise PolicyError(name, errors.items)
    return PolicySpec(name=name, description=description, rule_sets=sets)


def _parse_rule_set(raw: Mapping[str, Any], direction: str, errors: _Errors) -> RuleSetSpec:
    _unknown_keys(raw, _SET_KEYS, direction, errors)
    if "description" in raw and not isinstance(raw["description"], str):
        errors.add(f"{direction}.description", "must be a string")
    packs = _parse_packs(raw.get("packs", []), direction, errors)
    custom, custom_actions = _parse_custom(raw.get("custom", []), direction, errors)
    known: dict[str, RuleInfo] = {}
    for pack in packs:
        for info in BUILTIN_RULES.get(pack, ()):
            known[info.id] = info
    for rule in custom:
        known[rule.id] = RuleInfo(rule.id, "custom", rule.type, rule.placeholder, rule.description)
    actions = _parse_actions(raw.get("actions", {}), direction, packs, custom, known, errors)
    threshold = _parse_injection(raw.get("prompt_injection", {}), direction, packs, errors)
    regions = _parse_pii(raw.get("pii", {}), direction, packs, errors)
    return RuleSetSpec(
        packs=packs,
        actions=actions,
        custom=custom,
        custom_actions=custom_actions,
        threshold=threshold,
        phone_regions=regions,
    )


def _parse_packs(value: object, direction: str, errors: _Errors) -> tuple[str, ...]:
    path = f"{direction}.packs"
    if not isinstance(value, list):
        errors.add(path, f"must be a list of pack names ({', '.join(PACKS)}), not {_type_name(value)}")
        return ()
    packs: list[str] = []
    for i, pack in enumerate(value):
        if not isinstance(pack, str):
            errors.add(f"{path}[{i}]", f"must be a pack name, not {_type_name(pack)}")
        elif pack not in PACKS:
            hint = difflib.get_close_matches(pack, PACKS, n=1)
            also = f"; did you mean {hint[0]!r}?" if hint else f" (known packs: {', '.join(PACKS)})"
            errors.add(pack, f"unknown pack {pack!r} in {path}{also}")
        elif pack in packs:
            errors.add(pack, f"pack {pack!r} is listed twice in {path}")
        else:
            packs.append(pack)
    return tuple(packs)


def _parse_actions(
    value: object,
    direction: str,
    packs: tuple[str, ...],
    custom: tuple[CustomRule, ...],
    known: Mapping[str, RuleInfo],
    errors: _Errors,
) -> dict[str, str]:
    path = f"{direction}.actions"
    if not isinstance(value, Mapping):
        errors.add(path, f"must be a table of category or rule id = action, not {_type_name(value)}")
        return {}
    actions: dict[str, str] = {}
    for key, action in value.items():
        key = str(key)
        if not isinstance(action, str) or action not in ACTIONS:
            errors.add(key, f"action must be one of {', '.join(ACTIONS)}, not {action!r} (in {path})")
            continue
        if key in PACKS:
            if key not in packs and not (key == "custom" and custom):
                errors.add(key, f"sets an action for pack {key!r}, which {direction}.packs does not enable")
                continue
        elif key not in known:
            category = key.split(".", 1)[0]
            if category in BUILTIN_RULES and category not in packs:
                errors.add(key, f"rule of pack {category!r}, which {direction}.packs does not enable")
                continue
            candidates = [*known, *PACKS]
            hint = difflib.get_close_matches(key, candidates, n=1)
            also = f"; did you mean {hint[0]!r}?" if hint else ""
            errors.add(key, f"unknown rule or category in {path}{also}")
            continue
        actions[key] = action
    return actions


def _parse_injection(value: object, direction: str, packs: tuple[str, ...], errors: _Errors) -> float:
    path = f"{direction}.prompt_injection"
    if not isinstance(value, Mapping):
        errors.add(path, f"must be a table, not {_type_name(value)}")
        return DEFAULT_THRESHOLD
    _unknown_keys(value, ("threshold",), path, errors)
    if value and "prompt_injection" not in packs:
        errors.add(path, f"configures pack 'prompt_injection', which {direction}.packs does not enable")
    threshold = value.get("threshold", DEFAULT_THRESHOLD)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold <= 1:
        errors.add(f"{path}.threshold", f"must be a number in (0, 1], not {threshold!r}")
        return DEFAULT_THRESHOLD
    return float(threshold)


def _parse_pii(value: object, direction: str, packs: tuple[str, ...], errors: _Errors) -> tuple[str, ...]:
    path = f"{direction}.pii"
    if not isinstance(value, Mapping):
        errors.add(path, f"must be a table, not {_type_name(value)}")
        return pii.DEFAULT_PHONE_REGIONS
    _unknown_keys(value, ("phone_regions",), path, errors)
    if value and "pii" not in packs:
        errors.add(path, f"configures pack 'pii', which {direction}.packs does not enable")
    regions = value.get("phone_regions", list(pii.DEFAULT_PHONE_REGIONS))
    if not isinstance(regions, list) or not all(isinstance(r, str) for r in regions):
        errors.add(f"{path}.phone_regions", 'must be a list of region codes such as "US" or "GB"')
        return pii.DEFAULT_PHONE_REGIONS
    import phonenumbers

    bad = [r for r in regions if r.upper() not in phonenumbers.SUPPORTED_REGIONS]
    if bad:
        errors.add(f"{path}.phone_regions", f"unknown region code(s): {', '.join(bad)}")
    return tuple(r.upper() for r in regions if r.upper() in phonenumbers.SUPPORTED_REGIONS)


def _parse_custom(
    value: object, direction: str, errors: _Errors
) -> tuple[tuple[CustomRule, ...], dict[str, str]]:
    path = f"{direction}.custom"
    if not isinstance(value, list):
        errors.add(path, f"must be a list of tables ([[{path}]]), not {_type_name(value)}")
        return (), {}
    rules: list[CustomRule] = []
    own_actions: dict[str, str] = {}
    seen: set[str] = set()
    for i, raw in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(raw, Mapping):
            errors.add(where, f"must be a table, not {_type_name(raw)}")
            continue
        rule_id = raw.get("id")
        if not isinstance(rule_id, str) or not rule_id:
            errors.add(where, 'needs an id such as "custom.competitors"')
            continue
        label = rule_id
        before = len(errors.items)
        _unknown_keys(raw, _CUSTOM_KEYS, label, errors)
        if not _CUSTOM_ID.fullmatch(rule_id):
            errors.add(label, 'id must look like "custom.<name>" (lower-case letters, digits, _ . -)')
        if rule_id in seen:
            errors.add(label, f"duplicate rule id in {path}")
        seen.add(rule_id)
        keywords = raw.get("keywords")
        regex = raw.get("regex")
        if (keywords is None) == (regex is None):
            errors.add(label, "needs exactly one of keywords (a list) or regex (a string)")
        case_sensitive = raw.get("case_sensitive", False)
        whole_word = raw.get("whole_word", True)
        for key, flag in (("case_sensitive", case_sensitive), ("whole_word", whole_word)):
            if not isinstance(flag, bool):
                errors.add(label, f"{key} must be true or false, not {flag!r}")
        words: tuple[str, ...] = ()
        if keywords is not None:
            words = _parse_keywords(keywords, label, errors)
        if isinstance(regex, str):
            if not regex:
                errors.add(label, "regex is empty")
            else:
                try:
                    compile_regex(regex, bool(case_sensitive))
                except CustomPatternError as exc:
                    errors.add(label, f"regex {regex!r}: {exc}")
        elif regex is not None:
            errors.add(label, f"regex must be a string, not {_type_name(regex)}")
        action = raw.get("action")
        if action is not None and (not isinstance(action, str) or action not in ACTIONS):
            errors.add(label, f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
        kind = rule_id.split(".", 1)[-1].upper().replace(".", "_").replace("-", "_")
        placeholder = raw.get("placeholder", f"[{kind}]")
        if not isinstance(placeholder, str) or len(placeholder) > _PLACEHOLDER_MAX:
            errors.add(label, f"placeholder must be a string of at most {_PLACEHOLDER_MAX} characters")
        description = raw.get("description", "")
        if not isinstance(description, str):
            errors.add(label, "description must be a string")
        if len(errors.items) > before:
            continue
        rules.append(
            CustomRule(
                id=rule_id,
                placeholder=placeholder,
                keywords=words,
                regex=regex if isinstance(regex, str) else None,
                case_sensitive=bool(case_sensitive),
                whole_word=bool(whole_word),
                description=description,
            )
        )
        if isinstance(action, str):
            own_actions[rule_id] = action
    return tuple(rules), own_actions


def _parse_keywords(value: object, label: str, errors: _Errors) -> tuple[str, ...]:
    if not isinstance(value, list):
        errors.add(label, f"keywords must be a list of strings, not {_type_name(value)}")
        return ()
    if not value:
        errors.add(label, "keywords is empty; give at least one term")
        return ()
    words: list[str] = []
    for j, kw in enumerate(value):
        if not isinstance(kw, str):
            errors.add(label, f"keywords[{j}] must be a string, not {_type_name(kw)}")
        elif not kw.strip():
            errors.add(label, f"keywords[{j}] is blank")
        else:
            words.append(kw.strip())
    return tuple(dict.fromkeys(words))
