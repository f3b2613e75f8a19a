"""`gateway serve|worker|keys|filter|verify`.

Each subcommand lives in its own module exposing `configure(parser)` and `run(args) -> int`, imported
only when that subcommand runs, so `gateway filter` starts without loading the server.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence

_EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE

# name -> (module, configure function, run function, help)
_COMMANDS: dict[str, tuple[str, str, str, str]] = {
    "serve": (
        "gateway.serve_cli",
        "configure",
        "run",
        "run the API, the workers and the sweeper in one process",
    ),
    "worker": (
        "gateway.serve_cli",
        "configure_worker",
        "run_worker",
        "run workers and the sweeper only, beside an API elsewhere",
    ),
    "keys": ("gateway.keys_cli", "configure", "run", "manage API keys"),
    "filter": (
        "gateway.filter_cli",
        "configure",
        "run",
        "run the rule engine on text, print the verdict as JSON",
    ),
    "verify": ("gateway.verify_cli", "configure", "run", "check a webhook's Standard Webhooks signature"),
}


def _build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description="LLM webhook and content-filter gateway")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = argv[0] if argv else None
    for name, (module, configure, runner, help_text) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module, _runner=runner)
        if name == wanted:  # only the chosen command's module is imported
            getattr(importlib.import_module(module), configure)(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser(args_list)
    args = parser.parse_args(args_list)
    try:
        code: int = getattr(importlib.import_module(args._module), args._runner)(args)
    except BrokenPipeError:
        # whoever reads our output went away (`gateway filter --jsonl < big.jsonl | head -1`):
        # stop quietly, as `cat` does, with the status a shell gives for SIGPIPE; what is still
        # buffered for standard output goes nowhere instead of failing again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _EXIT_BROKEN_PIPE
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
