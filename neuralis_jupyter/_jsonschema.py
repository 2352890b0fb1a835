"""jsonschema without its optional IRI grammar.

jsonschema's format checkers import ``rfc3987_syntax`` when it is installed, which builds some 40 Earley
parsers at import: most of a second, paid by the kernel's first chat cell and by ``neuralis run`` (nbformat
imports jsonschema too), and more again when they are collected at exit. Nothing here checks the ``iri``
format, the only thing that module serves.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from types import ModuleType

__all__ = ["jsonschema", "skip_iri_grammar"]


@contextlib.contextmanager
def skip_iri_grammar() -> Iterator[None]:
    """Import jsonschema (directly, or through nbformat/nbclient) inside this block without
    ``rfc3987_syntax``. Only jsonschema's ``iri`` format check is lost; the module stays importable."""
    if "jsonschema" in sys.modules or "rfc3987_syntax" in sys.modules:
        yield
        return
    sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # an import of it now raises ImportError
    try:
        yield
    finally:
        if sys.modules.get("rfc3987_syntax", False) is None:
            del sys.modules["rfc3987_syntax"]


def jsonschema() -> ModuleType:
    """The jsonschema module, imported the cheap way the first time."""
    module = sys.modules.get("jsonschema")
    if module is None:
        with skip_iri_grammar():
            import jsonschema as module
    return module
