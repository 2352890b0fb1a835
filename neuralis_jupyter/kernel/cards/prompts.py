"""Cards that wait for the person at the notebook: an approval (Approve / Deny) and an ask_question.

A button's callback only resolves the card's :class:`Pending` answer. Callbacks may run on another
thread (a comm message routed to a kernel subshell), so the future is set through
``loop.call_soon_threadsafe``; everything else (disabling the buttons, showing the decision) happens
on the turn's side once the awaited answer arrives, with the cell's output context.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .base import Card
from .render import (
    Badge,
    Tone,
    badge_html,
    code_block,
    details_html,
    esc,
    inline_code,
    input_summary,
    pre,
    pretty_json,
)

if TYPE_CHECKING:
    from ...store.interactions import PendingInteraction

__all__ = ["ApprovalCard", "Pending", "PromptCard", "QuestionCard", "why_asked"]

T = TypeVar("T")

_WAITING = Badge(icon="✋", label="waiting for you", tone="wait")


class Pending(Generic[T]):
    """An answer that a widget callback on any thread may give, once."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.future: asyncio.Future[T] = self._loop.create_future()

    def resolve(self, value: T) -> None:
        self._loop.call_soon_threadsafe(self._set, value)

    def _set(self, value: T) -> None:
        if not self.future.done():
            self.future.set_result(value)


class PromptCard(Card, Generic[T]):
    def __init__(self, *, display_id: str, live: bool) -> None:
        super().__init__(display_id=display_id, live=live)
        self.pending: Pending[T] = Pending()
        self.badge = _WAITING
        self._inputs: list[Any] = []

    def settle(self, badge: Badge) -> None:
        """The question is closed (answered, timed out, withdrawn): no more clicks."""
        self.badge = badge
        for widget in self._inputs:
            widget.disabled = True

    def tone(self) -> Tone:
        return self.badge.tone


class ApprovalCard(PromptCard[bool]):
    """Approve or deny one tool call; only its stored input can ever run."""

    kind = "approval"

    def __init__(
        self,
        *,
        display_id: str,
        live: bool,
        tool: str,
        input: Mapping[str, Any],
        why: str,
        interaction_id: str,
    ) -> None:
        super().__init__(display_id=display_id, live=live)
        self.tool = tool
        self.input = dict(input)
        self.why = why
        self.interaction_id = interaction_id

    def controls(self, widgets: Any) -> list[Any]:
        approve = widgets.Button(description="Approve", button_style="success", icon="check")
        deny = widgets.Button(description="Deny", button_style="danger", icon="times")
        approve.on_click(lambda _: self.pending.resolve(True))
        deny.on_click(lambda _: self.pending.resolve(False))
        self._inputs = [approve, deny]
        return [widgets.HBox([approve, deny])]

    def markdown(self) -> str:
        return "\n".join(
            [
                f"**✋ Approve {self.tool}?** {inline_code(input_summary(self.input))} — {self.badge.text}",
                "",
                f"*{self.why}* (interaction `{self.interaction_id}`)",
                "",
                code_block(pretty_json(self.input), lang="json"),
            ]
        )

    def plain(self) -> str:
        return f"[approval] {self.tool} {input_summary(self.input)} — {self.badge.text}\n{self.why}"

    def body_html(self) -> str:
        return (
            f"<div><b>✋ Approve {esc(self.tool)}?</b> <code>{esc(input_summary(self.input))}</code> — "
            f"{badge_html(self.badge)}</div>"
            f"<div><i>{esc(self.why)}</i> <small>(interaction {esc(self.interaction_id)})</small></div>"
            + details_html("Input", pre(pretty_json(self.input)), open_=True)
        )


class QuestionCard(PromptCard[list[str]]):
    """ask_question: a button per option; several options → toggles and Submit; none → a text box."""

    kind = "question"

    def __init__(
        self,
        *,
        display_id: str,
        live: bool,
        question: str,
        options: Sequence[Mapping[str, Any]],
        multiple: bool,
    ) -> None:
        super().__init__(display_id=display_id, live=live)
        self.question = question
        self.options = [dict(o) for o in options]
        self.multiple = multiple
        self.answer: list[str] | None = None

    def controls(self, widgets: Any) -> list[Any]:
        if self.options and not self.multiple:
            buttons = []
            for option in self.options:
                button = widgets.Button(description=str(option.get("label", option["id"])))
                button.tooltip = str(option.get("description") or "")
                button.on_click(lambda _, ident=str(option["id"]): self.pending.resolve([ident]))
                buttons.append(button)
            self._inputs = buttons
            return [widgets.HBox(buttons)]
        submit = widgets.Button(description="Submit", button_style="primary")
        if self.options:
            toggles = [
                widgets.ToggleButton(
                    description=str(o.get("label", o["id"])), tooltip=str(o.get("description") or "")
                )
                for o in self.options
            ]
            ids = [str(o["id"]) for o in self.options]
            submit.on_click(
                lambda _: self.pending.resolve([i for i, t in zip(ids, toggles, strict=True) if t.value])
            )
            self._inputs = [*toggles, submit]
            return [widgets.HBox(toggles), submit]
        text = widgets.Text(placeholder="Your answer")
        submit.on_click(lambda _: self.pending.resolve([text.value]) if text.value.strip() else None)
        self._inputs = [text, submit]
        return [widgets.HBox([text, submit])]

    def _labels(self) -> str:
        if not self.answer:
            return ""
        by_id = {str(o["id"]): str(o.get("label", o["id"])) for o in self.options}
        return ", ".join(by_id.get(a, a) for a in self.answer)

    def markdown(self) -> str:
        lines = [f"**❓ {self.question}** — {self.badge.text}"]
        if self.options:
            lines += [""] + [
                f"- {o.get('label', o['id'])}" + (f" — {o['description']}" if o.get("description") else "")
                for o in self.options
            ]
        if self.answer:
            lines += ["", f"Answer: **{self._labels()}**"]
        return "\n".join(lines)

    def plain(self) -> str:
        answer = f"\nAnswer: {self._labels()}" if self.answer else ""
        return f"[question] {self.question} — {self.badge.text}{answer}"

    def body_html(self) -> str:
        body = f"<div><b>❓ {esc(self.question)}</b> — {badge_html(self.badge)}</div>"
        if self.answer:
            body += f"<div>Answer: <b>{esc(self._labels())}</b></div>"
        elif self.options and not self.live:
            body += (
                "<ul>" + "".join(f"<li>{esc(o.get('label', o['id']))}</li>" for o in self.options) + "</ul>"
            )
        return body


def why_asked(interaction: PendingInteraction) -> str:
    """Who asked for the approval, in words (the engine's own reason is not stored on the row)."""
    asked_by = interaction.asked_by
    if asked_by.startswith("hook:"):
        return f"hook {asked_by.removeprefix('hook:')!r} asks for approval"
    profile = interaction.guard_profile or asked_by.removeprefix("guard:")
    return f"the {profile!r} guard asks before this call"
