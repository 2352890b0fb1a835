"""The PolicyEngine: one object behind both runtime seams of a turn.

- ``policy=engine``: :meth:`PolicyEngine.check` runs the deny arms (:mod:`.arms`) on EVERY call, then
  the PreToolUse hooks, of which only a ``deny`` counts there: a hook can refuse any call, plain reads
  and intrinsic tools included.
- ``permission=engine``: :meth:`PolicyEngine.__call__` decides allow / deny / ask for the calls the
  runtime asks about (non-intrinsic writes, consent-requiring reads): PreToolUse hooks first (an
  explicit ``ask`` from a hook asks even under ``auto``: an admin's or project's policy beats the
  profile), then the LIVE guard profile (:mod:`.guard`). A plain read never asks, whatever a hook says.

An ask persists a pending interaction (the validated input and its hash), puts it to the
:class:`~.approval.Approver`, and on approval runs the SAME replay path as an out-of-band approval
(:func:`.replay.claim`): re-load, verify the hash, refresh the requester's session, re-run the arms.
:meth:`resolve` and :meth:`replay` are that out-of-band path for a route or a restarted process. Every
decision is audited (:mod:`.audit`).

Pass the SAME engine as ``policy=`` and ``permission=``: the permission side reuses the hooks' verdict
of the check that ran just before it (a hook is asked once per call), and refuses an ask it cannot
re-check. An ask whose turn is stopped while it waits is expired, so that a later approval cannot run
what the user withdrew.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..contracts.identity import SessionContext, SystemSession, is_sentinel, session_from_dict
from ..runtime.permission import PermissionDecision, PermissionRequest, PolicyDecision, needs_consent
from ..runtime.tools import Tool, ToolOutput, ToolRegistry
from ..store.interactions import InteractionConflict, PendingInteraction, canonical_json, input_hash
from .approval import WITHDRAWN, Approver, ApproverAnswer, HeadlessApprover, InteractionResolution, withdraw
from .arms import TRUST_TIERS, PolicyConfig, TrustOf, TrustTier, builtin_trust, evaluate_arms
from .audit import DecisionLog
from .errors import InteractionAlreadyResolved, ReplayRefused
from .guard import DEFAULT_GUARD, GuardProfile, GuardSource, LiveGuard, guard_floor, is_guard_profile
from .hooks import HookOutcome, HookRegistration, PreToolUseHooks
from .replay import SessionSource, authorize_resolver, claim, load, run_handler

if TYPE_CHECKING:
    from ..runtime.context import ToolContext
    from ..store import Store

__all__ = ["PolicyEngine", "ToolContextFactory"]

log = logging.getLogger(__name__)

#: Builds the context a replayed handler runs with; it never sees or supplies the input.
ToolContextFactory = Callable[[Tool, SessionContext], "ToolContext"]
_FLOOR_TEXT = {
    "egress": "sending data outside the platform",
    "exec": "executing code",
    "destructive": "a destructive change",
    "package_write": "a write by a package that is not first-party",
    "write": "any write",
}


class PolicyEngine:
    def __init__(
        self,
        store: Store,
        *,
        config: PolicyConfig | None = None,
        guard: GuardSource | GuardProfile = DEFAULT_GUARD,
        hooks: PreToolUseHooks | Iterable[HookRegistration] = (),
        approver: Approver | None = None,
        trust_of: TrustOf = builtin_trust,
        session_source: SessionSource | None = None,
        approval_timeout: float = 600.0,
        guard_timeout: float = 5.0,
        tool_timeout: float = 600.0,
    ) -> None:
        self.interactions = store.interactions
        self.log = DecisionLog(store.audit)
        self.config = config or PolicyConfig()
        self.guard: GuardSource = LiveGuard(guard) if isinstance(guard, str) else guard
        self.hooks = hooks if isinstance(hooks, PreToolUseHooks) else PreToolUseHooks(hooks)
        self.approver: Approver = approver or HeadlessApprover()
        self.trust_of = trust_of
        self.session_source = session_source
        self.approval_timeout = approval_timeout
        self.guard_timeout = guard_timeout
        self.tool_timeout = tool_timeout
        #: The hooks' verdict on a call :meth:`check` passed, for the permission stage that follows it.
        self._verdicts: dict[tuple[str | None, str], HookOutcome | None] = {}

    # -- the deny arms (runtime ToolPolicy) -------------------------------------------------------

    async def check(
        self, *, tool: Tool, input: Mapping[str, Any], session: SessionContext, step: int = 0
    ) -> PolicyDecision:
        if is_sentinel(session.user_id) or is_sentinel(session.project_id):
            # Nothing done under a sentinel can be attributed, audited or billed: fail closed.
            reason = "a session without a real user and project runs no tool; scope the system session"
            decision = PolicyDecision(allowed=False, reason=reason, arm="identity")
        else:
            decision = self._arms(tool, session)
        details: dict[str, Any] = {}
        if decision.allowed:
            verdict = await self.hooks.evaluate(PermissionRequest.of(tool, input, session, step=step))
            if verdict is not None and verdict.decision == "deny":
                reason = verdict.reason or f"hook {verdict.hook!r} denies it"
                decision = PolicyDecision(allowed=False, reason=reason, arm="hook")
                details.update(hook=verdict.hook, hook_source=verdict.source)
            elif needs_consent(tool) and session.tool_use_id:
                self._verdicts[session.request_id, session.tool_use_id] = verdict
        await self.log.record(
            session,
            action="tool.allowed" if decision.allowed else "tool.denied",
            subject=tool.name,
            outcome="allowed" if decision.allowed else "denied",
            arm=decision.arm or "policy",
            reason=decision.reason,
            package_id=tool.package_id,
            tool_use_id=session.tool_use_id,
            **details,
        )
        return decision

    def trust(self, package_id: str) -> TrustTier:
        """The package's tier; an unknown or failing answer counts as ``untrusted``."""
        try:
            tier = self.trust_of(package_id)
        except Exception:
            log.warning("no trust tier for package %r; treating it as untrusted", package_id, exc_info=True)
            return "untrusted"
        return tier if tier in TRUST_TIERS else "untrusted"

    def _arms(self, tool: Tool, session: SessionContext) -> PolicyDecision:
        return evaluate_arms(tool, session, config=self.config, trust=self.trust(tool.package_id))

    # -- allow / deny / ask (runtime PermissionHook) ----------------------------------------------

    async def __call__(self, request: PermissionRequest) -> PermissionDecision:
        session = request.session
        tool = request.tool
        details: dict[str, Any] = {"package_id": request.package_id, "tool_use_id": request.tool_use_id}
        key = (session.request_id, request.tool_use_id)
        verdict = self._verdicts.pop(key) if key in self._verdicts else await self.hooks.evaluate(request)
        profile: GuardProfile | None = None
        if verdict is not None:
            asked_by = f"hook:{verdict.hook}"
            details.update(hook=verdict.hook, hook_source=verdict.source)
            if verdict.decision != "ask":
                allowed = verdict.decision == "allow"
                await self._decided(request, allowed=allowed, arm="hook", reason=verdict.reason, **details)
                return PermissionDecision(allowed=allowed, reason=verdict.reason, decided_by=asked_by)
            why = verdict.reason or f"hook {verdict.hook!r} asks for approval"
        else:
            profile = await self._profile()
            floor = guard_floor(profile, request, trust=self.trust(request.package_id))
            asked_by = f"guard:{profile}"
            details.update(profile=profile, floor=floor)
            if floor is None:
                await self._decided(request, allowed=True, arm="guard", reason=None, **details)
                return PermissionDecision(allowed=True, decided_by=asked_by)
            why = f"the {profile!r} guard asks before {_FLOOR_TEXT[floor]}"
        if tool is None or isinstance(session, SystemSession):
            reason = (
                "a system session has nobody to ask"
                if tool is not None
                else "the request does not name its tool, so an approval could not be re-checked"
            )
            await self._decided(request, allowed=False, arm="approval", reason=reason, **details)
            return PermissionDecision(allowed=False, reason=reason, decided_by="policy")
        return await self._ask(request, tool, asked_by=asked_by, profile=profile, why=why, details=details)

    async def _ask(
        self,
        request: PermissionRequest,
        tool: Tool,
        *,
        asked_by: str,
        profile: GuardProfile | None,
        why: str,
        details: dict[str, Any],
    ) -> PermissionDecision:
        record = await asyncio.to_thread(
            self.interactions.create,
            session=request.session,
            tool_name=request.name,
            package_id=request.package_id,
            input=request.input,
            asked_by=asked_by,
            guard_profile=profile,
        )
        details["interaction_id"] = record.id
        try:
            await self.log.record(
                request.session,
                action="tool.asked",
                subject=request.name,
                outcome="asked",
                arm=asked_by.partition(":")[0],
                reason=why,
                **details,
            )
            answer = await self._answer(record)
        except asyncio.CancelledError:  # the turn was stopped while the ask waited: withdraw it
            if await withdraw(self.interactions, record.id):
                await self.log.record(
                    request.session,
                    action="interaction.expired",
                    subject=request.name,
                    outcome="expired",
                    arm="approval",
                    reason=WITHDRAWN,
                    **details,
                )
            raise
        if answer is None:
            reason = (
                f"no answer came in time; the call stays pending as interaction {record.id} and runs only "
                "if it is approved and replayed"
            )
            await self._decided(request, allowed=False, arm="approval", reason=reason, **details)
            return PermissionDecision(
                allowed=False, reason=reason, decided_by="pending", interaction_id=record.id
            )
        settled = await self._settle(record, request.session, answer)
        if settled.status != "approved":
            reason = settled.reason or f"interaction {record.id} is {settled.status}"
            return PermissionDecision(
                allowed=False, reason=reason, decided_by=settled.decided_by, interaction_id=record.id
            )
        try:
            await self._claim(
                record, tool=tool, session=request.session, expected=canonical_json(request.input)
            )
        except ReplayRefused as exc:
            return PermissionDecision(
                allowed=False, reason=str(exc), decided_by="replay", interaction_id=record.id
            )
        await self._decided(
            request, allowed=True, arm="approval", reason=None, decided_by=settled.decided_by, **details
        )
        return PermissionDecision(
            allowed=True, decided_by=f"approval:{settled.decided_by}", interaction_id=record.id
        )

    async def _answer(self, record: PendingInteraction) -> ApproverAnswer | None:
        try:
            return await asyncio.wait_for(self.approver.ask(record), self.approval_timeout)
        except TimeoutError:
            log.info(
                "no answer to interaction %s within %ss; it stays pending", record.id, self.approval_timeout
            )
        except Exception:
            log.exception("the approver failed on interaction %s; it stays pending", record.id)
        return None

    async def _settle(
        self, record: PendingInteraction, session: SessionContext, answer: ApproverAnswer
    ) -> PendingInteraction:
        try:
            settled = await asyncio.to_thread(
                self.interactions.resolve,
                record.id,
                approve=answer.approve,
                decided_by=answer.by,
                reason=answer.reason,
            )
        except InteractionConflict:  # resolved out of band meanwhile: that answer stands
            return await load(self.interactions, record.id)
        await self.log.record(
            session,
            action=f"interaction.{settled.status}",
            subject=record.tool_name,
            outcome=settled.status,
            arm="approval",
            reason=answer.reason,
            interaction_id=record.id,
            decided_by=answer.by,
        )
        return settled

    async def _claim(
        self, record: PendingInteraction, *, tool: Tool | None, session: SessionContext, expected: str | None
    ) -> tuple[PendingInteraction, SessionContext]:
        try:
            return await claim(
                self.interactions,
                record.id,
                tool=tool,
                session=session,
                recheck=self._arms,
                refresh=self.session_source,
                expected_hash=None if expected is None else input_hash(expected),
            )
        except ReplayRefused as exc:
            await self.log.record(
                session,
                action="tool.denied",
                subject=record.tool_name,
                outcome="denied",
                arm=exc.arm or "replay",
                reason=str(exc),
                interaction_id=record.id,
                check=exc.check,
            )
            raise

    async def _decided(
        self, request: PermissionRequest, *, allowed: bool, arm: str, reason: str | None, **details: Any
    ) -> None:
        await self.log.record(
            request.session,
            action="tool.allowed" if allowed else "tool.denied",
            subject=request.name,
            outcome="allowed" if allowed else "denied",
            arm=arm,
            reason=reason,
            **details,
        )

    async def _profile(self) -> GuardProfile:
        try:
            profile = await asyncio.wait_for(self.guard.current(), self.guard_timeout)
        except Exception:
            log.exception("could not read the guard profile; using 'safe'")
            return "safe"
        if not is_guard_profile(profile):
            log.error("the guard source answered %r; using 'safe'", profile)
            return "safe"
        return profile

    async def record_shadow(
        self, *, tool: Tool, input: Mapping[str, Any], session: SessionContext, reason: str | None = None
    ) -> None:
        """Audit a call shadow mode captured instead of running."""
        await self.log.record(
            session,
            action="tool.shadowed",
            subject=tool.name,
            outcome="shadowed",
            arm="shadow",
            reason=reason,
            package_id=tool.package_id,
            tool_use_id=session.tool_use_id,
            input_hash=input_hash(canonical_json(input)),
        )

    # -- out of band: a route, or a process that restarted ----------------------------------------

    async def resolve(
        self, interaction_id: str, *, approve: bool, by: SessionContext, reason: str | None = None
    ) -> InteractionResolution:
        """Approve or deny a pending interaction as ``by``: the requester, or a stronger role in the project.

        Nothing here can change what runs: there is no parameter for arguments.
        """
        record = await load(self.interactions, interaction_id)
        authorize_resolver(record, by)
        try:
            settled = await asyncio.to_thread(
                self.interactions.resolve,
                interaction_id,
                approve=approve,
                decided_by=by.user_id,
                reason=reason,
            )
        except InteractionConflict as exc:
            raise InteractionAlreadyResolved(interaction_id, str(exc)) from None
        await self.log.record(
            by,
            action=f"interaction.{settled.status}",
            subject=record.tool_name,
            outcome=settled.status,
            arm="approval",
            reason=reason,
            interaction_id=interaction_id,
            requested_by=record.user_id,
        )
        return InteractionResolution(
            interaction_id=interaction_id, status=settled.status, decided_by=settled.decided_by, reason=reason
        )

    async def replay(
        self, interaction_id: str, *, tools: ToolRegistry, runner: ToolContextFactory
    ) -> ToolOutput:
        """Run the persisted input of an APPROVED interaction, once, with the tool's handler."""
        record = await load(self.interactions, interaction_id)
        requester = session_from_dict(json.loads(record.session_json))
        tool = tools.get(record.tool_name)
        verified, session = await self._claim(record, tool=tool, session=requester, expected=None)
        assert tool is not None  # claim refuses a missing tool
        out = await run_handler(
            tool, json.loads(verified.input_json), runner(tool, session), self.tool_timeout
        )
        await self.log.record(
            session,
            action="interaction.replayed",
            subject=tool.name,
            outcome="error" if out.is_error else "executed",
            arm="replay",
            interaction_id=interaction_id,
            package_id=tool.package_id,
        )
        return out
