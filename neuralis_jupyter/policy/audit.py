"""Every policy decision as an audit event: who, which tool, which arm, the outcome and why.

``action`` names what was decided (``tool.allowed``, ``tool.denied``, ``tool.asked``,
``tool.shadowed``, ``interaction.approved``, ``interaction.denied``, ``interaction.replayed``); ``arm``
which part decided: a deny arm (``blocklist`` ... ``feature_gate``), ``policy`` (every arm passed),
``hook``, ``guard``, ``approval``, ``replay`` or ``shadow``. ``details`` carries the rest (package, tool
use id, profile, hook, interaction id, who answered).

Audit writes go through a worker thread with a timeout. A failed write is logged at error level and
does not change the decision it records.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..contracts.identity import SessionContext
from ..store.audit import AuditEvent, AuditStore

__all__ = ["DecisionLog"]

log = logging.getLogger(__name__)


class DecisionLog:
    def __init__(self, audit: AuditStore, *, timeout: float = 10.0) -> None:
        self.audit = audit
        self.timeout = timeout

    async def record(
        self,
        session: SessionContext,
        *,
        action: str,
        subject: str,
        outcome: str,
        arm: str | None = None,
        reason: str | None = None,
        **details: Any,
    ) -> None:
        event = AuditEvent(
            project_id=session.project_id,
            user_id=session.user_id,
            agent_id=session.agent_id,
            conversation_id=session.conversation_id,
            request_id=session.request_id,
            action=action,
            subject=subject,
            arm=arm,
            outcome=outcome,
            reason=reason,
            details={k: v for k, v in details.items() if v is not None} or None,
        )
        try:
            await asyncio.wait_for(asyncio.to_thread(self.audit.record, event), self.timeout)
        except Exception:
            log.exception("could not audit %s %s (%s) for %s", action, subject, outcome, session.user_id)
