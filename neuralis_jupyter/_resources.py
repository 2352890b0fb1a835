"""Where the builtin package folders are, installed or in a source checkout."""

from __future__ import annotations

from pathlib import Path

__all__ = ["builtin_package_dir"]

_HERE = Path(__file__).resolve().parent


def builtin_package_dir(name: str) -> Path:
    """The folder of builtin package ``name`` (e.g. ``agent-core``).

    A wheel carries it under ``neuralis_jupyter/_builtin/``; an editable install reads the repository's
    ``packages/`` folder directly.
    """
    for candidate in (_HERE / "_builtin" / name, _HERE.parent / "packages" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"builtin package {name!r} is missing from this installation; reinstall neuralis-jupyter"
    )
