"""The package-format JSON schemas, loaded on first use (never at import).

``jsonschema`` itself is imported on first use too (through :mod:`neuralis_jupyter._jsonschema`, which
skips its costly optional IRI grammar): code that only reads a loaded package set should not pay for it.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

__all__ = ["check_json_schema", "describe_errors", "load_schema", "validator"]

SchemaName = Literal["manifest", "tool"]


@cache
def load_schema(name: SchemaName) -> dict[str, Any]:
    """The parsed ``<name>.schema.json`` shipped next to this module."""
    text = resources.files(__package__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def validator(name: SchemaName) -> Draft202012Validator:
    from .._jsonschema import jsonschema

    Draft202012Validator = jsonschema().Draft202012Validator

    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def describe_errors(name: SchemaName, instance: object) -> str | None:
    """A one-line description of the most relevant schema violation, or None when ``instance`` is valid."""
    from .._jsonschema import jsonschema

    best_match = jsonschema().exceptions.best_match

    error = best_match(validator(name).iter_errors(instance))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return f"{where}: {message}"


def check_json_schema(schema: object) -> str | None:
    """None when ``schema`` is a valid Draft 2020-12 schema, else a one-line reason."""
    from .._jsonschema import jsonschema

    Draft202012Validator = jsonschema().Draft202012Validator
    SchemaError = jsonschema().exceptions.SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        return f"{where}: {exc.message}"
    return None
