"""Bounded tool results (seed 001, item 6).

A tool result the model reads is at most :data:`RESULT_CAP_BYTES` of UTF-8. A larger one is kept whole
in the conversation's ``results/<tool_use_id>.txt`` and the model gets its head plus a note naming
``read_tool_result``, an intrinsic tool that pages through the stored text by character offset.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .tools import AGENT_CORE_ID, Tool, ToolOutput

__all__ = ["RESULT_CAP_BYTES", "BoundedResult", "ResultStore", "read_tool_result_tool"]

RESULT_CAP_BYTES = 20 * 1024
_SAFE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_NOTE_ROOM = 400  # bytes kept free in the preview for the paging note


@dataclass(frozen=True, kw_only=True)
class BoundedResult:
    content: str
    #: The full size in characters when the result was offloaded, else None.
    full_size: int | None = None


def _head(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding fits ``max_bytes``."""
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    return encoded[:max_bytes].decode("utf-8", errors="ignore")


class ResultStore:
    """Full tool results of one conversation, by tool_use id."""

    def __init__(self, conversation_dir: Path, *, cap_bytes: int = RESULT_CAP_BYTES) -> None:
        self.dir = conversation_dir / "results"
        self.cap_bytes = cap_bytes

    def _path(self, tool_use_id: str) -> Path:
        if not _SAFE.fullmatch(tool_use_id):
            raise ValueError(f"{tool_use_id!r} is not a tool result id")
        return self.dir / f"{tool_use_id}.txt"

    def fits(self, content: str) -> bool:
        """Whether ``content`` is under the cap (UTF-8 takes at most 4 bytes a character)."""
        return len(content) * 4 <= self.cap_bytes or len(content.encode("utf-8")) <= self.cap_bytes

    def bound(self, tool_use_id: str, content: str) -> BoundedResult:
        if self.fits(content):
            return BoundedResult(content=content)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._path(tool_use_id).write_text(content, encoding="utf-8")
        head = _head(content, self.cap_bytes - _NOTE_ROOM)
        note = (
            f"\n\n[Result truncated: {len(content):,} characters in all, the first {len(head):,} shown. "
            f'Read the rest with read_tool_result(id="{tool_use_id}", offset={len(head)}).]'
        )
        return BoundedResult(content=head + note, full_size=len(content))

    def read(self, tool_use_id: str, offset: int = 0, limit: int | None = None) -> str:
        try:
            text = self._path(tool_use_id).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise LookupError(
                f"no stored result {tool_use_id!r}: only results that were truncated are stored"
            ) from None
        if offset < 0 or offset > len(text):
            raise ValueError(f"offset must be between 0 and {len(text)}, got {offset}")
        end = len(text) if limit is None else min(len(text), offset + max(0, limit))
        page = _head(text[offset:end], self.cap_bytes - _NOTE_ROOM)
        stop = offset + len(page)
        if stop < len(text):
            page += (
                f"\n\n[Characters {offset:,}-{stop:,} of {len(text):,}. "
                f'Continue with read_tool_result(id="{tool_use_id}", offset={stop}).]'
            )
        else:
            page += f"\n\n[End of result: characters {offset:,}-{stop:,} of {len(text):,}.]"
        return page


_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The tool_use id named in the truncation note."},
        "offset": {"type": "integer", "minimum": 0, "default": 0},
        "limit": {"type": "integer", "minimum": 1, "description": "Characters to read."},
    },
    "required": ["id"],
    "additionalProperties": False,
}


async def _read(input: dict[str, Any], ctx: Any) -> ToolOutput:
    try:
        text = await asyncio.to_thread(
            ctx.results.read, input["id"], input.get("offset", 0), input.get("limit")
        )
    except (LookupError, ValueError) as exc:
        return ToolOutput(content=str(exc), is_error=True, outcome="error")
    return ToolOutput(content=text)


def read_tool_result_tool() -> Tool:
    return Tool(
        name="read_tool_result",
        description="Page through a tool result that was too large to show whole.",
        input_schema=_SCHEMA,
        handler=_read,
        access="read",
        package_id=AGENT_CORE_ID,
        intrinsic=True,
        attested=True,
    )
