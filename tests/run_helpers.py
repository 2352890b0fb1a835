"""Helpers for the ``neuralis run`` tests: run the command, and normalise executed notebooks.

Two runs of the same notebook differ only in values that are new each run: ids (conversations,
requests, displays, widget models), timestamps, durations, memory addresses and the run's temporary
paths. :func:`normalised_outputs` replaces those with placeholders, so the rest must be equal.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # ISO 8601 and pandas timestamps: 2026-11-29T21:08:26.242Z, 2026-11-29 21:08:26.242567+00:00
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?"), "<timestamp>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    # our ids: c-<16 hex> conversations, r-<16 hex> requests, nrs-<12 hex> displays, ...
    (re.compile(r"\b[a-z]{1,5}-[0-9a-f]{12,32}\b"), "<id>"),
    (re.compile(r"\b(?:toolu|call|msg)_[A-Za-z0-9]{16,}\b"), "<tool_use_id>"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "<hex>"),
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "<address>"),
    # durations: "4 ms", "1.2 s", "duration_ms": 17
    (re.compile(r"\b\d+(?:[.,]\d+)?\s?(?:ms|s)\b"), "<duration>"),
    (re.compile(r'("duration_ms"\s*:\s*)\d+'), r"\1<duration>"),
)


def normalise_text(text: str, paths: Iterable[str | Path] = ()) -> str:
    """``text`` with the run-specific values replaced by placeholders (longest paths first)."""
    for path in sorted((str(p) for p in paths), key=len, reverse=True):
        text = text.replace(path, "<path>")
    for pattern, placeholder in _PATTERNS:
        text = pattern.sub(placeholder, text)
    return text


def _outputs(cell: Any) -> list[dict[str, Any]]:
    outputs = []
    for output in cell.get("outputs", []):
        output = dict(output)
        output.pop("transient", None)
        outputs.append(output)
    return outputs


def normalised_outputs(notebook: Path, paths: Iterable[str | Path] = ()) -> list[dict[str, Any]]:
    """One entry per cell: its source, execution count and normalised outputs."""
    nb = nbformat.read(notebook, as_version=4)
    cells = [
        {"source": c.source, "execution_count": c.get("execution_count"), "outputs": _outputs(c)}
        for c in nb.cells
    ]
    return json.loads(normalise_text(json.dumps(cells, ensure_ascii=False, sort_keys=True), list(paths)))


@dataclass(frozen=True, kw_only=True)
class Ran:
    """One ``neuralis run``: its exit status, stderr, and the executed notebook."""

    returncode: int
    stderr: str
    output: Path

    def said(self, prefix: str) -> list[str]:
        """The stderr lines that start with ``neuralis run: <prefix>``, prefix removed."""
        head = f"neuralis run: {prefix}"
        return [line.removeprefix(head).strip() for line in self.stderr.splitlines() if line.startswith(head)]


def neuralis_run(
    notebook: Path,
    *args: str,
    home: Path,
    output: Path,
    env: dict[str, str] | None = None,
    clear_env: bool = False,
    timeout: float = 120,
) -> Ran:
    """``neuralis run NOTEBOOK -o OUTPUT --home HOME ARGS`` in a subprocess (this interpreter), in this
    environment updated with ``env`` (or in ``env`` alone with ``clear_env``)."""
    command: Sequence[str] = [
        sys.executable, "-m", "neuralis_jupyter.cli", "run", str(notebook), "-o", str(output),
        "--home", str(home), *args,
    ]  # fmt: skip
    done = subprocess.run(
        command,
        env=dict(env or {}) if clear_env else {**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Ran(returncode=done.returncode, stderr=done.stderr, output=output)


def assert_same_outputs(first: Path, second: Path, paths: Iterable[str | Path] = ()) -> None:
    """The two executed notebooks have equal normalised outputs; else fail with a unified diff."""
    import difflib

    paths = list(paths)
    a, b = (
        json.dumps(normalised_outputs(nb, paths), indent=1, ensure_ascii=False).replace("\\n", "\n")
        for nb in (first, second)
    )
    if a != b:
        diff = difflib.unified_diff(a.splitlines(), b.splitlines(), str(first), str(second), lineterm="", n=2)
        raise AssertionError("the normalised outputs differ:\n" + "\n".join(diff))
