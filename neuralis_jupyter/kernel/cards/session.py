"""The turn's context cards: the session ledger, a sub-agent's run, and the footer.

The session card shows the conversation's goal (numbered done conditions), its todos with their
status and ``Steps n/max``; it appears once the ledger has a goal or todos. The sub-agent card follows
one delegate run from its forwarded events. The footer is the turn's bill: status, steps, tokens, the
cost (the pricing basis as the hover title: costs are catalog estimates) and the duration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .base import Card
from .render import (
    OUTCOMES,
    Badge,
    Tone,
    badge_html,
    duration,
    esc,
    inline_code,
    input_summary,
    markdown_html,
    short,
)

if TYPE_CHECKING:
    from ...runtime.events import TurnSettled, UsageUpdated

__all__ = ["FooterCard", "SessionCard", "SubagentCard"]

_TODO_MARKS = {"pending": "☐", "in_progress": "◐", "completed": "☑", "cancelled": "☒"}
_STATUS = {
    "completed": Badge(icon="✓", label="completed", tone="ok"),
    "stopped": Badge(icon="⏹", label="stopped", tone="withheld"),
    "suspended": Badge(icon="⏸", label="suspended", tone="withheld"),
    "refused": Badge(icon="⛔", label="refused", tone="withheld"),
    "failed": Badge(icon="✗", label="failed", tone="error"),
}


def status_badge(status: str | None) -> Badge:
    return _STATUS.get(status or "", Badge(icon="✗", label="ended with an error", tone="error"))


class SessionCard(Card):
    kind = "session"

    def __init__(self, *, display_id: str, live: bool) -> None:
        super().__init__(display_id=display_id, live=live)
        self.ledger: Mapping[str, Any] = {}
        self.step: int | None = None
        self.max_steps: int | None = None

    @staticmethod
    def has_content(ledger: Mapping[str, Any]) -> bool:
        return bool(ledger.get("goal") or ledger.get("todos"))

    def _steps(self) -> str:
        if self.step is None:
            return ""
        return f"Steps {self.step}/{self.max_steps}" if self.max_steps else f"Steps {self.step}"

    def markdown(self) -> str:
        lines = [f"**📋 Session** · {self._steps()}".rstrip(" ·")]
        goal = self.ledger.get("goal")
        if goal:
            lines += ["", f"**Goal:** {goal['text']}"]
            lines += [f"{i}. [{'x' if c['met'] else ' '}] {c['text']}" for i, c in enumerate(goal["done"], 1)]
        todos = self.ledger.get("todos") or []
        if todos:
            lines += ["", f"**{self.ledger.get('name') or 'Todos'}**"]
            lines += [f"- {_TODO_MARKS.get(t['status'], '☐')} {t['content']} ({t['status']})" for t in todos]
        return "\n".join(lines)

    def body_html(self) -> str:
        parts = [f"<div><b>📋 Session</b> <small>{esc(self._steps())}</small></div>"]
        goal = self.ledger.get("goal")
        if goal:
            conditions = "".join(
                f"<li>{'☑' if c['met'] else '☐'} {esc(c['text'])}</li>" for c in goal["done"]
            )
            parts.append(f'<div><b>Goal:</b> {esc(goal["text"])}</div><ol style="margin:0">{conditions}</ol>')
        todos = self.ledger.get("todos") or []
        if todos:
            items = "".join(
                f"<li>{_TODO_MARKS.get(t['status'], '☐')} {esc(t['content'])} "
                f"<small>({esc(t['status'])})</small></li>"
                for t in todos
            )
            title = esc(self.ledger.get("name") or "Todos")
            parts.append(
                f'<div><b>{title}</b></div><ul style="margin:0;list-style:none;padding-left:8px">{items}</ul>'
            )
        return "".join(parts)


class SubagentCard(Card):
    """One delegate run: its agent, its steps, its tool calls and its answer as they happen."""

    kind = "subagent"

    def __init__(self, *, display_id: str, live: bool, agent: str, run_id: str) -> None:
        super().__init__(display_id=display_id, live=live)
        self.agent = agent
        self.run_id = run_id
        self.step = 0
        self.max_steps: int | None = None
        self.calls: dict[str, tuple[str, str, Badge]] = {}
        self.text: list[str] = []
        self.badge = Badge(icon="⏳", label="working", tone="wait")

    def handle(self, event: Any) -> None:
        kind = getattr(event, "type", None)
        if kind == "step_started":
            self.step, self.max_steps = event.step, event.max_steps
        elif kind == "text_delta":
            self.text.append(event.text)
        elif kind == "tool_call_started":
            running = Badge(icon="⏳", label="running", tone="wait")
            self.calls[event.tool_use_id] = (event.name, input_summary(event.input, 60), running)
        elif kind == "tool_call_finished" and event.tool_use_id in self.calls:
            name, summary, _ = self.calls[event.tool_use_id]
            self.calls[event.tool_use_id] = (name, summary, OUTCOMES.get(event.outcome) or OUTCOMES["error"])
        elif kind == "turn_settled":
            self.badge = status_badge(event.status)

    def cut_short(self, status: str | None) -> None:
        """The parent turn ended before this run reported its own end."""
        if self.badge.tone == "wait":
            self.badge = status_badge(status)

    def tone(self) -> Tone:
        return self.badge.tone

    def _steps(self) -> str:
        return f"Steps {self.step}/{self.max_steps}" if self.max_steps else f"Steps {self.step}"

    def markdown(self) -> str:
        lines = [f"**🤖 {self.agent}** (sub-agent {self.run_id}) · {self._steps()} — {self.badge.text}"]
        lines += [f"- `{n}` {inline_code(s)} — {b.text}" for n, s, b in self.calls.values()]
        text = "".join(self.text).strip()
        if text:
            lines += ["", "> " + text.replace("\n", "\n> ")]
        return "\n".join(lines)

    def body_html(self) -> str:
        head = (
            f"<div><b>🤖 {esc(self.agent)}</b> <small>sub-agent {esc(self.run_id)} · "
            f"{esc(self._steps())}</small> — {badge_html(self.badge)}</div>"
        )
        calls = "".join(
            f"<li><code>{esc(n)}</code> {esc(s)} — {badge_html(b)}</li>" for n, s, b in self.calls.values()
        )
        text = "".join(self.text).strip()
        body = f'<ul style="margin:0">{calls}</ul>' if calls else ""
        if text:
            body += f'<div style="opacity:.85">{markdown_html(text)}</div>'
        return head + body


class FooterCard(Card):
    """The turn's bill: status, steps, tokens, cost (catalog estimate; the basis on hover), duration."""

    kind = "footer"

    def __init__(
        self,
        *,
        display_id: str,
        live: bool,
        status: str | None,
        reason: str | None,
        steps: int,
        input_tokens: int,
        output_tokens: int,
        cost_usd: float,
        duration_ms: int,
        pricing_basis: str,
    ) -> None:
        super().__init__(display_id=display_id, live=live)
        self.badge = status_badge(status)
        self.reason = reason
        self.steps = steps
        self.tokens = f"{input_tokens:,} in / {output_tokens:,} out tokens"
        self.cost = f"${cost_usd:.4f}"
        self.took = duration(duration_ms)
        self.pricing_basis = pricing_basis

    @classmethod
    def for_turn(
        cls,
        *,
        display_id: str,
        settled: TurnSettled | None,
        usage: Sequence[UsageUpdated],
        elapsed_ms: int,
        rate_waits: float,
    ) -> FooterCard:
        """The footer of a settled turn, or of one that ended with an error (from its usage events)."""
        from ...providers.catalog import PRICING_BASIS

        basis = next((u.pricing_basis for u in usage), PRICING_BASIS)
        notes = [settled.reason if settled is not None else "the turn ended with an error"]
        if rate_waits:
            notes.append(f"waited {rate_waits:.1f} s for the rate limit")
        reason = "; ".join(n for n in notes if n) or None
        if settled is None:
            return cls(
                display_id=display_id,
                live=False,
                status=None,
                reason=reason,
                steps=max((u.steps for u in usage), default=0),
                input_tokens=sum(u.input_tokens for u in usage),
                output_tokens=sum(u.output_tokens for u in usage),
                cost_usd=sum(u.cost_usd for u in usage),
                duration_ms=elapsed_ms,
                pricing_basis=basis,
            )
        return cls(
            display_id=display_id,
            live=False,
            status=settled.status,
            reason=reason,
            steps=settled.steps,
            input_tokens=settled.input_tokens,
            output_tokens=settled.output_tokens,
            cost_usd=settled.cost_usd,
            duration_ms=settled.duration_ms,
            pricing_basis=basis,
        )

    def tone(self) -> Tone:
        return self.badge.tone if self.badge.tone != "ok" else "wait"

    def _status(self) -> str:
        return self.badge.text + (f": {short(self.reason, 160)}" if self.reason else "")

    def markdown(self) -> str:
        steps = f"{self.steps} step{'s' if self.steps != 1 else ''}"
        return f"*{self._status()} · {steps} · {self.tokens} · {self.cost} (estimate) · {self.took}*"

    def plain(self) -> str:
        return self.markdown().strip("*")

    def body_html(self) -> str:
        steps = f"{self.steps} step{'s' if self.steps != 1 else ''}"
        reason = f": {short(self.reason, 160)}" if self.reason else ""
        cost = (
            f'<span title="{esc(self.pricing_basis)}" style="text-decoration:underline dotted">'
            f"{esc(self.cost)}</span>"
        )
        return (
            f'<small style="opacity:.8">{badge_html(self.badge)}{esc(reason)} · '
            f"{esc(steps)} · {esc(self.tokens)} · {cost} · {esc(self.took)}</small>"
        )
