"""Store errors. Routes map these to HTTP codes in one place; the CLI prints their message.

    StoreError
    ├── InvalidId            an id that cannot name a file (400)
    ├── NotFound             no such project / agent / conversation (404)
    ├── NotAMember           the user holds no role in the project (403)
    ├── SeatLimitReached     the project's agent ceiling is reached (409)
    ├── AlreadyExists        the id is taken (409)
    └── StoreCorrupt         a file cannot be parsed and cannot be repaired (500)

A sentinel id is refused with :class:`neuralis_jupyter.contracts.SentinelIdentityError`.
"""

from __future__ import annotations

__all__ = [
    "AlreadyExists",
    "InvalidId",
    "NotAMember",
    "NotFound",
    "SeatLimitReached",
    "StoreCorrupt",
    "StoreError",
]


class StoreError(Exception):
    """Base class of every store error; ``code`` is the wire error code."""

    code = "store_error"


class InvalidId(StoreError, ValueError):
    code = "invalid_id"

    def __init__(self, kind: str, value: object) -> None:
        self.kind = kind
        self.value = value
        super().__init__(
            f"{kind} id {value!r} is not valid: use 1-128 letters, digits, '.', '_' or '-', "
            "not starting with '.' or '_'"
        )


class NotFound(StoreError, LookupError):
    code = "not_found"

    def __init__(self, kind: str, ident: str) -> None:
        self.kind = kind
        self.ident = ident
        super().__init__(f"no {kind} {ident!r}")


class NotAMember(StoreError, PermissionError):
    code = "not_a_member"

    def __init__(self, user_id: str, project_id: str) -> None:
        self.user_id = user_id
        self.project_id = project_id
        super().__init__(
            f"user {user_id!r} holds no role in project {project_id!r}; "
            f"ask a project owner to add them under 'members' in project.json"
        )


class SeatLimitReached(StoreError):
    code = "seat_limit_reached"

    def __init__(self, project_id: str, limit: int) -> None:
        self.project_id = project_id
        self.limit = limit
        super().__init__(
            f"project {project_id!r} already holds {limit} agents, its max_agents_per_project "
            f"limit; delete an agent or raise c.NeuralisSettings.max_agents_per_project"
        )


class AlreadyExists(StoreError):
    code = "already_exists"

    def __init__(self, kind: str, ident: str) -> None:
        self.kind = kind
        self.ident = ident
        super().__init__(f"{kind} {ident!r} already exists")


class StoreCorrupt(StoreError):
    code = "store_corrupt"
