"""The ``neuralis`` command. Each subcommand lives in its own module and registers itself here."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

__all__ = ["main"]

#: subcommand -> module defining ``register(subparsers)``; the module is imported only when needed.
SUBCOMMANDS: dict[str, str] = {
    "doctor": "neuralis_jupyter.cli.doctor",
    "chat": "neuralis_jupyter.cli.chat",
    "kernel": "neuralis_jupyter.cli.kernel",
    "run": "neuralis_jupyter.cli.run",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neuralis", description="Neuralis for Jupyter: LLM agents that live in notebooks."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS.values():
        importlib.import_module(module).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
