"""Pure text helpers for the cards: Markdown to HTML, escaping, summaries, labels and numbers.

Everything a model or a tool produced is escaped before it reaches HTML: the answer's Markdown goes
through mistune with ``escape=True`` (raw HTML in a reply shows as text, ``javascript:`` links are
dropped), and every other value through :func:`esc`. Nothing here touches a widget or the kernel.
"""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "OUTCOMES",
    "Badge",
    "badge_html",
    "card_html",
    "code_block",
    "details_html",
    "duration",
    "esc",
    "inline_code",
    "input_summary",
    "markdown_html",
    "pre",
    "pretty_json",
    "short",
]

Tone = Literal["info", "ok", "error", "withheld", "wait"]

_COLORS: dict[Tone, str] = {
    "info": "var(--jp-brand-color1, #1976d2)",
    "ok": "var(--jp-success-color1, #388e3c)",
    "error": "var(--jp-error-color1, #d32f2f)",
    "withheld": "var(--jp-warn-color1, #f57c00)",
    "wait": "var(--jp-border-color1, #9e9e9e)",
}

#: Which keys of a tool's input say best what the call does, in order of preference.
_SUMMARY_KEYS = (
    "code",
    "command",
    "url",
    "query",
    "question",
    "task",
    "path",
    "goal",
    "name",
    "action",
    "agent",
    "names",
)


@dataclass(frozen=True, kw_only=True)
class Badge:
    """How a state reads: an icon, a word, and its tone (the card's colour)."""

    icon: str
    label: str
    tone: Tone

    @property
    def text(self) -> str:
        return f"{self.icon} {self.label}"


#: Every tool outcome; anything but ``ok`` and ``error`` means the tool did NOT run ("withheld").
OUTCOMES: dict[str, Badge] = {
    "ok": Badge(icon="✓", label="done", tone="ok"),
    "error": Badge(icon="✗", label="failed", tone="error"),
    "denied": Badge(icon="⛔", label="denied — not run", tone="withheld"),
    "refused": Badge(icon="⛔", label="refused — not run", tone="withheld"),
    "unavailable": Badge(icon="⛔", label="unavailable — not run", tone="withheld"),
    "shadow_denied": Badge(icon="👁", label="shadow mode — not run", tone="withheld"),
    "stopped": Badge(icon="⏹", label="stopped — not run", tone="withheld"),
    "invalid": Badge(icon="⚠", label="invalid input — not run", tone="withheld"),
}


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def short(text: str, limit: int = 80) -> str:
    """The first line of ``text``, at most ``limit`` characters."""
    lines = text.strip().splitlines()
    first = lines[0] if lines else ""
    more = len(lines) > 1
    if len(first) > limit:
        first, more = first[: limit - 1], True
    return first + ("…" if more else "")


def pretty_json(value: Any) -> str:
    try:
        return json.dumps(value, indent=1, ensure_ascii=False, default=str)
    except ValueError:
        return repr(value)


def input_summary(value: Mapping[str, Any], limit: int = 80) -> str:
    """A short line that says what a call does: its code, command, URL, ... or its compact JSON."""
    found = _summary(value)
    if found is None:
        found = next(
            (f"{k}: {s}" for k, v in value.items() if isinstance(v, Mapping) and (s := _summary(v))), None
        )
    if found is not None:
        return short(found, limit)
    text = json.dumps(dict(value), ensure_ascii=False, default=str, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _summary(value: Mapping[str, Any]) -> str | None:
    for key in _SUMMARY_KEYS:
        item = value.get(key)
        if isinstance(item, str) and item.strip():
            return item
        if isinstance(item, list) and item and all(isinstance(i, str) for i in item):
            return ", ".join(item)
    return None


def duration(ms: int) -> str:
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


@functools.cache
def _markdown() -> Callable[[str], str]:
    import mistune  # ships with nbconvert; imported at the first card, never at kernel start

    render = mistune.create_markdown(escape=True, plugins=["strikethrough", "table"])
    return lambda text: str(render(text))


def markdown_html(text: str) -> str:
    """Markdown rendered to escaped HTML; plain escaped text when mistune is not installed."""
    try:
        render = _markdown()
    except ImportError:
        return f'<pre style="white-space:pre-wrap">{esc(text)}</pre>'
    return render(text)


def inline_code(text: str) -> str:
    """Markdown inline code that backticks in ``text`` cannot close early."""
    run = best = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        best = max(best, run)
    fence = "`" * (best + 1)
    pad = " " if best else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def code_block(text: str, *, lang: str = "") -> str:
    """A fenced Markdown block that the text cannot break out of."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text}\n{fence}"


def details_html(summary: str, body_html: str, *, open_: bool = False) -> str:
    return (
        f'<details{" open" if open_ else ""}><summary style="cursor:pointer">{esc(summary)}</summary>'
        f'<div style="margin:4px 0 0 12px">{body_html}</div></details>'
    )


def pre(text: str) -> str:
    return (
        '<pre style="white-space:pre-wrap;max-height:24em;overflow:auto;margin:2px 0;'
        f'font-size:var(--jp-code-font-size, 12px)">{esc(text)}</pre>'
    )


def badge_html(badge: Badge) -> str:
    return f'<span style="color:{_COLORS[badge.tone]};font-weight:600">{esc(badge.text)}</span>'


def card_html(body: str, *, tone: Tone = "info", kind: str = "card") -> str:
    """The frame every card shares: a coloured left rule, the same padding in every frontend."""
    return (
        f'<div class="neuralis-card neuralis-{esc(kind)}" style="border-left:3px solid {_COLORS[tone]};'
        'padding:2px 10px;margin:2px 0">'
        f"{body}</div>"
    )
