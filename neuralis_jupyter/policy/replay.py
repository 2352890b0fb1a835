"""The one path by which an approved interaction runs, in-turn or out of band.

Whether the approval came from the approver the turn was waiting on or from a later route or process,
the call runs only after :func:`claim`:

1. the record is re-loaded from the store and must be ``approved``;
2. the tool found now must be the one the record names (same name, same package);
3. the stored input's sha256 must equal the stored hash (and, in-turn, the hash of the input the
   runtime is about to run), so an edited row never runs, and it must still fit the tool's schema;
4. the requester's session is refreshed (their grants may have changed while the call waited) and the
   policy arms are run again, the feature gate among them;
5. the record moves ``approved -> executed`` in one compare-and-set, so it runs at most once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._jsonschema import jsonschema as load_jsonschema
from ..contracts.access import has_feature
from ..contracts.identity import SessionContext, SystemSession, is_sentinel, session_from_dict
from ..runtime.permission import PolicyDecision
from ..runtime.tools import Tool, ToolOutput
from ..store.errors import NotFound
from ..store.interactions import InteractionConflict, InteractionStore, PendingInteraction, input_hash
from ..store.projects import ProjectStore
from .errors import InteractionForbidden, InteractionNotFound, ReplayCheck, ReplayRefused

if TYPE_CHECKING:
    from ..runtime.context import ToolContext

__all__ = ["SessionSource", "authorize_resolver", "claim", "load", "project_session_source", "run_handler"]

log = logging.getLogger(__name__)

#: The requester's CURRENT session, from the one it asked with; blocking (runs in a worker thread).
#: Raising (e.g. ``NotAMember``) refuses the replay.
SessionSource = Callable[[SessionContext], SessionContext]
_AUTHORITY = (
    "role",
    "priority",
    "granted_features",
    "agent_access",
    "spend_limits",
    "llm_rate_limit_rpm",
    "agent_ownership",
)


def project_session_source(projects: ProjectStore) -> SessionSource:
    """Refresh a session's authority fields from project.json; its ids stay as they were."""

    def refresh(session: SessionContext) -> SessionContext:
        current = projects.session_for(session.user_id, session.project_id)
        return session.replace(**{name: getattr(current, name) for name in _AUTHORITY})

    return refresh


async def load(store: InteractionStore, interaction_id: str) -> PendingInteraction:
    try:
        return await asyncio.to_thread(store.get, interaction_id)
    except NotFound:
        raise InteractionNotFound(interaction_id, f"no interaction {interaction_id!r}") from None


async def claim(
    store: InteractionStore,
    interaction_id: str,
    *,
    tool: Tool | None,
    session: SessionContext,
    recheck: Callable[[Tool, SessionContext], PolicyDecision],
    refresh: SessionSource | None,
    expected_hash: str | None = None,
) -> tuple[PendingInteraction, SessionContext]:
    """Verify an approved interaction and claim its one execution; :class:`ReplayRefused` otherwise.

    Returns the VERIFIED record (its ``input_json`` is what may run) and the refreshed session.
    """
    record = await load(store, interaction_id)

    def refuse(message: str, check: ReplayCheck, arm: str | None = None) -> ReplayRefused:
        return ReplayRefused(interaction_id, message, check=check, arm=arm)

    if record.status != "approved":
        raise refuse(f"interaction {interaction_id!r} is {record.status}, not approved", "status")
    if tool is None or (tool.name, tool.package_id) != (record.tool_name, record.package_id):
        raise refuse(f"the tool {record.tool_name!r} of {record.package_id!r} is not available now", "tool")
    if input_hash(record.input_json) != record.input_hash or (
        expected_hash is not None and expected_hash != record.input_hash
    ):
        raise refuse(
            f"the stored input of {interaction_id!r} does not match its hash; it will not run", "input_hash"
        )
    try:
        stored = json.loads(record.input_json)
    except ValueError:
        raise refuse(
            f"the stored input of {interaction_id!r} is not JSON; it will not run", "input"
        ) from None
    schema = tool.input_schema
    jsonschema = load_jsonschema()
    problem = jsonschema.exceptions.best_match(
        jsonschema.validators.validator_for(schema)(schema).iter_errors(stored)
    )
    if problem is not None:
        raise refuse(f"the stored input no longer fits {tool.name}'s schema: {problem.message}", "input")
    if refresh is not None:
        try:
            session = await asyncio.to_thread(refresh, session)
        except Exception as exc:
            raise refuse(f"the requester's session could not be re-established: {exc}", "session") from exc
    decision = recheck(tool, session)
    if not decision.allowed:
        raise refuse(decision.reason or "the policy denies it now", "policy", decision.arm)
    try:
        await asyncio.to_thread(store.mark_executed, interaction_id)
    except InteractionConflict as exc:
        raise refuse(f"interaction {interaction_id!r} is {exc.status}: it runs only once", "status") from None
    return record, session


async def run_handler(tool: Tool, arguments: dict[str, Any], ctx: ToolContext, limit: float) -> ToolOutput:
    """Run a replayed call's handler within ``limit`` seconds; a failure is an error output."""
    try:
        out = await asyncio.wait_for(tool.handler(arguments, ctx), limit)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # as in dispatch: a tool's failure is information, not a crash
        log.info("replayed tool %s failed: %s", tool.name, exc, exc_info=True)
        return ToolOutput(content=f"Error: {type(exc).__name__}: {exc}", is_error=True, outcome="error")
    return out if isinstance(out, ToolOutput) else ToolOutput(content=str(out))


def authorize_resolver(record: PendingInteraction, by: SessionContext) -> None:
    """The requester, or a stronger-priority role holding core.execute in the same project."""
    if isinstance(by, SystemSession) or any(is_sentinel(v) for v in (by.user_id, by.project_id)):
        raise InteractionForbidden(
            record.id, "an approval is a person's decision; a system session cannot give it"
        )
    if by.project_id != record.project_id:
        raise InteractionNotFound(record.id, f"no interaction {record.id!r}")
    if by.user_id == record.user_id:
        return
    requester = session_from_dict(json.loads(record.session_json))
    if (
        by.priority is not None
        and requester.priority is not None
        and by.priority < requester.priority
        and has_feature(by, "core.execute")
    ):
        return
    raise InteractionForbidden(
        record.id,
        f"only {record.user_id!r} or a role stronger than theirs with core.execute may resolve {record.id!r}",
    )
