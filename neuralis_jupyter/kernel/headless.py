"""Answers for turns nobody can click through: given on the command line, or recorded in the cassette.

A headless kernel (``NEURALIS_HEADLESS=1``, as ``neuralis run`` starts it) never waits for a widget.
An approval the guard profile asks for is answered, in this order:

1. replaying a cassette: the answer recorded for that ``tool_use_id``;
2. recording (or live): an answer given to ``neuralis run --answer`` (passed to the kernel as the JSON
   list ``NEURALIS_ANSWERS``), by ``tool_use_id`` first, then by tool name; it is written to the
   cassette as an ``answer`` line, so the replay answers the same call the same way;
3. otherwise :class:`~neuralis_jupyter.policy.HeadlessApprover` refuses, naming the guard profile.

Questions (``ask_question``) work the same way with ``--answer question=TEXT`` (every question) or
``--answer question:TOOL_USE_ID=TEXT`` (one call); for a question with options, ``TEXT`` is a
comma-separated list of option ids. Without any question answer the kernel has no answerer at all, so
the tool takes the question's default or refuses, as in any headless run. With some, a question none
of them matches ends unanswered, and that outcome is recorded too (``null``), so that record and
replay see the same tool result.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..policy.approval import ApproverAnswer, HeadlessApprover

if TYPE_CHECKING:
    from ..policy.approval import Approver
    from ..providers.cassette import Cassette
    from ..store.interactions import PendingInteraction

__all__ = [
    "ANSWERS_ENV",
    "GivenAnswers",
    "RecordedAnswerer",
    "RecordedApprover",
    "headless_answerers",
    "parse_answers",
]

log = logging.getLogger(__name__)

#: The kernel's environment variable holding ``neuralis run --answer`` values (a JSON list of strings).
ANSWERS_ENV = "NEURALIS_ANSWERS"
#: What a headless notebook's author can change when the guard asks.
NOTEBOOK_REMEDY = (
    "set %guard auto in the notebook, or approve the call while recording: neuralis run --record "
    "--answer TOOL=approve"
)
#: Who approved, in the audit trail and on the card, when an answer came from ``--answer``.
GIVEN_BY = "neuralis run --answer"
_QUESTION = "question"


@dataclass(frozen=True, kw_only=True)
class GivenAnswers:
    """Answers given up front. Approvals by tool_use_id or tool name; questions by tool_use_id, or
    ``"question"`` for any."""

    approvals: Mapping[str, bool] = field(default_factory=dict)
    questions: Mapping[str, str] = field(default_factory=dict)

    def approval(self, tool_use_id: str | None, tool_name: str) -> bool | None:
        if tool_use_id and tool_use_id in self.approvals:
            return self.approvals[tool_use_id]
        return self.approvals.get(tool_name)

    def question(self, tool_use_id: str) -> str | None:
        return self.questions.get(tool_use_id, self.questions.get(_QUESTION))


def parse_answers(items: Sequence[str]) -> GivenAnswers:
    """``["python=approve", "question=yes", "question:toolu_1=a,b"]`` -> :class:`GivenAnswers`.

    Raises ValueError, naming the bad item, for anything else.
    """
    approvals: dict[str, bool] = {}
    questions: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--answer {item!r}: write KEY=VALUE, e.g. python=approve or question=yes")
        if key == _QUESTION:
            questions[_QUESTION] = value
        elif key.startswith(_QUESTION + ":"):
            questions[key.removeprefix(_QUESTION + ":")] = value
        elif value.strip() in ("approve", "deny"):
            approvals[key] = value.strip() == "approve"
        else:
            raise ValueError(
                f"--answer {item!r}: an approval is approve or deny; a question's answer is written "
                "question=TEXT or question:TOOL_USE_ID=TEXT"
            )
    return GivenAnswers(approvals=approvals, questions=questions)


def given_from_env() -> GivenAnswers:
    raw = os.environ.get(ANSWERS_ENV)
    if not raw:
        return GivenAnswers()
    items = json.loads(raw)
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ValueError(f"{ANSWERS_ENV} must be a JSON list of KEY=VALUE strings, got {raw!r}")
    return parse_answers(items)


def _replaying(cassette: Cassette | None) -> bool:
    return cassette is not None and cassette.mode == "replay"


def _same_call(doc: Mapping[str, Any], interaction: PendingInteraction) -> bool:
    return doc.get("tool") == interaction.tool_name and doc.get("input_hash") == interaction.input_hash


class RecordedApprover:
    """The approver of a headless turn (see the module docstring for the order of answers)."""

    def __init__(self, *, given: GivenAnswers, cassette: Cassette | None, fallback: Approver | None = None):
        self._given = given
        self._cassette = cassette
        self._fallback = fallback or HeadlessApprover(remedy=NOTEBOOK_REMEDY)

    async def ask(self, interaction: PendingInteraction) -> ApproverAnswer | None:
        key = f"approval:{interaction.tool_use_id}"
        if _replaying(self._cassette):
            assert self._cassette is not None
            doc = self._cassette.recorded_answer(key)
            if doc is None or not _same_call(doc, interaction):
                # An approval is bound to the call it was given for: the tool and the hash of the
                # validated input. A cassette cannot approve a different call that reuses the id.
                if doc is not None:
                    log.warning(
                        "the recorded approval of %s is for another call; not used", interaction.tool_use_id
                    )
                return await self._fallback.ask(interaction)
            return ApproverAnswer(
                approve=bool(doc.get("approve")), by=str(doc.get("by") or GIVEN_BY), reason=doc.get("reason")
            )
        approve = self._given.approval(interaction.tool_use_id, interaction.tool_name)
        if approve is None:
            return await self._fallback.ask(interaction)
        reason = None if approve else f"denied by {GIVEN_BY}"
        if self._cassette is not None:
            self._cassette.record_answer(
                key,
                {
                    "approve": approve,
                    "by": GIVEN_BY,
                    "reason": reason,
                    "tool": interaction.tool_name,
                    "input_hash": interaction.input_hash,
                },
            )
        return ApproverAnswer(approve=approve, by=GIVEN_BY, reason=reason)


class RecordedAnswerer:
    """The answerer of a headless turn with question answers (given, or on the cassette)."""

    def __init__(self, *, given: GivenAnswers, cassette: Cassette | None) -> None:
        self._given = given
        self._cassette = cassette

    async def ask(
        self, *, question: str, options: list[dict[str, Any]], multiple: bool, tool_use_id: str
    ) -> list[str] | None:
        key = f"question:{tool_use_id}"
        if _replaying(self._cassette):
            assert self._cassette is not None
            doc = self._cassette.recorded_answer(key) or {}
            answer = doc.get("answer")
            return [str(a) for a in answer] if isinstance(answer, list) else None
        text = self._given.question(tool_use_id)
        chosen: list[str] | None = None
        if text is not None:
            chosen = [part.strip() for part in text.split(",") if part.strip()] if options else [text]
        if self._cassette is not None:
            self._cassette.record_answer(key, {"answer": chosen})
        return chosen or None


def headless_answerers(cassette: Cassette | None) -> tuple[RecordedApprover, RecordedAnswerer | None]:
    """The approver and the answerer (``None``: nobody answers questions) for one headless turn."""
    given = given_from_env()
    approver = RecordedApprover(given=given, cassette=cassette)
    if _replaying(cassette):
        assert cassette is not None
        has_questions = any(k.startswith(_QUESTION + ":") for k in cassette.answer_keys)
    else:
        has_questions = bool(given.questions)
    return approver, (RecordedAnswerer(given=given, cassette=cassette) if has_questions else None)
