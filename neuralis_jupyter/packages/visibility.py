"""Loaded and refused packages, and what one caller may see of them (the S2 feature gate).

A contribution (tool, skill, agent, prompt file) whose ``requires.features`` the caller does not hold is
HIDDEN, not marked: the caller's view is built as if the item did not exist, so nothing lets a member
infer it. A package that declares gated content and is reduced to nothing visible by the gate is
omitted whole (its existence would itself be an inference). A package that declares nothing at all,
or that was refused, stays in the view so it can be found and fixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypedDict

from ..contracts.access import meets_requires
from ..contracts.identity import SessionContext
from .discovery import AgentDecl, Contributions, PromptFile, SkillDecl, ToolDecl
from .errors import RefusalCode
from .manifest import Manifest, Trust

__all__ = ["HealthEntry", "LoadedPackage", "RefusedPackage", "VisiblePackage", "visible_package"]


@dataclass(frozen=True, kw_only=True)
class LoadedPackage:
    manifest: Manifest
    contributions: Contributions
    root: Path
    #: "builtin", "root:<path>" or "entry-point:<distribution>:<name>".
    source: str
    #: Soft findings for health(): the trust clamp, ignored frontmatter, unknown features.
    notes: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return self.manifest.id

    @property
    def trust(self) -> Trust:
        return self.manifest.trust


@dataclass(frozen=True, kw_only=True)
class RefusedPackage:
    #: The manifest id when it could be read, else the folder or entry-point name.
    id: str
    code: RefusalCode
    #: One line saying what is wrong and where.
    reason: str
    source: str


class HealthEntry(TypedDict):
    id: str
    status: Literal["ok", "refused"]
    code: RefusalCode | None
    reason: str | None
    source: str
    detail: list[str]


@dataclass(frozen=True, kw_only=True)
class VisiblePackage:
    """One package as one caller sees it: only the contributions the caller's features satisfy."""

    id: str
    status: Literal["ok", "refused"]
    version: str | None = None
    description: str | None = None
    trust: Trust | None = None
    tools: tuple[ToolDecl, ...] = ()
    skills: tuple[SkillDecl, ...] = ()
    agents: tuple[AgentDecl, ...] = ()
    prompt_files: tuple[PromptFile, ...] = ()
    #: Set on a refused package.
    code: RefusalCode | None = None
    reason: str | None = None


def visible_package(
    package: LoadedPackage | RefusedPackage, session: SessionContext
) -> VisiblePackage | None:
    """``package`` as ``session`` sees it, or None when the feature gate leaves it nothing to show."""
    if isinstance(package, RefusedPackage):
        return VisiblePackage(id=package.id, status="refused", code=package.code, reason=package.reason)
    c = package.contributions
    tools = tuple(t for t in c.tools if meets_requires(session, t.requires))
    skills = tuple(s for s in c.skills if meets_requires(session, s.requires))
    agents = tuple(a for a in c.agents if meets_requires(session, a.requires))
    prompts = tuple(p for p in c.prompt_files if meets_requires(session, p.requires))
    declares_gated = any(item.requires is not None for item in c.items())
    if declares_gated and not (tools or skills or agents or prompts):
        return None
    return VisiblePackage(
        id=package.id,
        status="ok",
        version=package.manifest.version,
        description=package.manifest.description,
        trust=package.trust,
        tools=tools,
        skills=skills,
        agents=agents,
        prompt_files=prompts,
    )
