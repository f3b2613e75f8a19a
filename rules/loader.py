"""Reading policies from TOML files: the engine's only I/O."""

from __future__ import annotations

import tomllib
from pathlib import Path

from rules.engine import CompiledPolicy, compile_policy
from rules.policy import PolicyError


def load_policy_file(path: str | Path) -> CompiledPolicy:
    """Compile one policy file; its name is the file stem (`default.toml` -> "default")."""
    path = Path(path)
    name = path.stem
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(name, [{"rule": str(path), "problem": f"not valid TOML: {exc}"}]) from None
    except OSError as exc:
        raise PolicyError(
            name, [{"rule": str(path), "problem": f"cannot read the file: {exc.strerror}"}]
        ) from None
    return compile_policy(data, name)


def load_policy_dir(path: str | Path) -> dict[str, CompiledPolicy]:
    """Compile every `*.toml` policy in a directory, keyed by file stem.

    All files are checked before failing, so one error report covers the whole directory.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise PolicyError(directory.name, [{"rule": str(directory), "problem": "not a directory"}])
    policies: dict[str, CompiledPolicy] = {}
    problems: list[dict[str, str]] = []
    for file in sorted(directory.glob("*.toml")):
        try:
            policies[file.stem] = load_policy_file(file)
        except PolicyError as exc:
            problems += [{"rule": f"{file.stem}: {e['rule']}", "problem": e["problem"]} for e in exc.errors]
    if problems:
        raise PolicyError(directory.name, problems)
    return policies
