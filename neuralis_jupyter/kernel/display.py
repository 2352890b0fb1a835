"""How a turn shows itself in a notebook: the seam between the chat controller and the cards.

:class:`TurnDisplay` receives every runtime event and also answers approvals and questions (the
widgets are the approver and the answerer). :class:`MarkdownDisplay` is the plain implementation: one
Markdown output updated in place, readable in any frontend and in a saved notebook. The widget cards
(:class:`neuralis_jupyter.kernel.cards.CardDisplay`) implement the same protocol.

The controller builds a display as ``factory(display_id=..., conversation=..., live=...)``; ``live`` is
false in a headless run, where nobody sees a widget or clicks one.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..policy import ApproverAnswer
    from ..runtime.events import TurnSettled
    from ..store.interactions import PendingInteraction

__all__ = ["MarkdownDisplay", "TurnDisplay"]


class TurnDisplay(Protocol):
    def handle(self, event: Any) -> None:
        """A runtime event (including sub-agent events and background reports). Events keep coming
        after :meth:`finish`: a background report and the turn it continues, after the cell ended."""
        ...

    async def ask(self, interaction: PendingInteraction) -> ApproverAnswer | None:
        """Approve or deny a tool call (the policy engine's Approver)."""
        ...

    async def answer(
        self, *, question: str, options: list[dict[str, Any]], multiple: bool, tool_use_id: str
    ) -> list[str] | None:
        """Answer an ask_question call (the tools' Answerer)."""
        ...

    def finish(self, settled: TurnSettled | None) -> None:
        """The turn ended: show the footer and leave static output behind."""
        ...


class MarkdownDisplay:
    """A text-only display: the answer and one line per tool call, in one Markdown output."""

    def __init__(self, display_id: str, conversation: Any = None, *, live: bool = True) -> None:
        from IPython.display import display

        self._id = display_id
        self._text: list[str] = []
        self._tools: dict[str, str] = {}
        display(self._bundle(), raw=True, display_id=display_id)

    def _markdown(self) -> str:
        lines = list(self._tools.values())
        body = "".join(self._text)
        return "\n".join([*lines, "", body]).strip()

    def _bundle(self) -> dict[str, str]:
        md = self._markdown()
        return {"text/markdown": md, "text/plain": md}

    def _update(self) -> None:
        from IPython.display import update_display

        update_display(self._bundle(), raw=True, display_id=self._id)

    def handle(self, event: Any) -> None:
        kind = getattr(event, "type", None)
        if kind == "text_delta":
            self._text.append(event.text)
        elif kind == "tool_call_started":
            self._tools[event.tool_use_id] = f"- `{event.name}` {json.dumps(dict(event.input))[:80]} …"
        elif kind == "tool_call_finished":
            mark = "✓" if not event.is_error else f"⛔ {event.outcome}"
            self._tools[event.tool_use_id] = f"- `{event.name}` {mark}"
        else:
            return
        self._update()

    async def ask(self, interaction: Any) -> Any:
        return None

    async def answer(self, **_: Any) -> list[str] | None:
        return None

    def finish(self, settled: Any) -> None:
        if settled is not None and settled.status != "completed":
            self._text.append(f"\n\n*Turn {settled.status}: {settled.reason or ''}*")
        self._update()
