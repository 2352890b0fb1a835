"""Discover what a package folder contributes: tools, skills, agents, instruction and rule files.

::

    <package>/
      neuralis.json                manifest (manifest.py)
      tools/<name>.json            one tool each: name, description, input_schema, x-neuralis
      skills/<name>/SKILL.md       a skill: frontmatter name, description, requiredFeatures, credentials
      agents/<name>.md             a persona: name, description (<= 80 chars), allowed-tools, requiredFeatures
      instructions/*.md, rules/*.md    prompt files injected into every turn (optional requiredFeatures)

Every file is read in sorted order, so discovery is deterministic. Any invalid file raises
:class:`PackageContentError` naming it, which refuses the whole package (``load_failed``). Soft problems
(an ignored nested frontmatter key, a feature no one declares) come back as ``Contributions.warnings``.

An agent's ``allowed-tools`` has three states, and they must stay apart: ABSENT means the agent inherits
its caller's tools (``allowed_tools is None``); ``[]`` means it gets no tools (an empty tuple); a list is
a ceiling a delegate call can only narrow.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..contracts.access import FEATURES, Requires
from ..contracts.identity import SessionFieldInSchemaError, check_tool_input_schema
from ._schemas import check_json_schema, describe_errors
from .errors import PackageContentError
from .frontmatter import FieldValue, Frontmatter, parse_frontmatter

__all__ = [
    "MAX_AGENT_DESCRIPTION_CHARS",
    "AgentDecl",
    "Contributions",
    "PromptCategory",
    "PromptFile",
    "SkillDecl",
    "ToolDecl",
    "discover",
]

MAX_AGENT_DESCRIPTION_CHARS = 80
PromptCategory = Literal["instruction", "rule"]
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


@dataclass(frozen=True, kw_only=True)
class ToolDecl:
    """A tool as its package declares it; the handler is bound separately."""

    name: str
    description: str
    input_schema: dict[str, Any]
    access: Literal["read", "write"]
    effects: frozenset[str] = frozenset()
    requires: Requires | None = None
    intrinsic: bool = False
    barred_from_subagents: bool = False
    deterministic: bool = True
    package_id: str
    path: Path


@dataclass(frozen=True, kw_only=True)
class SkillDecl:
    name: str
    description: str
    required_features: tuple[str, ...] = ()
    credentials: tuple[str, ...] = ()
    body: str
    package_id: str
    #: The skill's folder (scripts and references live next to SKILL.md).
    path: Path

    @property
    def requires(self) -> Requires | None:
        return Requires(features=self.required_features) if self.required_features else None


@dataclass(frozen=True, kw_only=True)
class AgentDecl:
    name: str
    description: str
    #: None: inherit the caller's tools. An empty tuple: no tools at all. Otherwise a ceiling.
    allowed_tools: tuple[str, ...] | None = None
    required_features: tuple[str, ...] = ()
    #: Becomes the child's system prompt.
    body: str
    package_id: str
    path: Path

    @property
    def requires(self) -> Requires | None:
        return Requires(features=self.required_features) if self.required_features else None


@dataclass(frozen=True, kw_only=True)
class PromptFile:
    """An instruction or rule file; ``body`` is raw (placeholders are rendered at prompt assembly)."""

    name: str
    category: PromptCategory
    body: str
    required_features: tuple[str, ...] = ()
    package_id: str
    path: Path

    @property
    def requires(self) -> Requires | None:
        return Requires(features=self.required_features) if self.required_features else None


@dataclass(frozen=True, kw_only=True)
class Contributions:
    tools: tuple[ToolDecl, ...] = ()
    skills: tuple[SkillDecl, ...] = ()
    agents: tuple[AgentDecl, ...] = ()
    prompt_files: tuple[PromptFile, ...] = ()
    warnings: tuple[str, ...] = ()

    def items(self) -> tuple[ToolDecl | SkillDecl | AgentDecl | PromptFile, ...]:
        return (*self.tools, *self.skills, *self.agents, *self.prompt_files)


def discover(
    root: Path, *, package_id: str, first_party: bool, declared_features: frozenset[str] = frozenset()
) -> Contributions:
    """Everything ``root`` contributes. Only a first-party package may declare intrinsic tools."""
    warnings: list[str] = []
    known = frozenset(FEATURES) | declared_features

    def note_features(where: str, features: tuple[str, ...]) -> None:
        warnings.extend(
            f"{where}: requires feature {f!r}, which neither the platform nor this package declares"
            for f in features
            if f not in known
        )

    tools = tuple(_tool(p, package_id, first_party) for p in sorted((root / "tools").glob("*.json")))
    for tool in tools:
        note_features(f"tools/{tool.path.name}", tool.requires.features if tool.requires else ())
    skills: list[SkillDecl] = []
    for folder in _subdirs(root / "skills"):
        if not (folder / "SKILL.md").is_file():
            warnings.append(f"skills/{folder.name}: no SKILL.md; ignored")
            continue
        fm = _read(folder / "SKILL.md", f"skills/{folder.name}/SKILL.md", warnings)
        skills.append(_skill(folder, fm, package_id))
    agents = [_agent(p, _read(p, f"agents/{p.name}", warnings), package_id) for p in _md(root / "agents")]
    prompts: list[PromptFile] = []
    folders: tuple[tuple[PromptCategory, str], ...] = (("instruction", "instructions"), ("rule", "rules"))
    for category, folder in folders:
        for path in _md(root / folder):
            fm = _read(path, f"{folder}/{path.name}", warnings)
            if "category" in fm.fields:
                warnings.append(f"{folder}/{path.name}: 'category' comes from the folder; ignored")
            prompts.append(
                PromptFile(
                    name=path.name,
                    category=category,
                    body=fm.body,
                    required_features=_list(fm, "requiredFeatures", f"{folder}/{path.name}"),
                    package_id=package_id,
                    path=path,
                )
            )
    for item in (*skills, *agents, *prompts):
        note_features(str(item.path.relative_to(root)), item.required_features)
    return Contributions(
        tools=tools,
        skills=tuple(skills),
        agents=tuple(agents),
        prompt_files=tuple(prompts),
        warnings=tuple(warnings),
    )


def _subdirs(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def _md(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.md") if p.is_file())


def _read(path: Path, where: str, warnings: list[str]) -> Frontmatter:
    fm = parse_frontmatter(path.read_text(encoding="utf-8"), source=where)
    warnings.extend(fm.warnings)
    return fm


def _tool(path: Path, package_id: str, first_party: bool) -> ToolDecl:
    where = f"tools/{path.name}"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PackageContentError(f"{where} is not valid JSON: {exc}") from None
    problem = describe_errors("tool", raw)
    if problem is not None:
        raise PackageContentError(f"{where}: {problem}")
    name: str = raw["name"]
    if name != path.stem:
        raise PackageContentError(f"{where}: declares name {name!r}; a tool file is named after its tool")
    schema: dict[str, Any] = raw["input_schema"]
    problem = check_json_schema(schema)
    if problem is not None:
        raise PackageContentError(
            f"{where}: tool {name!r} input_schema is not a valid JSON schema: {problem}"
        )
    if schema.get("type") != "object":
        raise PackageContentError(f"{where}: tool {name!r} input_schema must have type 'object' at its root")
    try:
        check_tool_input_schema(name, schema)
    except SessionFieldInSchemaError as exc:
        raise PackageContentError(f"{where}: {exc}") from None
    x = raw["x-neuralis"]
    if x.get("intrinsic", False) and not first_party:
        raise PackageContentError(
            f"{where}: tool {name!r} declares intrinsic, which only a first-party package may do "
            "(intrinsic tools are not bounded by the run's envelope)"
        )
    return ToolDecl(
        name=name,
        description=raw["description"],
        input_schema=schema,
        access=x["access"],
        effects=frozenset(x.get("effects", ())),
        requires=Requires.from_json(x["requires"]) if x.get("requires", {}).get("features") else None,
        intrinsic=x.get("intrinsic", False),
        barred_from_subagents=x.get("barredFromSubagents", False),
        deterministic=x.get("deterministic", True),
        package_id=package_id,
        path=path,
    )


def _skill(folder: Path, fm: Frontmatter, package_id: str) -> SkillDecl:
    where = f"skills/{folder.name}/SKILL.md"
    return SkillDecl(
        name=_name(fm, folder.name, where),
        description=_text(fm, "description", where),
        required_features=_list(fm, "requiredFeatures", where),
        credentials=_list(fm, "credentials", where),
        body=fm.body,
        package_id=package_id,
        path=folder,
    )


def _agent(path: Path, fm: Frontmatter, package_id: str) -> AgentDecl:
    where = f"agents/{path.name}"
    description = _text(fm, "description", where)
    if len(description) > MAX_AGENT_DESCRIPTION_CHARS:
        raise PackageContentError(
            f"{where}: description is {len(description)} characters; an agent's description is its whole "
            f"routing surface and is cut at {MAX_AGENT_DESCRIPTION_CHARS}, so shorten it"
        )
    allowed = _list(fm, "allowed-tools", where) if "allowed-tools" in fm.fields else None
    return AgentDecl(
        name=_name(fm, path.stem, where),
        description=description,
        allowed_tools=allowed,
        required_features=_list(fm, "requiredFeatures", where),
        body=fm.body,
        package_id=package_id,
        path=path,
    )


def _name(fm: Frontmatter, expected: str, where: str) -> str:
    name = _text(fm, "name", where) if "name" in fm.fields else expected
    if name != expected:
        raise PackageContentError(f"{where}: name {name!r} differs from its file or folder name {expected!r}")
    if not _NAME.match(name):
        raise PackageContentError(f"{where}: name {name!r} must be lowercase letters, digits, '-' or '_'")
    return name


def _text(fm: Frontmatter, key: str, where: str) -> str:
    value: FieldValue | None = fm.fields.get(key)
    if not isinstance(value, str) or not value.strip():
        raise PackageContentError(f"{where}: frontmatter needs a non-empty '{key}: ...' line")
    return " ".join(value.split())


def _list(fm: Frontmatter, key: str, where: str) -> tuple[str, ...]:
    """A list-valued key; absent reads as empty (callers that must tell absent apart check first)."""
    value = fm.fields.get(key, ())
    if value == "":
        raise PackageContentError(
            f"{where}: '{key}:' has no value; write '{key}: []' for an empty list, or remove the key"
        )
    return (value,) if isinstance(value, str) else value
