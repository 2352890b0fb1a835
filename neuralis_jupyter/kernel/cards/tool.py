"""A card per tool call: name, what it does, a running state, then the result, the error or the refusal.

A withheld call (the policy denied it, the envelope refused it, shadow mode captured it, a stop ended
it, ...) is never shown as a success: its badge says "not run" in the withheld colour, and the refusal
text is shown beside it. A call that a stop interrupted while it ran (the notebook's ``python``) says
"interrupted", with what it printed as its result. A background shell (``execute`` with
``background: true``) or a background sub-agent keeps its card: the report that arrives later, and the
turn it continues, are written into the same card (:meth:`ToolCard.report`, :meth:`ToolCard.follow`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Card
from .render import (
    OUTCOMES,
    Badge,
    Tone,
    badge_html,
    code_block,
    details_html,
    duration,
    esc,
    inline_code,
    input_summary,
    markdown_html,
    pre,
    pretty_json,
    short,
)

__all__ = ["ToolCard"]

_RUNNING = Badge(icon="⏳", label="running", tone="wait")
_ASKING = Badge(icon="✋", label="awaiting approval", tone="wait")
_BACKGROUND = Badge(icon="⏳", label="running in the background", tone="wait")
_UNFINISHED = Badge(icon="⏹", label="did not finish", tone="withheld")
#: A call a stop ended while it ran (the notebook's ``python``): it ran in part, so it is not "not run",
#: and what it printed before is its result.
_INTERRUPTED = Badge(icon="⏹", label="interrupted", tone="error")


class ToolCard(Card):
    kind = "tool"

    def __init__(self, *, display_id: str, live: bool, name: str, input: Mapping[str, Any]) -> None:
        super().__init__(display_id=display_id, live=live)
        self.name = name
        self.input = dict(input)
        self.badge = _RUNNING
        self.result: str | None = None
        self.took: str | None = None
        self.decision: str | None = None
        #: The background shell or sub-agent run whose report this card waits for.
        self.background: str | None = None
        self._report: str | None = None
        self._follow: list[str] = []

    # -- state -------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.badge in (_RUNNING, _ASKING)

    @property
    def withheld(self) -> bool:
        return self.badge.tone == "withheld"

    def asking(self) -> None:
        self.badge = _ASKING

    def decided(self, *, allowed: bool, by: str | None, reason: str | None) -> None:
        if allowed:
            self.decision = f"allowed ({by})" if by else "allowed"
            self.badge = _RUNNING
        else:
            self.decision = f"denied: {reason}" if reason else f"denied ({by})" if by else "denied"

    def finished(
        self, *, outcome: str, content: str, data: Mapping[str, Any] | None, duration_ms: int
    ) -> None:
        if outcome == "stopped" and data and data.get("interrupted"):
            self.badge = _INTERRUPTED
        else:
            self.badge = OUTCOMES.get(outcome) or OUTCOMES["error"]
        self.result = content
        self.took = duration(duration_ms)
        handle = _background_handle(data) if outcome == "ok" else None
        if handle is not None:
            self.background = handle
            self.badge = _BACKGROUND

    def unfinished(self, status: str | None) -> None:
        """The turn ended while the call ran (a stop cancels running calls without a result)."""
        if self.running:
            self.badge = OUTCOMES["stopped"] if status == "stopped" else _UNFINISHED

    def report(self, *, text: str, exit_code: int | None) -> None:
        """The background work's report arrived."""
        self._report = text
        ok = exit_code in (0, None)
        code = "" if exit_code is None else f" (exit code {exit_code})"
        self.badge = Badge(
            icon="✓" if ok else "✗", label=f"background work ended{code}", tone="ok" if ok else "error"
        )

    def follow(self, text: str) -> None:
        """Text of the turn the report continued."""
        self._follow.append(text)

    # -- forms -------------------------------------------------------------------------------------

    def tone(self) -> Tone:
        return self.badge.tone

    def _head(self) -> str:
        took = f" · {self.took}" if self.took and not self.running else ""
        return f"{self.badge.text}{took}"

    def markdown(self) -> str:
        lines = [f"**🔧 {self.name}** {inline_code(input_summary(self.input, 70))} — {self._head()}"]
        if self.withheld and self.result:
            lines += ["", "> " + self.result.replace("\n", "\n> ")]
        if self._report:
            lines += ["", code_block(self._report)]
        if self._follow:
            lines += ["", "↪ " + "".join(self._follow).strip()]
        details = [
            "",
            "<details><summary>Details</summary>",
            "",
            "Input:",
            "",
            code_block(pretty_json(self.input), lang="json"),
        ]
        if self.result is not None and not self.withheld:
            details += ["", "Result:", "", code_block(self.result)]
        if self.decision:
            details += ["", f"Approval: {self.decision}"]
        return "\n".join([*lines, *details, "", "</details>"])

    def plain(self) -> str:
        lines = [f"[{self.name}] {input_summary(self.input)} — {self._head()}"]
        if self.result is not None:
            lines.append(short(self.result, 200) if not self.withheld else self.result)
        if self._report:
            lines.append(self._report)
        if self._follow:
            lines.append("↪ " + "".join(self._follow).strip())
        return "\n".join(lines)

    def body_html(self) -> str:
        head = (
            f"<b>🔧 {esc(self.name)}</b> <code>{esc(input_summary(self.input))}</code> — "
            f"{badge_html(self.badge)}"
            + (f" <small>{esc(self.took)}</small>" if self.took and not self.running else "")
        )
        parts = [f"<div>{head}</div>"]
        if self.withheld and self.result:
            parts.append(f'<div style="font-style:italic">{esc(self.result)}</div>')
        if self._report:
            parts.append(pre(self._report))
        if self._follow:
            parts.append(f"<div>↪ {markdown_html(''.join(self._follow).strip())}</div>")
        inner = "<div><b>Input</b></div>" + pre(pretty_json(self.input))
        if self.result is not None and not self.withheld:
            inner += "<div><b>Result</b></div>" + pre(self.result)
        if self.decision:
            inner += f"<div><b>Approval</b>: {esc(self.decision)}</div>"
        parts.append(details_html("Details", inner))
        return "".join(parts)


def _background_handle(data: Mapping[str, Any] | None) -> str | None:
    """The shell id or run id of work that reports back later, if the call started any."""
    if not data or data.get("status") != "running":
        return None
    handle = data.get("shellId") or data.get("run_id")
    return str(handle) if handle else None
