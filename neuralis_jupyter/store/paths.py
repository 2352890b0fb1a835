"""The data root layout and the one id check every path goes through.

<root>/neuralis.db                                   SQL store (SQLite default)
<root>/projects/<project>/project.json               members, roles, limits
<root>/projects/<project>/agents/<agent>/agent.json
<root>/projects/<project>/agents/<agent>/identity/   SOUL.md, USER.md, HEARTBEAT.md, ...
<root>/projects/<project>/agents/<agent>/conversations/<id>/messages.jsonl, meta.json
<root>/projects/<project>/agents/<agent>/conversations/<root>/forks/<id>/...
"""

from __future__ import annotations

import re
from pathlib import Path

from ..contracts.identity import SentinelIdentityError, is_sentinel
from .errors import InvalidId

__all__ = ["DataRoot", "check_id"]

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_id(kind: str, value: object) -> str:
    """Return ``value`` when it can name a directory; refuse sentinels and anything path-like."""
    if is_sentinel(value):
        raise SentinelIdentityError(f"{kind}_id", str(value))
    if not isinstance(value, str) or not _ID.fullmatch(value) or ".." in value:
        raise InvalidId(kind, value)
    return value


class DataRoot:
    """Path arithmetic over one data root; creates nothing by itself."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def project_dir(self, project_id: str) -> Path:
        return self.root / "projects" / check_id("project", project_id)

    def agent_dir(self, project_id: str, agent_id: str) -> Path:
        return self.project_dir(project_id) / "agents" / check_id("agent", agent_id)

    def conversations_dir(self, project_id: str, agent_id: str) -> Path:
        return self.agent_dir(project_id, agent_id) / "conversations"

    def conversation_dir(
        self, project_id: str, agent_id: str, conversation_id: str, *, root_id: str | None = None
    ) -> Path:
        base = self.conversations_dir(project_id, agent_id)
        if root_id is None:
            return base / check_id("conversation", conversation_id)
        return base / check_id("conversation", root_id) / "forks" / check_id("conversation", conversation_id)
