"""A deliberately minimal frontmatter parser for package markdown files.

A file may open with a block between two ``---`` lines. Inside it, each entry is one of::

    key: value                # a string; "quoted" (with \" escapes) or 'quoted' ('' escapes) values
    key: [a, "b c", d]        # a flat list of strings; [] is the empty list
    key:                      # followed by "- item" lines: a flat list
      - a
      - b

Nothing else is YAML here: a nested mapping (``requires:`` with indented keys, or ``{...}``) and block
scalars (``|``, ``>``) are unsupported; they produce a warning and the key is ignored, so the
author learns the flat form (``requiredFeatures: [a, b]``). A key with no value and no items reads as
the empty string, which list-valued keys refuse: "remove the key" and "an empty list" are different
statements (``allowed-tools`` depends on it). Blank lines and ``#`` comment lines are skipped; there
are no inline comments. A malformed line or a duplicate key is a :class:`FrontmatterError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import FrontmatterError

__all__ = ["FieldValue", "Frontmatter", "parse_frontmatter"]

FieldValue = str | tuple[str, ...]

_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*:(?:\s+(.*))?$")
_BLOCK_SCALARS = frozenset({"|", ">", "|-", ">-", "|+", ">+"})


@dataclass(frozen=True, kw_only=True)
class Frontmatter:
    fields: Mapping[str, FieldValue] = field(default_factory=dict)
    body: str
    #: True when the file opened with a frontmatter block.
    present: bool = False
    warnings: tuple[str, ...] = ()


def parse_frontmatter(text: str, *, source: str) -> Frontmatter:
    """Split ``text`` into frontmatter fields and body; ``source`` names the file in messages.

    The body is everything after the closing ``---`` line, minus leading blank lines.
    """
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    lines = text.split("\n")
    if lines[0].rstrip() != "---":
        return Frontmatter(body=text)
    try:
        close = next(i for i in range(1, len(lines)) if lines[i].rstrip() == "---")
    except StopIteration:
        raise FrontmatterError(
            f"{source}: the frontmatter opened on line 1 is never closed by '---'"
        ) from None
    parser = _BlockParser(source)
    for number, line in enumerate(lines[1:close], start=2):
        parser.feed(number, line)
    parser.finish()
    body = "\n".join(lines[close + 1 :]).lstrip("\n")
    return Frontmatter(fields=parser.fields, body=body, present=True, warnings=tuple(parser.warnings))


class _BlockParser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.fields: dict[str, FieldValue] = {}
        self.warnings: list[str] = []
        self._seen: set[str] = set()
        # The key whose value is still open (written as "key:" with nothing after it).
        self._open: str | None = None
        self._items: list[str] = []
        self._nested = False

    def feed(self, number: int, line: str) -> None:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            return
        if stripped == "-" or stripped.startswith("- "):
            if self._open is None:
                raise self._error(number, "a '- item' line belongs under a 'key:' line")
            if not self._nested:
                self._items.append(_scalar(stripped[1:].strip()))
            return
        if line[0] in " \t":
            if self._open is None or self._items:
                raise self._error(number, "unexpected indentation")
            self._nested = True
            return
        match = _KEY.match(stripped)
        if match is None:
            raise self._error(number, "expected 'key: value'")
        self.finish()
        key, value = match.group(1), (match.group(2) or "").strip()
        if key in self._seen:
            raise self._error(number, f"key {key!r} appears twice")
        self._seen.add(key)
        if not value:
            self._open = key
        elif value.startswith("["):
            try:
                self.fields[key] = _flow_list(value)
            except ValueError as exc:
                raise self._error(number, str(exc)) from None
        elif value.startswith("{") or value in _BLOCK_SCALARS:
            # Swallow any indented continuation; finish() reports the key once.
            self._open, self._nested = key, True
        else:
            self.fields[key] = _scalar(value)

    def finish(self) -> None:
        """Close the open key, if any."""
        key = self._open
        if key is None:
            return
        if self._nested:
            self._unsupported(key)
        elif self._items:
            self.fields[key] = tuple(self._items)
        else:
            self.fields[key] = ""
        self._open, self._items, self._nested = None, [], False

    def _unsupported(self, key: str) -> None:
        self.warnings.append(
            f"{self.source}: {key!r} uses a nested or multi-line form the frontmatter parser does not "
            f"support; it is ignored (write flat values, e.g. requiredFeatures: [a, b])"
        )

    def _error(self, number: int, why: str) -> FrontmatterError:
        return FrontmatterError(f"{self.source}: frontmatter line {number}: {why}")


def _scalar(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        inner = value[1:-1]
        if value[0] == "'":
            return inner.replace("''", "'")
        return inner.replace('\\"', '"').replace("\\\\", "\\")
    return value


_ITEM = re.compile(r"""\s*("(?:[^"\\]|\\.)*"|'[^']*'|[^,"'\[\]{}]*?)\s*(,|$)""")


def _flow_list(value: str) -> tuple[str, ...]:
    """The items of a one-line ``[a, "b", 'c']`` list; raises ValueError with the reason."""
    if not value.endswith("]"):
        raise ValueError("a '[' list must end with ']' on the same line")
    inner = value[1:-1].strip()
    if not inner:
        return ()
    items: list[str] = []
    pos = 0
    while pos < len(inner):
        match = _ITEM.match(inner, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"cannot read the list {value!r}; lists are flat: [a, b]")
        if not match.group(1):
            raise ValueError(f"the list {value!r} has an empty item")
        items.append(_scalar(match.group(1)))
        pos = match.end()
        if match.group(2) == "," and pos >= len(inner):
            raise ValueError(f"the list {value!r} ends with a comma")
    return tuple(items)
