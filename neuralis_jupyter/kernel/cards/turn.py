"""``CardDisplay``: a turn shown as cards, one notebook output per card, in the order they appear.

It receives every runtime event (:meth:`CardDisplay.handle`), is the turn's approver
(:meth:`CardDisplay.ask`) and the ask_question answerer (:meth:`CardDisplay.answer`), and at the end
(:meth:`CardDisplay.finish`) adds the footer and freezes every card to its static bundle.

Updates are coalesced: a card's output is rewritten at most every ``interval`` seconds (the first
change after a quiet period goes out at once, later ones ride one ``loop.call_later`` timer that the
display owns and cancels), so a long stream does not flood the comm or the notebook.

After :meth:`finish`, events still arrive: a background shell's report and the turn it continues run
after the cell went idle. The report updates the card of the call that started the work (by
``update_display``, which reaches an output of an idle cell), and the continuation's text is written
into that same card.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from .answer import AnswerCard
from .base import Card
from .prompts import ApprovalCard, PromptCard, QuestionCard, why_asked
from .render import Badge
from .session import FooterCard, SessionCard, SubagentCard
from .tool import ToolCard

if TYPE_CHECKING:
    from ...policy.approval import ApproverAnswer
    from ...runtime.events import TurnSettled, UsageUpdated
    from ...store.interactions import PendingInteraction

__all__ = ["CardDisplay"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Cards waiting for a background report, by shell id or sub-agent run id; the oldest are forgotten.
_AWAITING_REPORTS: OrderedDict[str, ToolCard] = OrderedDict()
_MAX_AWAITING = 256

_NO_ANSWER = Badge(icon="⌛", label="no answer in time", tone="withheld")
_WITHDRAWN = Badge(icon="⏹", label="closed without an answer", tone="withheld")


class CardDisplay:
    """The widget implementation of :class:`~neuralis_jupyter.kernel.display.TurnDisplay`.

    ``live=False`` (a headless run) creates no widget and never waits for a click: every card is its
    static bundle from the start, and :meth:`ask` / :meth:`answer` return ``None`` at once.
    ``wait_timeout`` bounds any wait for a click (the policy engine and ask_question bring shorter ones).
    """

    def __init__(
        self,
        display_id: str,
        conversation: Any = None,
        *,
        live: bool = True,
        wait_timeout: float = 3600.0,
        interval: float = 0.1,
    ) -> None:
        self.display_id = display_id
        self._conversation = conversation
        self._live = live
        self._wait_timeout = wait_timeout
        self._interval = interval
        self._cards: list[Card] = []
        self._tools: dict[str, ToolCard] = {}
        self._subagents: dict[str, SubagentCard] = {}
        self._answer: AnswerCard | None = None
        self._session: SessionCard | None = None
        self._usage: dict[tuple[str, str], UsageUpdated] = {}
        self._settled: TurnSettled | None = None
        self._rate_waits = 0.0
        self._step: tuple[int | None, int | None] = (None, None)
        self._started = time.monotonic()
        self._finished = False
        self._follow: ToolCard | None = None
        self._dirty: dict[int, Card] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._last_flush = 0.0

    @property
    def cards(self) -> tuple[Card, ...]:
        return tuple(self._cards)

    # -- events ------------------------------------------------------------------------------------

    def handle(self, event: Any) -> None:
        """Show one runtime event. A display fault is logged, never raised into the turn."""
        try:
            if isinstance(event, Mapping):
                self._delegate_report(event)
            elif self._finished:
                self._after_finish(event)
            else:
                self._during(event)
        except Exception:
            log.exception("the cards could not show a %s event", getattr(event, "type", type(event).__name__))

    def _during(self, event: Any) -> None:
        kind = event.type
        if kind == "text_delta":
            if self._answer is None:
                self._answer = AnswerCard(display_id=self._next_id(), live=self._live)
                self._answer.add(event.text)
                self._show(self._answer)
                return
            self._answer.add(event.text)
            self._touch(self._answer)
        elif kind == "step_started":
            self._step = (event.step, event.max_steps)
            self._refresh_session()
        elif kind == "tool_call_started":
            card = ToolCard(display_id=self._next_id(), live=self._live, name=event.name, input=event.input)
            self._tools[event.tool_use_id] = card
            self._show(card)
        elif kind in ("permission_resolved", "tool_call_finished"):
            self._tool_event(event)
        elif kind == "subagent":
            self._subagent(event)
        elif kind == "background_report":
            self._report(event.shell_id, text=event.text, exit_code=event.exit_code)
        elif kind == "usage":
            self._usage[(event.provider, event.model)] = event
        elif kind == "rate_limited":
            self._rate_waits += event.wait_seconds
        elif kind == "turn_settled":
            self._settled = event

    def _tool_event(self, event: Any) -> None:
        card = self._tools.get(event.tool_use_id)
        if card is None:
            return
        if event.type == "permission_resolved":
            card.decided(allowed=event.allowed, by=event.decided_by, reason=event.reason)
        else:
            card.finished(
                outcome=event.outcome, content=event.content, data=event.data, duration_ms=event.duration_ms
            )
            if card.background is not None:
                _AWAITING_REPORTS[card.background] = card
                while len(_AWAITING_REPORTS) > _MAX_AWAITING:
                    _AWAITING_REPORTS.popitem(last=False)
            if event.name == "todos" and event.data and isinstance(event.data.get("ledger"), Mapping):
                self._refresh_session(event.data["ledger"])
        self._touch(card)

    def _subagent(self, event: Any) -> None:
        card = self._subagents.get(event.run_id)
        if card is None:
            card = SubagentCard(
                display_id=self._next_id(), live=self._live, agent=event.agent, run_id=event.run_id
            )
            self._subagents[event.run_id] = card
            self._show(card)
        inner = event.event
        if getattr(inner, "type", None) == "subagent":  # a grandchild: a card of its own
            self._subagent(inner)
            return
        card.handle(inner)
        self._touch(card)

    def _refresh_session(self, ledger: Mapping[str, Any] | None = None) -> None:
        if ledger is None:
            ledger = self._read_ledger()
        card = self._session
        if card is None:
            if not SessionCard.has_content(ledger):
                return
            card = self._session = SessionCard(display_id=self._next_id(), live=self._live)
        card.ledger = ledger
        card.step, card.max_steps = self._step
        if card.shown:
            self._touch(card)
        else:
            self._show(card)

    def _read_ledger(self) -> Mapping[str, Any]:
        """The conversation's ledger (a small ``meta.json`` read), or nothing when it cannot be read."""
        if self._conversation is None:
            return {}
        from ...store.errors import StoreError
        from ...tools.todos import read_ledger

        try:
            return read_ledger(self._conversation)
        except (OSError, ValueError, StoreError):
            log.debug("no session ledger for the card", exc_info=True)
            return {}

    # -- background reports and what they continue ------------------------------------------------

    def _report(self, handle: str, *, text: str, exit_code: int | None) -> None:
        card = _AWAITING_REPORTS.pop(handle, None)
        if card is None:
            log.info("no card waits for the report of %s", handle)
            return
        card.report(text=text, exit_code=exit_code)
        self._follow = card
        self._touch(card)

    def _delegate_report(self, report: Mapping[str, Any]) -> None:
        for block in report.get("content") or ():
            if isinstance(block, Mapping) and block.get("type") == "delegate_report":
                self._report(str(block.get("run_id")), text=str(block.get("text", "")), exit_code=None)

    def _after_finish(self, event: Any) -> None:
        kind = event.type
        if kind == "background_report":
            self._report(event.shell_id, text=event.text, exit_code=event.exit_code)
            return
        card = self._follow
        if card is None:
            return
        if kind == "text_delta":
            card.follow(event.text)
        elif kind == "tool_call_finished":
            badge = "✓" if event.outcome == "ok" else f"⛔ {event.outcome}"
            card.follow(f"\n\n[{event.name} {badge}]\n\n")
        elif kind == "turn_settled":
            if event.status != "completed":
                card.follow(f"\n\n*({event.status}{': ' + event.reason if event.reason else ''})*")
            self._touch(card)
            self._flush()
            self._follow = None
            return
        else:
            return
        self._touch(card)

    # -- the person at the notebook --------------------------------------------------------------

    async def ask(self, interaction: PendingInteraction) -> ApproverAnswer | None:
        """Show Approve / Deny and wait for a click; ``None`` (the call stays pending) on no answer."""
        from ...policy.approval import ApproverAnswer

        if not self._live or self._finished:
            return None
        card = ApprovalCard(
            display_id=self._next_id(),
            live=True,
            tool=interaction.tool_name,
            input=interaction.input,
            why=why_asked(interaction),
            interaction_id=interaction.id,
        )
        asking = self._tools.get(interaction.tool_use_id or "")
        if asking is not None:
            asking.asking()
            self._touch(asking)
        self._show(card)
        approved = await self._wait(card)
        if approved is None:
            return None
        who = interaction.user_id
        card.settle(
            Badge(icon="✓", label=f"approved by {who}", tone="ok")
            if approved
            else Badge(icon="⛔", label=f"denied by {who}", tone="withheld")
        )
        self._touch(card)
        reason = None if approved else f"{who} denied it in the notebook"
        return ApproverAnswer(approve=approved, by=who, reason=reason)

    async def answer(
        self, *, question: str, options: list[dict[str, Any]], multiple: bool, tool_use_id: str
    ) -> list[str] | None:
        """Show the question and wait for an answer (option ids, or the typed text)."""
        if not self._live or self._finished:
            return None
        card = QuestionCard(
            display_id=self._next_id(), live=True, question=question, options=options, multiple=multiple
        )
        self._show(card)
        chosen = await self._wait(card)
        if chosen is None:
            return None
        card.answer = chosen
        card.settle(Badge(icon="✓", label="answered", tone="ok"))
        self._touch(card)
        return chosen

    async def _wait(self, card: PromptCard[T]) -> T | None:
        try:
            async with asyncio.timeout(self._wait_timeout):
                return await card.pending.future
        except TimeoutError:
            card.settle(_NO_ANSWER)
            self._touch(card)
            return None
        except asyncio.CancelledError:  # the engine's own timeout, or a stop
            card.settle(_WITHDRAWN)
            self._touch(card)
            raise

    # -- the end -----------------------------------------------------------------------------------

    def finish(self, settled: TurnSettled | None) -> None:
        """Add the footer, then replace every card by its static bundle and close the widgets."""
        if self._finished:
            return
        settled = settled or self._settled
        status = settled.status if settled is not None else None
        for card in self._tools.values():
            card.unfinished(status)
        for sub in self._subagents.values():
            sub.cut_short(status)
        footer = FooterCard.for_turn(
            display_id=self._next_id(),
            settled=settled,
            usage=list(self._usage.values()),
            elapsed_ms=int((time.monotonic() - self._started) * 1000),
            rate_waits=self._rate_waits,
        )
        self._show(footer)
        self._cancel_timer()
        dirty, self._dirty = self._dirty, {}
        self._finished = True
        for card in self._cards:
            if isinstance(card, PromptCard) and not card.pending.future.done():
                card.settle(_WITHDRAWN)
                dirty[id(card)] = card
            card.freeze(changed=id(card) in dirty)

    # -- outputs -----------------------------------------------------------------------------------

    def _next_id(self) -> str:
        return f"{self.display_id}-{len(self._cards) + 1}"

    def _show(self, card: Card) -> None:
        """A new output after the others; the next answer text starts a card below it."""
        self._cards.append(card)
        if not isinstance(card, AnswerCard):
            self._answer = None
        card.show()

    def _touch(self, card: Card) -> None:
        self._dirty[id(card)] = card
        now = time.monotonic()
        if now - self._last_flush >= self._interval:
            self._flush()
            return
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self._flush()
                return
            self._timer = loop.call_later(self._interval - (now - self._last_flush), self._flush)

    def _flush(self) -> None:
        self._cancel_timer()
        self._last_flush = time.monotonic()
        dirty, self._dirty = self._dirty, {}
        for card in dirty.values():
            try:
                card.push()
            except Exception:
                log.exception("could not update the %s card", card.kind)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
