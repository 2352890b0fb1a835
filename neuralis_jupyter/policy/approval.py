"""Who answers an "ask": the :class:`Approver` seam, and the headless one that refuses at once.

An approver answers a persisted :class:`~neuralis_jupyter.store.interactions.PendingInteraction` with
approve or deny, or with ``None`` ("not now": the interaction stays pending and can be resolved later
out of band). It never supplies arguments: the only input that can ever run is the stored one. The
kernel supplies a widget approver; headless runs (``neuralis chat``, a scheduled turn) use
:class:`HeadlessApprover`, whose refusal says which profile or hook asked and how to change it.

An ask whose turn is stopped while it waits is :func:`withdraw`-n: expired, so that no later approval
can run a call the user walked away from.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from ..store.interactions import InteractionConflict, InteractionStatus, InteractionStore, PendingInteraction

__all__ = [
    "WITHDRAWN",
    "Approver",
    "ApproverAnswer",
    "DeferApprover",
    "HeadlessApprover",
    "InteractionResolution",
    "headless_refusal",
    "withdraw",
]

log = logging.getLogger(__name__)
#: The reason an ask is expired when its turn is stopped while it waits.
WITHDRAWN = "the turn was stopped while the call waited for approval"


@dataclass(frozen=True, kw_only=True)
class ApproverAnswer:
    approve: bool
    #: Who answered, for the audit trail and the card ("alice", "headless").
    by: str
    reason: str | None = None


class Approver(Protocol):
    async def ask(self, interaction: PendingInteraction) -> ApproverAnswer | None: ...


@dataclass(frozen=True, kw_only=True)
class InteractionResolution:
    interaction_id: str
    status: InteractionStatus
    decided_by: str | None
    reason: str | None


#: What a headless ``neuralis chat`` user can change.
CHAT_REMEDY = "rerun with --guard auto or allow it with a hook"


def headless_refusal(interaction: PendingInteraction, remedy: str = CHAT_REMEDY) -> str:
    """Why nobody could approve ``interaction`` in a headless run, and what to change."""
    tool = interaction.tool_name
    if interaction.asked_by.startswith("hook:"):
        hook = interaction.asked_by.removeprefix("hook:")
        return (
            f"nobody can approve {tool} in a headless run: hook {hook!r} asks for approval; "
            "change that hook or run the turn interactively"
        )
    return (
        f"nobody can approve {tool} in a headless run: the guard profile is "
        f"{interaction.guard_profile!r}; {remedy}"
    )


class HeadlessApprover:
    """Refuses every ask at once: in a headless run there is nobody to click. ``remedy`` says what the
    user of this host can change (a CLI flag, a notebook magic)."""

    def __init__(self, remedy: str = CHAT_REMEDY) -> None:
        self.remedy = remedy

    async def ask(self, interaction: PendingInteraction) -> ApproverAnswer | None:
        return ApproverAnswer(approve=False, by="headless", reason=headless_refusal(interaction, self.remedy))


class DeferApprover:
    """Leaves every ask pending for an out-of-band answer (a server route, a later process)."""

    async def ask(self, interaction: PendingInteraction) -> ApproverAnswer | None:
        return None


async def withdraw(store: InteractionStore, interaction_id: str) -> bool:
    """Expire a PENDING ask (a compare-and-set: an answer that came first stands); whether it moved.

    The update runs in a worker thread, so it completes even if the caller is cancelled again meanwhile.
    A failure is logged: the ask then stays pending.
    """
    try:
        await asyncio.to_thread(store.withdraw, interaction_id, reason=WITHDRAWN)
    except InteractionConflict:
        return False
    except Exception:
        log.exception("could not expire interaction %s; it stays pending", interaction_id)
        return False
    return True
