"""A halt owes a handoff (seed 001, item 5).

When a budget runs out the turn settles SUSPENDED, never completed, and a checkpoint is published: what
ran out, what was used, the last thing the agent said. The default publisher writes it into the
conversation (an event row the next turn reads, and ``meta.json["handoff"]``). The turn reports the
checkpoint's actual fate: ``published``, ``failed`` (writing it raised), or ``absent`` (no publisher).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal, Protocol

from ..contracts.envelope import BudgetUse
from ..contracts.identity import SessionContext
from ..store.conversations import Conversation, utcnow_iso

__all__ = ["ConversationHandoff", "HandoffPublisher", "publish_handoff"]

log = logging.getLogger(__name__)
Fate = Literal["published", "failed", "absent"]


class HandoffPublisher(Protocol):
    async def publish(
        self, conversation: Conversation, *, session: SessionContext, budget: str, used: BudgetUse, text: str
    ) -> None: ...


class ConversationHandoff:
    async def publish(
        self, conversation: Conversation, *, session: SessionContext, budget: str, used: BudgetUse, text: str
    ) -> None:
        checkpoint = {
            "budget": budget,
            "steps": used.steps,
            "tokens": used.tokens,
            "usd": round(used.usd, 6),
            "request_id": session.request_id,
            "at": utcnow_iso(),
            "last_text": text[-2000:],
        }
        body = (
            f"The previous turn was suspended: its {budget} budget ran out after {used.steps} steps. "
            "Resume from where it stopped."
        )
        await asyncio.to_thread(
            conversation.append,
            {"role": "event", "content": [{"type": "handoff", "text": body, "checkpoint": checkpoint}]},
        )
        await asyncio.to_thread(conversation.update_meta, lambda m: m.update(handoff=checkpoint))


async def publish_handoff(
    conversation: Conversation,
    *,
    publisher: HandoffPublisher | None,
    session: SessionContext,
    budget: str,
    used: BudgetUse,
    text: str,
) -> Fate:
    if publisher is None:
        return "absent"
    try:
        await publisher.publish(conversation, session=session, budget=budget, used=used, text=text)
    except Exception:
        log.exception("could not publish the handoff of %s", session.request_id)
        return "failed"
    return "published"
