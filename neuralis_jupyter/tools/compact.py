"""``compact_history``: an in-place, reversible, non-destructive trim of what the model is shown.

Storage design
--------------
``messages.jsonl`` is never rewritten and the conversation is never forked. The model's
``compact_history`` tool_use, persisted by the runtime in its assistant row, is the record of the call.
Its instructions are also kept in ``meta.json["compaction"] = {"entries": [Instruction, ...]}``, one
entry per target (a later action on a target replaces the earlier one), so that re-applying them at
every prompt build and the user's toggle (``meta.json["compaction_mode"]``: ``"apply"``, the default, or
``"show_full"``) need no transcript parse.

Applying
--------
:func:`apply_compaction` is a pure rows-to-rows transform: a tool output named by its ``tool_use_id``
gets a small marker (remove), the summary note (summarize) or its first ``max_chars`` plus a marker
(truncate) in place of its content; a whole user, assistant or event row named by ``#seq`` has its text
replaced the same way (an assistant row keeps its tool calls). In ``show_full`` it is the identity.

:class:`CompactionView` is the ``HistoryTransform`` the host puts on ``TurnRequest.history``. It is
loaded from meta once at turn start (:func:`history_transform`), called synchronously by the runtime on
the rows before every model request, and updated in-process by the tool handler, so the next step of the
same turn already sees a compaction made in this one. A mode flipped by another process while a turn
runs applies from that conversation's next turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict, cast

from ..runtime import ToolContext, ToolOutput
from ..store.conversations import Conversation, Row, utcnow_iso
from .environment import ToolEnvironment

__all__ = [
    "COMPACTION_KEY",
    "CompactionView",
    "Instruction",
    "apply_compaction",
    "handlers",
    "history_transform",
    "set_compaction_mode",
]

COMPACTION_KEY = "compaction"
Action = Literal["remove", "summarize", "truncate"]
Mode = Literal["apply", "show_full"]
_MODES = ("apply", "show_full")


class Target(TypedDict, total=False):
    tool_use_id: str
    message_seq: int


class Instruction(TypedDict):
    """One stored trim; ``by`` is the compact_history call that asked for it."""

    target: Target
    action: Action
    summary: NotRequired[str]
    max_chars: NotRequired[int]
    by: NotRequired[str]
    at: NotRequired[str]
    reason: NotRequired[str]


def _label(target: Mapping[str, Any]) -> str:
    return f"⟦{target['tool_use_id']}⟧" if "tool_use_id" in target else f"#{target['message_seq']}"


def _trim(text: str, instruction: Mapping[str, Any]) -> str:
    action = instruction["action"]
    if action == "remove":
        return f"[removed by compact_history: {len(text)} chars]"
    if action == "summarize":
        return f"[summarized by compact_history] {instruction.get('summary', '')}"
    keep = int(instruction.get("max_chars", 0))
    if len(text) <= keep:
        return text
    return f"{text[:keep]}\n[truncated by compact_history: kept {keep} of {len(text)} chars]"


def _texts(content: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indexes of the blocks of a row whose text the model reads."""
    return [
        i for i, b in enumerate(content) if b.get("type") != "tool_use" and isinstance(b.get("text"), str)
    ]


def _trim_row(content: list[dict[str, Any]], instruction: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A whole row's text as one: the first text block carries the trimmed text, later ones go."""
    indexes = _texts(content)
    if not indexes:
        return content
    text = _trim("\n".join(content[i]["text"] for i in indexes), instruction)
    out = []
    for i, block in enumerate(content):
        if i == indexes[0]:
            out.append({**block, "text": text})
        elif i not in indexes:
            out.append(block)
    return out


def apply_compaction(
    rows: Sequence[Row], instructions: Sequence[Instruction], *, mode: Mode = "apply"
) -> list[Row]:
    """The rows as the model is shown them; never changes ``rows`` or anything they hold."""
    if mode == "show_full" or not instructions:
        return list(rows)
    outputs: dict[str, Instruction] = {}
    whole: dict[int, Instruction] = {}
    for instruction in instructions:
        target = instruction["target"]
        if "tool_use_id" in target:
            outputs[target["tool_use_id"]] = instruction
        elif "message_seq" in target:
            whole[target["message_seq"]] = instruction
    shown: list[Row] = []
    for row in rows:
        content = row.get("content", [])
        if row.get("role") == "tool" and any(b.get("tool_use_id") in outputs for b in content):
            blocks = [
                {**b, "content": _trim(_as_text(b.get("content", "")), outputs[b["tool_use_id"]])}
                if b.get("tool_use_id") in outputs
                else b
                for b in content
            ]
            row = cast(Row, {**row, "content": blocks})
        elif row.get("role") != "tool" and row.get("seq") in whole:
            row = cast(Row, {**row, "content": _trim_row(content, whole[row["seq"]])})
        shown.append(row)
    return shown


def _as_text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


class CompactionView:
    """The conversation's compaction as a ``HistoryTransform`` (see the module docstring)."""

    def __init__(
        self, conversation: Conversation, *, entries: Sequence[Instruction] = (), mode: Mode = "apply"
    ) -> None:
        self.conversation = conversation
        self.entries: list[Instruction] = list(entries)
        self.mode: Mode = mode

    @classmethod
    def load(cls, conversation: Conversation) -> CompactionView:
        """Read the instructions and the mode from meta.json. Blocking."""
        meta = cast(dict[str, Any], conversation.read_meta())
        entries = (meta.get(COMPACTION_KEY) or {}).get("entries") or []
        return cls(conversation, entries=entries, mode=meta.get("compaction_mode") or "apply")

    def __call__(self, rows: list[Row]) -> list[Row]:
        return apply_compaction(rows, self.entries, mode=self.mode)


async def history_transform(conversation: Conversation) -> CompactionView:
    """The transform for one turn's ``TurnRequest.history``, loaded at turn start."""
    return await asyncio.to_thread(CompactionView.load, conversation)


def set_compaction_mode(conversation: Conversation, mode: Mode) -> None:
    """The user's "Show full" / "Apply" toggle; messages.jsonl is not touched. Blocking."""
    if mode not in _MODES:
        raise ValueError(f"compaction mode must be 'apply' or 'show_full', got {mode!r}")

    def change(meta: Any) -> None:
        meta["compaction_mode"] = mode

    conversation.update_meta(change)


def _problems(rows: Sequence[Row], actions: Sequence[Mapping[str, Any]]) -> list[str]:
    """Everything wrong with the call's actions, against the conversation as it is on disk."""
    outputs = {
        b.get("tool_use_id")
        for r in rows
        if r.get("role") == "tool"
        for b in r.get("content", [])
        if b.get("type") == "tool_result"
    }
    by_seq = {r["seq"]: r for r in rows}
    problems = []
    for action in actions:
        target, label = action["target"], _label(action["target"])
        if action["action"] == "summarize" and not action.get("summary"):
            problems.append(f"summarize {label} needs a summary")
        if action["action"] == "truncate" and not action.get("max_chars"):
            problems.append(f"truncate {label} needs max_chars")
        if "tool_use_id" in target:
            if target["tool_use_id"] not in outputs:
                problems.append(f"no tool output {label} in this conversation")
            continue
        row = by_seq.get(target["message_seq"])
        if row is None:
            problems.append(f"no row {label} in this conversation")
        elif row.get("role") == "tool":
            ids = ", ".join(f"⟦{b.get('tool_use_id')}⟧" for b in row.get("content", []))
            problems.append(f"{label} holds tool outputs; target them by tool_use_id ({ids})")
        elif not _texts(row.get("content", [])):
            problems.append(f"{label} has no text to compact")
    return problems


def _record(conversation: Conversation, new: list[Instruction]) -> list[Instruction]:
    """Merge ``new`` into meta.json's instructions (a target's newest action wins). Blocking."""
    stored: list[Instruction] = []

    def change(meta: Any) -> None:
        section = meta.get(COMPACTION_KEY) or {}
        replaced = {_label(i["target"]) for i in new}
        kept = [i for i in section.get("entries") or [] if _label(i["target"]) not in replaced]
        stored.extend([*kept, *new])
        meta[COMPACTION_KEY] = {**section, "entries": stored}

    conversation.update_meta(change)
    return stored


def _words(instruction: Instruction) -> str:
    if instruction["action"] == "truncate":
        return f"truncated to {instruction.get('max_chars')} chars"
    return {"remove": "removed", "summarize": "summarized"}[instruction["action"]]


def handlers(env: ToolEnvironment) -> dict[str, Any]:
    async def compact_history(args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        conversation = ctx.request.conversation
        actions = args["actions"]
        problems = _problems(await asyncio.to_thread(conversation.read_all), actions)
        if problems:
            return ToolOutput(
                content="compact_history refused, nothing was compacted: " + "; ".join(problems),
                is_error=True,
                outcome="error",
            )
        extra = {"by": ctx.session.tool_use_id or "", "at": utcnow_iso()}
        if args.get("reason"):
            extra["reason"] = args["reason"]
        new = [
            cast(
                Instruction,
                {**{k: a[k] for k in ("target", "action", "summary", "max_chars") if k in a}, **extra},
            )
            for a in actions
        ]
        entries = await asyncio.to_thread(_record, conversation, new)
        view = ctx.request.history
        if isinstance(view, CompactionView) and view.conversation.path == conversation.path:
            view.entries = entries  # the next step of this turn already shows the trim
        done = ", ".join(f"{_label(i['target'])} ({_words(i)})" for i in new)
        return ToolOutput(
            content=f"success: compacted {done}. The transcript keeps the originals; the user can show them.",
            data={"compacted": new},
        )

    return {"compact_history": compact_history}
