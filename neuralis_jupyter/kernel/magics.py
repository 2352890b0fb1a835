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

    @line_magic
    def agent(self, line: str) -> str:
        name = line.strip()
        if name:
            self.controller.agent_id = name
            self.controller.conversation_id = None
            self.controller.target()  # refuses an agent the user cannot see, before the next cell
        return f"agent: {self.controller.agent_id or self.controller.target().agent.id}"

    @line_magic
    def model(self, line: str) -> str:
        ref = line.strip()
        if ref:
            if ":" not in ref:
                raise ValueError(
                    f"write the model as PROVIDER:MODEL, e.g. anthropic:claude-sonnet-4-6, not {ref!r}"
                )
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
        if arg == "new":
            self.controller.conversation_id = None
            self.controller.target()
        elif arg == "fork":
            bench = self.controller.bench
            source = self.controller.target().conversation
            fork = bench.store.conversations.fork(source, user_id=self.controller.user_id)
            self.controller.conversation_id = fork.id
        elif arg:
            self.controller.conversation_id = arg
            self.controller.target()
        target = self.controller.target()
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
