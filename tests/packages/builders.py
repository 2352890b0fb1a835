"""Write real package folders (and a real installed distribution) for the package tests."""

from __future__ import annotations

import json
import textwrap
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from neuralis_jupyter.contracts import DEFAULT_ROLES, CrossPackageSession, SessionContext
from neuralis_jupyter.runtime.tools import ToolOutput

OBJ: dict[str, Any] = {
    "type": "object",
    "properties": {"q": {"type": "string"}},
    "additionalProperties": False,
}


def session_for(role: str, **extra: Any) -> SessionContext:
    """A session holding exactly ``role``'s default grants."""
    r = DEFAULT_ROLES[role]
    return SessionContext(
        user_id="alice",
        project_id="lab",
        agent_id="assistant",
        conversation_id="c-1",
        role=role,
        priority=r.priority,
        granted_features=r.granted_features,
        agent_access=r.agent_access,
        **extra,
    )


def cross_session(caller: str = "acme-tools") -> CrossPackageSession:
    base = session_for("member")
    return CrossPackageSession(
        user_id=base.user_id,
        project_id=base.project_id,
        granted_features=base.granted_features,
        priority=base.priority,
        caller_package_id=caller,
    )


async def ok_handler(args: dict[str, Any], ctx: Any) -> ToolOutput:
    return ToolOutput(content="ok")


def tool(
    name: str,
    *,
    access: str = "read",
    features: list[str] | None = None,
    schema: dict[str, Any] | None = None,
    **x: Any,
) -> dict[str, Any]:
    """A tools/<name>.json document."""
    ext: dict[str, Any] = {"access": access, **x}
    if features is not None:
        ext["requires"] = {"features": features}
    return {
        "name": name,
        "description": f"The {name} tool.",
        "input_schema": schema if schema is not None else OBJ,
        "x-neuralis": ext,
    }


def manifest(package_id: str, *, trust: str = "trusted", **extra: Any) -> dict[str, Any]:
    return {
        "id": package_id,
        "version": "1.0.0",
        "trust": trust,
        "description": f"The {package_id} package.",
        **extra,
    }


def agent_md(
    name: str, description: str = "Does one thing well.", extra: str = "", body: str = "Body."
) -> str:
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}\n"


def write_package(
    folder: Path,
    package_id: str = "acme-tools",
    *,
    trust: str = "trusted",
    manifest_extra: Mapping[str, Any] | None = None,
    tools: Sequence[dict[str, Any]] = (),
    files: Mapping[str, str] | None = None,
    raw_manifest: str | None = None,
) -> Path:
    """A package folder: ``neuralis.json``, ``tools/*.json`` and any other ``files`` by relative path."""
    folder.mkdir(parents=True, exist_ok=True)
    text = raw_manifest
    if text is None:
        text = json.dumps(manifest(package_id, trust=trust, **dict(manifest_extra or {})))
    (folder / "neuralis.json").write_text(text, encoding="utf-8")
    for doc in tools:
        (folder / "tools").mkdir(exist_ok=True)
        (folder / "tools" / f"{doc['name']}.json").write_text(json.dumps(doc), encoding="utf-8")
    for rel, content in (files or {}).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    return folder


@dataclass(frozen=True, kw_only=True)
class Distribution:
    """A tiny installed distribution on sys.path exposing one ``neuralis.packages`` entry point."""

    module: str
    dist_name: str
    package_root: Path


def install_distribution(
    site: Path, monkeypatch: pytest.MonkeyPatch, *, module_body: str, entry: str = "demo"
) -> Distribution:
    """Write ``<module>.py`` plus its ``.dist-info`` into ``site`` and put ``site`` on sys.path."""
    token = uuid.uuid4().hex[:8]
    module = f"neuralis_demo_{token}"
    dist_name = f"neuralis-demo-{token}"
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(module_body), encoding="utf-8")
    info = site / f"neuralis_demo_{token}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 0.1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(f"[neuralis.packages]\n{entry} = {module}\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    return Distribution(module=module, dist_name=dist_name, package_root=site / "pkg")
