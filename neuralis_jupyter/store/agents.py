"""Agents: ``agents/<id>/agent.json`` plus the agent's own ``identity/`` files.

Provisioning copies the identity templates (SOUL.md, USER.md, HEARTBEAT.md) into the agent's
``identity/`` folder with the provision-time substitutions of seed 000. The agent is built in a
temporary folder and renamed into place, so a failed provision leaves nothing behind. A project holds
at most ``max_agents_per_project`` agents; system provisioning is exempt. Listing is oldest first,
then by name.
"""

from __future__ import annotations

import errno
import json
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._resources import builtin_package_dir
from ..contracts.access import DEFAULT_ROLES
from ..contracts.agent_access import can_assign_agent_role
from ..contracts.identity import SessionContext, SystemSession
from .conversations import utcnow_iso, write_json_atomic
from .errors import AlreadyExists, NotFound, SeatLimitReached, StoreCorrupt, StoreError
from .paths import DataRoot, check_id

__all__ = [
    "IDENTITY_FILES",
    "AgentRecord",
    "AgentStore",
    "RolePriorityForbidden",
    "render_template",
]

AGENT_FILE = "agent.json"
IDENTITY_DIR = "identity"
#: Prompt order of the identity files; any other *.md follows alphabetically.
IDENTITY_FILES: tuple[str, ...] = ("SOUL.md", "USER.md", "HEARTBEAT.md")
_PLACEHOLDER = re.compile(r"\{\{([A-Za-z]+)\}\}")


class RolePriorityForbidden(StoreError, PermissionError):
    code = "role_priority_forbidden"

    def __init__(self, role: str) -> None:
        self.role = role
        super().__init__(f"you cannot give an agent the role {role!r}: it is stronger than your own role")


def render_template(text: str, values: Mapping[str, str]) -> str:
    """Replace ``{{name}}`` with ``values[name]``; unknown names and dotted forms stay as written."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


@dataclass(frozen=True, kw_only=True)
class AgentRecord:
    id: str
    name: str
    created_by: str
    created_at: str
    project_id: str
    model: str | None = None
    #: The agent's team role label (a role name); gated by priority when assigned.
    role: str | None = None
    system_prompt: Mapping[str, Any] = field(default_factory=dict)
    appearance: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "created_by": self.created_by,
            "created_at": self.created_at,
            "project_id": self.project_id,
            "model": self.model,
            "role": self.role,
            "system_prompt": dict(self.system_prompt),
            "appearance": dict(self.appearance),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], *, source: str) -> AgentRecord:
        try:
            return cls(
                id=doc["id"],
                name=doc["name"],
                created_by=doc["created_by"],
                created_at=doc["created_at"],
                project_id=doc["project_id"],
                model=doc.get("model"),
                role=doc.get("role"),
                system_prompt=doc.get("system_prompt") or {},
                appearance=doc.get("appearance") or {},
            )
        except KeyError as exc:
            raise StoreCorrupt(f"{source}: missing field {exc}; fix the file") from exc


def _slug(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug[:48] or "agent"


class AgentStore:
    def __init__(
        self,
        root: DataRoot,
        *,
        max_agents_per_project: int = 100,
        templates: Path | None = None,
    ) -> None:
        self.root = root
        self.max_agents_per_project = max_agents_per_project
        self._templates = templates

    @property
    def templates(self) -> Path:
        return self._templates or builtin_package_dir("agent-core") / IDENTITY_DIR

    def _agents_dir(self, project_id: str) -> Path:
        return self.root.project_dir(project_id) / "agents"

    def get(self, project_id: str, agent_id: str) -> AgentRecord:
        path = self.root.agent_dir(project_id, agent_id) / AGENT_FILE
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NotFound("agent", agent_id) from None
        except json.JSONDecodeError as exc:
            raise StoreCorrupt(f"{path} is not valid JSON: {exc}; fix the file") from exc
        return AgentRecord.from_json(doc, source=str(path))

    def list(self, project_id: str) -> list[AgentRecord]:
        """Every agent of the project, oldest first, then by name."""
        base = self._agents_dir(project_id)
        if not base.is_dir():
            return []
        records = [
            self.get(project_id, entry.name)
            for entry in base.iterdir()
            if not entry.name.startswith(".") and (entry / AGENT_FILE).is_file()
        ]
        records.sort(key=lambda a: (a.created_at, a.name))
        return records

    def count(self, project_id: str) -> int:
        base = self._agents_dir(project_id)
        if not base.is_dir():
            return 0
        return sum(1 for e in base.iterdir() if not e.name.startswith(".") and (e / AGENT_FILE).is_file())

    def create(
        self,
        session: SessionContext,
        *,
        name: str,
        agent_id: str | None = None,
        model: str | None = None,
        role: str | None = None,
        role_priority: int | None = None,
        system_prompt: Mapping[str, Any] | None = None,
        appearance: Mapping[str, Any] | None = None,
    ) -> AgentRecord:
        """Provision an agent in ``session.project_id`` as ``session.user_id``.

        ``role`` stamps a role on the agent; its priority (``role_priority``, else the default role's)
        must be no stronger than the caller's own.
        """
        project_id = session.project_id
        check_id("user", session.user_id)
        if not name or not name.strip():
            raise ValueError("an agent needs a non-empty name")
        if role is not None:
            priority = role_priority
            if priority is None:
                if role not in DEFAULT_ROLES:
                    raise ValueError(f"unknown role {role!r}; pass role_priority for a custom role")
                priority = DEFAULT_ROLES[role].priority
            if not can_assign_agent_role(session, priority):
                raise RolePriorityForbidden(role)
        if not isinstance(session, SystemSession) and self.count(project_id) >= self.max_agents_per_project:
            raise SeatLimitReached(project_id, self.max_agents_per_project)
        base = self._agents_dir(project_id)
        if agent_id is None:
            agent_id = self._free_id(base, _slug(name))
        final = self.root.agent_dir(project_id, agent_id)
        if final.exists():
            raise AlreadyExists("agent", agent_id)
        base.mkdir(parents=True, exist_ok=True)
        record = AgentRecord(
            id=agent_id,
            name=name.strip(),
            created_by=session.user_id,
            created_at=utcnow_iso(),
            project_id=project_id,
            model=model,
            role=role,
            system_prompt=system_prompt or {},
            appearance=appearance or {},
        )
        tmp = base / f".tmp-{agent_id}-{uuid.uuid4().hex[:6]}"
        tmp.mkdir()
        try:
            self._write_identity(tmp / IDENTITY_DIR, record, session)
            write_json_atomic(tmp / AGENT_FILE, record.to_json())
            try:
                tmp.rename(final)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):  # provisioned at the same moment
                    raise AlreadyExists("agent", agent_id) from None
                raise
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return record

    def _free_id(self, base: Path, slug: str) -> str:
        candidate, n = slug, 1
        while (base / candidate).exists():
            n += 1
            candidate = f"{slug}-{n}"
        return candidate

    def _write_identity(self, target: Path, record: AgentRecord, session: SessionContext) -> None:
        values = {
            "agentId": record.id,
            "agentName": record.name,
            "role": record.role or "assistant",
            "createdAt": record.created_at,
            "packageId": "agent-core",
            "memberSlug": _slug(record.name),
            "projectId": record.project_id,
            "userId": session.user_id,
        }
        target.mkdir(parents=True)
        for template in sorted(self.templates.glob("*.md")):
            text = template.read_text(encoding="utf-8")
            (target / template.name).write_text(render_template(text, values), encoding="utf-8")

    def identity_files(self, project_id: str, agent_id: str) -> list[Path]:
        """The agent's identity files in prompt order: SOUL, USER, HEARTBEAT, then alphabetical.

        Matching is case-insensitive so a lowercase ``soul.md`` keeps its slot.
        """
        folder = self.root.agent_dir(project_id, agent_id) / IDENTITY_DIR
        if not folder.is_dir():
            return []
        files = [p for p in folder.iterdir() if p.suffix.lower() == ".md" and p.is_file()]
        order = {name.lower(): i for i, name in enumerate(IDENTITY_FILES)}
        return sorted(files, key=lambda p: (order.get(p.name.lower(), len(order)), p.name))
