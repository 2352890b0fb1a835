"""Between transcript rows on disk and the messages a model is sent.

Rows are written as they happen. The results of one step's parallel tool calls share ONE row: the
first result appends it, every later one re-appends the merged row under the same ``seq``. A history
that ends with tool calls nobody answered (a crash, a stop) gets a synthetic refusal for each, so the
next request is always well-formed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..contracts import refusals
from ..providers.base import Message, ToolResultBlock
from ..store.conversations import Conversation, Row

__all__ = ["HistoryTransform", "ToolRowWriter", "TurnTranscript", "history_messages"]

#: A hook that rewrites rows before they become messages (compaction re-applies itself here).
HistoryTransform = Callable[[list[Row]], list[Row]]


def _event_text(block: Mapping[str, Any]) -> str | None:
    """Events the model should read, as text; ``None`` for purely informational events."""
    if block.get("type") in ("background_report", "delegate_report", "inbox_message", "handoff"):
        body = block.get("text", "")
        return f"<{block['type']}>\n{body}\n</{block['type']}>"
    return None


def history_messages(rows: Iterable[Row]) -> list[Message]:
    """Turn transcript rows into alternating user/assistant messages."""
    messages: list[Message] = []
    pending: dict[str, str] = {}  # tool_use id -> name, awaiting a result

    def push(role: str, blocks: list[Any]) -> None:
        if not blocks:
            return
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": list(blocks)})  # type: ignore[typeddict-item]

    def close_pending() -> None:
        if pending:
            push("user", [_missing(tid, name) for tid, name in pending.items()])
            pending.clear()

    for row in rows:
        role = row.get("role")
        content = row.get("content", [])
        if role == "assistant":
            close_pending()
            blocks = []
            for b in content:
                if b.get("type") == "text" and b.get("text"):
                    blocks.append({"type": "text", "text": b["text"]})
                elif b.get("type") == "tool_use":
                    blocks.append({"type": "tool_use", "id": b["id"], "name": b["name"], "input": b["input"]})
                    pending[b["id"]] = b["name"]
            push("assistant", blocks)
        elif role == "tool":
            results = []
            for b in content:
                if b.get("type") == "tool_result" and b.get("tool_use_id") in pending:
                    pending.pop(b["tool_use_id"])
                    results.append(
                        {
                            "type": "tool_result",
                            "tool_use_id": b["tool_use_id"],
                            "content": b.get("content", ""),
                            "is_error": bool(b.get("is_error")),
                        }
                    )
            push("user", results)
        elif role == "user":
            close_pending()
            push("user", [{"type": "text", "text": b["text"]} for b in content if b.get("type") == "text"])
        elif role == "event":
            texts = [t for b in content if (t := _event_text(b))]
            if texts:
                close_pending()
                push("user", [{"type": "text", "text": t} for t in texts])
    close_pending()
    return messages


def _missing(tool_use_id: str, name: str) -> ToolResultBlock:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": refusals.stopped(name),
        "is_error": True,
    }


class TurnTranscript:
    """The conversation as one turn sees it: read once when the turn starts, then kept in memory as
    the turn writes its own rows (so a step costs no file read). Rows other processes append while the
    turn runs are seen by the next turn.

    A row is appended inline when the conversation's lock is free (a few tens of microseconds of local
    file I/O, cheaper than a thread hop) and from a worker thread when another writer holds it, so the
    event loop never waits on another process.
    """

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self._rows: dict[int, Row] = {}

    async def load(self) -> None:
        rows = await asyncio.to_thread(self.conversation.read_all)
        self._rows = {r["seq"]: r for r in rows}

    def rows(self) -> list[Row]:
        return [self._rows[s] for s in sorted(self._rows)]

    def remember(self, seq: int, row: dict[str, Any]) -> None:
        self._rows[seq] = {**row, "seq": seq}  # type: ignore[typeddict-item]

    async def append(self, row: dict[str, Any]) -> int:
        try:
            seq = self.conversation.append(row, wait=False)
        except BlockingIOError:
            seq = await asyncio.to_thread(self.conversation.append, row)
        self.remember(seq, row)
        return seq

    async def replace(self, seq: int, row: dict[str, Any]) -> None:
        try:
            self.conversation.replace(seq, row, wait=False)
        except BlockingIOError:
            await asyncio.to_thread(self.conversation.replace, seq, row)
        self.remember(seq, row)


class ToolRowWriter:
    """Collects one step's tool results into a single row that keeps its seq."""

    def __init__(self, transcript: TurnTranscript, *, step: int, request_id: str, order: list[str]) -> None:
        self._transcript = transcript
        self._base: dict[str, Any] = {"role": "tool", "step": step, "request_id": request_id}
        self._order = order
        self._blocks: dict[str, dict[str, Any]] = {}
        self._seq: int | None = None
        self._lock = asyncio.Lock()

    @property
    def seq(self) -> int | None:
        return self._seq

    async def add(self, block: dict[str, Any]) -> int:
        async with self._lock:
            self._blocks[block["tool_use_id"]] = block
            ordered = [self._blocks[i] for i in self._order if i in self._blocks]
            row = {**self._base, "content": ordered}
            if self._seq is None:
                self._seq = await self._transcript.append(row)
            else:
                await self._transcript.replace(self._seq, row)
            return self._seq


def input_summary(value: Mapping[str, Any], limit: int = 120) -> str:
    """A one-line summary of a tool input for cards and logs."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"
