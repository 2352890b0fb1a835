"""``contracts/`` holds pure decisions: stdlib and sibling imports only, and nothing that does I/O.

DESIGN.md keeps the dependencies one-way: every other layer may import the contracts, the contracts
import nothing else of the package, so a decision can be tested (and trusted) without a data root.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import neuralis_jupyter.contracts as contracts_package

CONTRACTS = Path(contracts_package.__file__).parent
SOURCES = sorted(CONTRACTS.glob("*.py"))

#: Standard-library modules that reach files, processes, sockets or the interpreter's import machinery.
IO_MODULES = frozenset(
    {
        "asyncio",
        "ctypes",
        "fcntl",
        "glob",
        "http",
        "importlib",
        "io",
        "mmap",
        "multiprocessing",
        "os",
        "pathlib",
        "select",
        "selectors",
        "shutil",
        "socket",
        "sqlite3",
        "ssl",
        "subprocess",
        "tempfile",
        "urllib",
    }
)
#: Builtins that open files, read input or import or run code by name.
IO_BUILTINS = frozenset({"open", "input", "exec", "eval", "compile", "__import__", "breakpoint"})


def impurities(source: str, siblings: set[str]) -> list[str]:
    """Every import or call in ``source`` that a contracts module may not make."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.extend(_absolute(alias.name, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.extend(_absolute(node.module or "", node.lineno))
            elif node.level > 1:
                found.append(f"line {node.lineno}: imports outside contracts (from {'.' * node.level})")
            else:
                targets = [node.module] if node.module else [a.name for a in node.names]
                for target in targets:
                    if target.split(".")[0] not in siblings:
                        found.append(f"line {node.lineno}: imports .{target}, not a contracts module")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IO_BUILTINS:
            found.append(f"line {node.lineno}: calls {node.func.id}()")
    return found


def _absolute(module: str, lineno: int) -> list[str]:
    top = module.split(".")[0]
    if top == "__future__":
        return []
    if top not in sys.stdlib_module_names:
        return [f"line {lineno}: imports {module}, which is not the standard library"]
    if top in IO_MODULES:
        return [f"line {lineno}: imports {module}, an I/O module"]
    return []


SIBLINGS = {p.stem for p in SOURCES}


def test_the_contracts_package_has_modules_to_check():
    assert {"identity", "access", "agent_access"} <= SIBLINGS


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_a_contracts_module_imports_only_the_stdlib_and_its_siblings_and_does_no_io(path):
    assert impurities(path.read_text(encoding="utf-8"), SIBLINGS) == []


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("import os", "I/O module"),
        ("import os.path as p", "I/O module"),
        ("from pathlib import Path", "I/O module"),
        ("import sqlite3", "I/O module"),
        ("from socket import socket", "I/O module"),
        ("import subprocess", "I/O module"),
        ("from io import StringIO", "I/O module"),
        ("import shutil", "I/O module"),
        ("def f():\n    import tempfile", "I/O module"),  # a lazy import is still an import
        ("import sqlalchemy", "not the standard library"),
        ("from neuralis_jupyter.store import Store", "not the standard library"),
        ("from ..store import Store", "outside contracts"),
        ("from .frames import usage", "not a contracts module"),
        ("from . import nothing_here", "not a contracts module"),
        ("text = open('x').read()", "calls open()"),
        ("mod = __import__('os')", "calls __import__()"),
    ],
)
def test_the_checker_catches_each_kind_of_impurity(source, fragment):
    problems = impurities(source, SIBLINGS)
    assert len(problems) == 1
    assert fragment in problems[0]


def test_the_checker_lets_pure_code_through():
    source = (
        "from __future__ import annotations\n"
        "from dataclasses import dataclass\n"
        "from collections.abc import Mapping\n"
        "from .identity import SessionContext\n"
        "from . import access\n"
    )
    assert impurities(source, SIBLINGS) == []
