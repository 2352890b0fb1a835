"""The system prompt, assembled in one fixed order.

1. who you are: the agent's identity files (SOUL, USER, HEARTBEAT, then any other ``*.md``
   alphabetically),
2. the packages' instructions, then their rules, with the runtime placeholders filled in,
3. the ``<packages>`` overview,
4. the per-step ``<session>`` block: guard profile, goal and todos, ``Steps: <step>/<max>``.

Parts 1-3 are the static prompt: built once per turn and byte-identical across its steps, so a provider
caches it. Part 4 is rebuilt every step; everything volatile lives there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .contracts.identity import SessionContext
from .packages import PackageSet, render_placeholders

__all__ = ["AssembledPrompt", "SessionSection", "guard_overlay"]

#: A contributor to the per-step session block (todos, background shells, ...).
SessionSection = Callable[[SessionContext, int, int | None], Awaitable[str] | str]

_GUARD_TEXT = {
    "safe": "safe: every write, code execution and outbound request waits for the user's approval.",
    "balanced": (
        "balanced: code execution, outbound requests, destructive actions and third-party writes wait for "
        "the user's approval; other writes run."
    ),
    "auto": "auto: nothing waits for approval; what policy denies is still denied.",
}


def guard_overlay(profile: str) -> str:
    return "Guard: " + _GUARD_TEXT.get(profile, profile)


@dataclass(kw_only=True)
class AssembledPrompt:
    """A :class:`~neuralis_jupyter.runtime.PromptBuilder` over identity files and packages.

    :meth:`static` reads the identity files (blocking I/O): the runtime calls it once per turn, in a
    worker thread.
    """

    identity_files: Sequence[Path]
    packages: PackageSet
    guard: Callable[[], Awaitable[str]] | None = None
    sections: list[SessionSection] = field(default_factory=list)

    def static(self, session: SessionContext) -> str:
        parts: list[str] = []
        identity = [p.read_text(encoding="utf-8").strip() for p in self.identity_files]
        if identity:
            parts.append("# Who you are\n\n" + "\n\n".join(t for t in identity if t))
        files = self.packages.prompt_files(session)
        instructions = [
            render_placeholders(f.body, session).strip() for f in files if f.category == "instruction"
        ]
        rules = [render_placeholders(f.body, session).strip() for f in files if f.category == "rule"]
        if instructions:
            parts.append("# Instructions\n\n" + "\n\n".join(instructions))
        if rules:
            parts.append("# Rules\n\n" + "\n\n".join(rules))
        overview = self.packages.overview(session)
        if overview:
            parts.append(overview)
        return "\n\n".join(parts)

    async def dynamic(self, session: SessionContext, *, step: int, max_steps: int | None) -> str:
        lines: list[str] = []
        if self.guard is not None:
            lines.append(guard_overlay(await self.guard()))
        for section in self.sections:
            text = section(session, step, max_steps)
            if asyncio.iscoroutine(text):
                text = await text
            if text:
                lines.append(str(text).rstrip())
        lines.append(f"Steps: {step}/{max_steps if max_steps is not None else '∞'}")
        return "<session>\n" + "\n".join(lines) + "\n</session>"
