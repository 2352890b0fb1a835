"""Who may read, write and stamp roles on an agent (seed 000, "Agent CRUD").

``agent_access`` is ``'*'`` (every agent), ``'own'`` (agents the caller owns or is assigned) or
``'view'`` (read every agent, write none). Ownership evidence for ``'own'`` is the explicit
``agent_ownership`` record when there is one, else the agent's persisted creator: no create path
writes an ownership record, so for a new agent the creator is the only evidence. The record is
consulted first, so an explicit assignment always wins over the creator fallback.
"""

from __future__ import annotations

from .identity import SessionContext, SystemSession

__all__ = [
    "CONVERSATION_OVERSIGHT_PRIORITY",
    "can_assign_agent_role",
    "can_open_conversation",
    "can_read_agent",
    "can_write_agent",
    "owns_agent",
]

#: Roles at least this strong (the default admin tier) may open other members' conversations.
CONVERSATION_OVERSIGHT_PRIORITY = 10


def owns_agent(session: SessionContext, agent_id: str, *, created_by: str | None) -> bool:
    """The 'own' test: the explicit record first, the creator only when there is no record."""
    record = (session.agent_ownership or {}).get(agent_id)
    if record is not None:
        return session.user_id == record.created_by or session.user_id in record.assigned_to
    return created_by is not None and created_by == session.user_id


def can_read_agent(session: SessionContext, agent_id: str, *, created_by: str | None) -> bool:
    if isinstance(session, SystemSession):
        return True
    match session.agent_access:
        case "*" | "view":
            return True
        case "own":
            return owns_agent(session, agent_id, created_by=created_by)
        case _:
            return False


def can_write_agent(session: SessionContext, agent_id: str, *, created_by: str | None) -> bool:
    if isinstance(session, SystemSession):
        return True
    match session.agent_access:
        case "*":
            return True
        case "own":
            return owns_agent(session, agent_id, created_by=created_by)
        case _:
            return False


def can_assign_agent_role(session: SessionContext, role_priority: int) -> bool:
    """Nobody mints a role stronger (lower priority) than their own; a system session may."""
    if session.priority is None:
        return isinstance(session, SystemSession)
    return role_priority >= session.priority


def can_open_conversation(session: SessionContext, *, owner: str) -> bool:
    """A conversation is its creator's (a fork is its forker's): another member neither reads nor
    continues it, unless their role is at least as strong as the admin tier."""
    if isinstance(session, SystemSession):
        return True
    if session.user_id == owner:
        return True
    return session.priority is not None and session.priority <= CONVERSATION_OVERSIGHT_PRIORITY
