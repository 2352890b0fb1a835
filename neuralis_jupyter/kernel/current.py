"""Which conversation this kernel talks in: for a notebook that analyses its own run, and ``neuralis run``.

``current()`` names the running kernel's chat target, so a notebook can filter the usage and
transcript frames to its own conversation and get the same output whatever else is in the data root::

    from neuralis_jupyter import frames
    from neuralis_jupyter.kernel.current import current

    me = current()
    frames.usage(project=me.project_id, conversation=me.conversation_id)

``run_report()`` is what ``neuralis run`` asks the kernel after each chat cell (as a silent user
expression): the data root, where the transcript and the usage went, and how much of the cassette the
run used. Nothing here is imported until it is called.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .chat import ChatController

__all__ = ["KernelChat", "current", "run_report"]


@dataclass(frozen=True, kw_only=True)
class KernelChat:
    """The kernel's chat target and where its records are kept."""

    project_id: str
    agent_id: str
    conversation_id: str
    data_root: Path
    #: The conversation's transcript (``messages.jsonl``).
    transcript: Path


def _controller() -> ChatController:
    from IPython import get_ipython

    controller = getattr(get_ipython(), "_neuralis_chat", None)
    if controller is None:
        raise RuntimeError(
            "current() needs the Neuralis kernel, or %load_ext neuralis_jupyter in an IPython kernel"
        )
    return controller


def current() -> KernelChat:
    """The conversation the next chat cell goes to (created now if no cell has chatted yet)."""
    from ..store.conversations import MESSAGES

    controller = _controller()
    target = controller.target()
    return KernelChat(
        project_id=target.session.project_id,
        agent_id=target.agent.id,
        conversation_id=target.conversation.id,
        data_root=controller.bench.store.data_root.root,
        transcript=target.conversation.path / MESSAGES,
    )


def run_report() -> str:
    """A JSON object for ``neuralis run``: data root, store, conversation (or null), cassette use."""
    from sqlalchemy.engine import make_url

    from ..providers.errors import CassetteMismatch

    controller = _controller()
    store = controller.bench.store
    url = make_url(store.settings.store_url)
    report: dict[str, Any] = {
        "data_root": str(store.data_root.root),
        "store": url.render_as_string(hide_password=True),
        "usage_file": url.database if url.get_backend_name() == "sqlite" else None,
        "conversation": None,
        "cassette": None,
    }
    if controller.conversation_id is not None:
        chat = current()
        report["conversation"] = {
            "project_id": chat.project_id,
            "agent_id": chat.agent_id,
            "conversation_id": chat.conversation_id,
            "transcript": str(chat.transcript),
        }
    cassette = controller.cassette
    if cassette is not None:
        incomplete = None
        try:
            cassette.assert_complete()
        except CassetteMismatch as exc:
            incomplete = exc.diff  # what is left over; there is no request to show a diff of
        report["cassette"] = {"path": str(cassette.path), "mode": cassette.mode, "incomplete": incomplete}
    return json.dumps(report)
