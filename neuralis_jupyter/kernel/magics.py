"""Line magics of the Neuralis kernel, and ``%%chat`` for a plain Python kernel.

%agent [name]                     show or switch the agent (a new conversation starts)
%model [provider:model]           show or set the model for the next turns
%guard [safe|balanced|auto]       show or flip the guard profile; a running turn sees it at its next call
%conversation [new|<id>|fork]     show, start, resume or fork the conversation
%usage                            this conversation's usage as a DataFrame
%transcript                       this conversation's transcript as a DataFrame
%stop                             stop the running turn (from a subshell, another notebook, or the server)
%%chat                            the cell is a chat message (for a kernel that is not Neuralis)
"""

from __future__ import annotations

from typing import Any

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from .chat import ChatController

__all__ = ["NeuralisMagics", "chat_transformer", "load_ipython_extension", "register"]

_GUARDS = ("safe", "balanced", "auto")


@magics_class
class NeuralisMagics(Magics):
    def __init__(self, shell: Any, controller: ChatController) -> None:
        super().__init__(shell)
        self.controller = controller

    # Every switch checks its target before it changes anything: a refused %agent or %conversation
    # leaves the kernel talking where it did.

    @line_magic
    def agent(self, line: str) -> str:
        name = line.strip()
        if name:
            self.controller.retarget(agent_id=name, conversation_id=None)  # a new conversation
        return f"agent: {self.controller.agent_id or self.controller.target().agent.id}"

    @line_magic
    def model(self, line: str) -> str:
        ref = line.strip()
        if ref:
            self.controller.check_model(ref)
            self.controller.model_ref = ref
        return (
            f"model: {self.controller.model_ref or self.controller.bench.model_ref(self.controller.target())}"
        )

    @line_magic
    def guard(self, line: str) -> str:
        profile = line.strip()
        if profile:
            if profile not in _GUARDS:
                raise ValueError(f"the guard profile is one of {', '.join(_GUARDS)}, not {profile!r}")
            self.controller.set_guard(profile)
        return f"guard: {self.controller.guard.profile}"

    @line_magic
    def conversation(self, line: str) -> str:
        arg = line.strip()
        controller = self.controller
        if arg == "new":
            target = controller.retarget(agent_id=controller.agent_id, conversation_id=None)
        elif arg == "fork":
            source = controller.target().conversation
            fork = controller.bench.store.conversations.fork(source, user_id=controller.user_id)
            target = controller.retarget(agent_id=controller.agent_id, conversation_id=fork.id)
        elif arg:
            target = controller.retarget(agent_id=controller.agent_id, conversation_id=arg)
        else:
            target = controller.target()
        return f"conversation: {target.conversation.id} (agent {target.agent.id})"

    @line_magic
    def usage(self, line: str) -> Any:
        from .. import frames

        target = self.controller.target()
        return frames.usage(
            project=target.session.project_id,
            conversation=target.conversation.id,
            store=self.controller.bench.store,
        )

    @line_magic
    def transcript(self, line: str) -> Any:
        from .. import frames

        target = self.controller.target()
        return frames.transcript(
            target.conversation.id,
            project=target.session.project_id,
            agent=target.agent.id,
            store=self.controller.bench.store,
        )

    @line_magic
    def stop(self, line: str) -> str:
        stopped = self.controller.request_stop(line.strip() or "stopped from the notebook")
        return (
            "stopping the running turn" if stopped else "no turn is running here; a stop request was recorded"
        )

    @cell_magic
    def chat(self, line: str, cell: str) -> None:
        # Reached only when the input transformer below did not run (e.g. %%chat called by name):
        # a chat turn must be awaited by the kernel so that widget clicks reach it while it waits.
        raise RuntimeError("%%chat must start the cell; it is run as an awaited chat turn")


def chat_transformer(lines: list[str]) -> list[str]:
    """Turn a ``%%chat`` cell into ``await <controller>.run(<message>)`` so IPython awaits it."""
    if not lines or not lines[0].lstrip().startswith("%%chat"):
        return lines
    message = "".join(lines[1:])
    # The trailing ';' keeps the turn's result object out of the cell's output.
    return [f"await get_ipython()._neuralis_chat.run({message!r});\n"]


def register(shell: Any) -> ChatController:
    """Register the magics on ``shell``; return its chat controller."""
    controller = getattr(shell, "_neuralis_chat", None)
    if controller is None:
        controller = ChatController(shell)
        shell._neuralis_chat = controller
        shell.register_magics(NeuralisMagics(shell, controller))
        shell.input_transformers_cleanup.insert(0, chat_transformer)
    return controller


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext neuralis_jupyter``: ``%%chat`` and the line magics in any IPython kernel."""
    register(shell)
