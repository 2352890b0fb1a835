"""Prompt-side text from packages: runtime placeholders and the ``<packages>`` overview block.

Placeholders. A package file body may name four runtime values, flat names only:
``{{conversationId}}``, ``{{agentId}}``, ``{{projectId}}``, ``{{userId}}``. Anything else in braces,
including dotted forms such as ``{{user.id}}`` and provision-time names such as ``{{agentName}}``, is
left as written. A value the session does not carry renders as the empty string.

Overview. One block listing each visible package with its skills and agents, in load order, items by
name. A package's and an agent's description is cut to 80 characters (an agent's description is its
whole routing surface, so authors keep it under that); a skill's is given whole. The text depends only
on its inputs, so it is byte-stable and can live in the cached part of the system prompt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..contracts.identity import SessionContext
from .visibility import VisiblePackage

__all__ = ["MAX_OVERVIEW_DESCRIPTION_CHARS", "PLACEHOLDERS", "render_overview", "render_placeholders"]

MAX_OVERVIEW_DESCRIPTION_CHARS = 80
PLACEHOLDERS: tuple[str, ...] = ("conversationId", "agentId", "projectId", "userId")
_PLACEHOLDER = re.compile(r"\{\{(" + "|".join(PLACEHOLDERS) + r")\}\}")


def render_placeholders(text: str, session: SessionContext) -> str:
    """``text`` with the four runtime placeholders replaced from ``session``."""
    values = {
        "conversationId": session.conversation_id or "",
        "agentId": session.agent_id or "",
        "projectId": session.project_id,
        "userId": session.user_id,
    }
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def _cut(text: str, limit: int = MAX_OVERVIEW_DESCRIPTION_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def render_overview(packages: Iterable[VisiblePackage]) -> str:
    """The ``<packages>`` block for the visible, loaded packages; '' when there are none."""
    lines: list[str] = []
    for package in packages:
        if package.status != "ok":
            continue
        lines.append(f"- {package.id} ({package.trust}): {_cut(package.description or '')}")
        if package.skills:
            lines.append('  skills (activate with execute action "skill"):')
            lines.extend(
                f"  - {s.name}: {' '.join(s.description.split())}"
                for s in sorted(package.skills, key=lambda s: s.name)
            )
        if package.agents:
            lines.append("  agents (delegate a task to one by name):")
            lines.extend(
                f"  - {a.name}: {_cut(a.description)}" for a in sorted(package.agents, key=lambda a: a.name)
            )
    if not lines:
        return ""
    return "\n".join(["<packages>", *lines, "</packages>"])
