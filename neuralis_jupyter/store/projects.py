"""Projects: ``projects/<id>/project.json`` holds members, roles, spend limits and defaults.

With nothing configured there is one project, ``default``, whose owner is the local user. Roles declared
in a project override or extend the default roles by name; a custom role behaves exactly as its
priority and grants say. :meth:`ProjectStore.session_for` is the one place a verified user id becomes a
:class:`SessionContext`: a user with no role in the project gets no session at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..contracts.access import DEFAULT_ROLES, Role
from ..contracts.identity import AgentOwnership, SessionContext, SpendLimits, SpendRule
from ..identity import local_user_id
from .conversations import write_json_atomic
from .errors import NotAMember, NotFound, StoreCorrupt
from .paths import DataRoot, check_id

__all__ = ["DEFAULT_PROJECT_ID", "GuardProfile", "Project", "ProjectStore", "local_user_id"]

DEFAULT_PROJECT_ID = "default"
GuardProfile = Literal["safe", "balanced", "auto"]
PROJECT_FILE = "project.json"


@dataclass(frozen=True, kw_only=True)
class Project:
    id: str
    name: str
    #: user id -> role name
    members: Mapping[str, str]
    #: custom roles; merged over DEFAULT_ROLES by name
    roles: Mapping[str, Role] = field(default_factory=dict)
    spend_limits: SpendLimits = field(default_factory=SpendLimits)
    llm_rate_limit_rpm: int | None = None
    agent_ownership: Mapping[str, AgentOwnership] = field(default_factory=dict)
    default_model: str | None = None
    default_agent: str | None = None
    guard: GuardProfile = "balanced"
    #: Project PreToolUse hooks ({match, decision, reason}); their source is "project".
    hooks: tuple[Mapping[str, Any], ...] = ()
    #: Project policy ({blocklist, allowlist, ceiling_allowlist}); added to the administrator's.
    policy: Mapping[str, Any] = field(default_factory=dict)

    @property
    def owner_id(self) -> str:
        """The member holding the strongest role (the first by name on a tie)."""
        if not self.members:
            raise StoreCorrupt(f"project {self.id!r} has no members; add an owner under 'members'")
        return min(self.members, key=lambda user: (self.role(self.members[user]).priority, user))

    def role(self, name: str) -> Role:
        merged = {**DEFAULT_ROLES, **self.roles}
        try:
            return merged[name]
        except KeyError:
            raise StoreCorrupt(
                f"project {self.id!r} gives a member the role {name!r}, which is neither a default "
                f"role ({', '.join(DEFAULT_ROLES)}) nor declared under 'roles' in project.json"
            ) from None

    # -- JSON -------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        def rule(r: SpendRule | None) -> dict[str, Any] | None:
            return None if r is None else {"amount_usd": r.amount_usd, "period": r.period}

        limits = self.spend_limits
        return {
            "id": self.id,
            "name": self.name,
            "members": dict(self.members),
            "roles": {
                n: {
                    "priority": r.priority,
                    "granted_features": list(r.granted_features),
                    "agent_access": r.agent_access,
                }
                for n, r in self.roles.items()
            },
            "spend_limits": {
                "project_total": rule(limits.project_total),
                "by_role": {k: rule(v) for k, v in limits.by_role.items()},
                "by_user": {k: rule(v) for k, v in limits.by_user.items()},
                "by_agent": {k: rule(v) for k, v in limits.by_agent.items()},
            },
            "llm_rate_limit_rpm": self.llm_rate_limit_rpm,
            "agent_ownership": {
                k: {"created_by": v.created_by, "assigned_to": list(v.assigned_to)}
                for k, v in self.agent_ownership.items()
            },
            "default_model": self.default_model,
            "default_agent": self.default_agent,
            "guard": self.guard,
            "hooks": [dict(h) for h in self.hooks],
            "policy": dict(self.policy),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], *, source: str) -> Project:
        """Parse ``project.json``; every problem names the file and the field."""
        try:
            return cls._from_json(doc)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StoreCorrupt(f"{source}: {exc}; fix the file and try again") from exc

    @classmethod
    def _from_json(cls, doc: Mapping[str, Any]) -> Project:
        def rule(v: Any) -> SpendRule | None:
            if v is None:
                return None
            return SpendRule(amount_usd=float(v["amount_usd"]), period=v.get("period", "month"))

        def rules(v: Any) -> dict[str, SpendRule]:
            return {k: r for k, x in (v or {}).items() if (r := rule(x)) is not None}

        limits = doc.get("spend_limits") or {}
        guard = doc.get("guard", "balanced")
        if guard not in ("safe", "balanced", "auto"):
            raise ValueError(f"guard must be safe, balanced or auto, got {guard!r}")
        rpm = doc.get("llm_rate_limit_rpm")
        if rpm is not None and (not isinstance(rpm, int) or rpm < 1):
            raise ValueError(f"llm_rate_limit_rpm must be a positive integer or null, got {rpm!r}")
        hooks = doc.get("hooks") or []
        if not isinstance(hooks, list) or not all(isinstance(h, Mapping) for h in hooks):
            raise ValueError("hooks must be a list of {match, decision, reason} objects")
        policy = doc.get("policy") or {}
        if not isinstance(policy, Mapping):
            raise ValueError("policy must be an object with blocklist / allowlist lists")
        members = doc["members"]
        if not isinstance(members, Mapping):
            raise ValueError("members must map user ids to role names")
        return cls(
            id=check_id("project", doc["id"]),
            name=str(doc.get("name") or doc["id"]),
            members={str(u): str(r) for u, r in members.items()},
            roles={
                n: Role(
                    name=n,
                    priority=int(r["priority"]),
                    granted_features=tuple(r.get("granted_features", ())),
                    agent_access=r.get("agent_access", "own"),
                )
                for n, r in (doc.get("roles") or {}).items()
            },
            spend_limits=SpendLimits(
                project_total=rule(limits.get("project_total")),
                by_role=rules(limits.get("by_role")),
                by_user=rules(limits.get("by_user")),
                by_agent=rules(limits.get("by_agent")),
            ),
            llm_rate_limit_rpm=rpm,
            agent_ownership={
                k: AgentOwnership(created_by=v["created_by"], assigned_to=tuple(v.get("assigned_to", ())))
                for k, v in (doc.get("agent_ownership") or {}).items()
            },
            default_model=doc.get("default_model"),
            default_agent=doc.get("default_agent"),
            guard=guard,
            hooks=tuple(dict(h) for h in hooks),
            policy=dict(policy),
        )


class ProjectStore:
    def __init__(self, root: DataRoot) -> None:
        self.root = root

    def _file(self, project_id: str) -> Path:
        return self.root.project_dir(project_id) / PROJECT_FILE

    def get(self, project_id: str) -> Project:
        path = self._file(project_id)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NotFound("project", project_id) from None
        except json.JSONDecodeError as exc:
            raise StoreCorrupt(f"{path} is not valid JSON: {exc}; fix the file") from exc
        return Project.from_json(doc, source=str(path))

    def save(self, project: Project) -> None:
        path = self._file(project.id)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, project.to_json())

    def ensure_default(self, owner: str | None = None) -> Project:
        """The ``default`` project, created with ``owner`` (the local user) as its owner if absent."""
        try:
            return self.get(DEFAULT_PROJECT_ID)
        except NotFound:
            owner = check_id("user", owner or local_user_id())
            project = Project(id=DEFAULT_PROJECT_ID, name="Default", members={owner: "owner"})
            self.save(project)
            return project

    def list(self) -> list[str]:
        base = self.root.root / "projects"
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if (p / PROJECT_FILE).is_file())

    def session_for(
        self,
        user_id: str,
        project_id: str,
        *,
        agent_id: str | None = None,
        conversation_id: str | None = None,
        request_id: str | None = None,
    ) -> SessionContext:
        """The session of a VERIFIED user in a project; :class:`NotAMember` when they hold no role."""
        check_id("user", user_id)
        project = self.get(project_id)
        role_name = project.members.get(user_id)
        if role_name is None:
            raise NotAMember(user_id, project_id)
        role = project.role(role_name)
        return SessionContext(
            user_id=user_id,
            project_id=project.id,
            agent_id=agent_id,
            conversation_id=conversation_id,
            request_id=request_id,
            role=role.name,
            priority=role.priority,
            granted_features=role.granted_features,
            spend_limits=project.spend_limits,
            llm_rate_limit_rpm=project.llm_rate_limit_rpm,
            agent_access=role.agent_access,
            agent_ownership=project.agent_ownership,
        )
