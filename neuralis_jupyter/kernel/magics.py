"""Line magics of the Neuralis kernel, and ``%%chat`` for a plain Python kernel.

%agent [name]                     show or switch the agent (a new conversation starts)
%model [provider:model]           show or set the model for the next turns
%guard [safe|balanced|auto]       show or flip the guard profile; a running turn sees it at its next call
%conversation [new|<id>|fork]     show, start, resume or fork the conversation
%usage                            this conversation's usage as a DataFrame
%transcript                       this conversation's transcript as a DataFrame
%stop                             stop the running turn (from a subshell, another notebook, or the server)
%inbox [RUN_ID TEXT]              send TEXT to a background sub-agent run's inbox; alone, list what waits
%%chat                            the cell is a chat message (for a kernel that is not Neuralis)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from .chat import ChatController

if TYPE_CHECKING:
    from ..runtime.inbox import BackgroundDelegates
    from ..workbench import ChatTarget, Workbench

__all__ = ["NeuralisMagics", "chat_transformer", "inbox_transformer", "load_ipython_extension", "register"]

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
        if not stopped:
            return "no turn is running here; a stop request was recorded"
        return "stopping the running turn" if stopped == 1 else f"stopping {stopped} running turns"

    @line_magic
    def inbox(self, line: str) -> str:
        """``%inbox RUN_ID TEXT`` sends TEXT to the inbox of background sub-agent run RUN_ID of this
        conversation; it arrives when the run's current turn ends, and the run reports here again.
        ``%inbox`` alone lists the messages still undelivered to this conversation's runs."""
        controller = self.controller
        # The sender is the kernel's own session, fixed when the kernel started: nothing on the line
        # (nor a cell that edits os.environ) can name another.
        target = controller.target()
        run_id, _, text = line.strip().partition(" ")
        if not run_id:
            return _undelivered(target)
        if _agent_code_running(controller):
            from ..runtime.inbox_errors import InboxHopsExceeded

            # The kernel's session is the user's, and an agent's python call runs as the kernel: from
            # there, %inbox would let an agent message sub-agents (its own among them) as the user.
            raise InboxHopsExceeded(
                run_id,
                "an agent's code cannot message sub-agents; only the user can: an agent's python call "
                "is running in this kernel. Send it from a cell of your own once the call has ended",
            )
        runs = _delegates(controller.bench)
        runs.recover(target.conversation)  # a run started before a restart: refused with its reason
        # Accepted and written here, on this thread; the run's loop (the main shell's, which a python
        # cell may be blocking) takes the message when it is free: a subshell's %inbox never waits.
        queued = runs.send_now(run_id, text, target.session)
        return (
            f"queued {queued['id']} for run {run_id}: it arrives when the run's current turn ends, "
            "and the run reports here again"
        )

    @cell_magic
    def chat(self, line: str, cell: str) -> None:
        # Reached only when the input transformer below did not run (e.g. %%chat called by name):
        # a chat turn must be awaited by the kernel so that widget clicks reach it while it waits.
        raise RuntimeError("%%chat must start the cell; it is run as an awaited chat turn")


def _delegates(bench: Workbench) -> BackgroundDelegates:
    _ = bench.packages  # binding the native tools builds the registry of background runs
    return bench.tool_env.services["delegates"]


def _undelivered(target: ChatTarget) -> str:
    """The conversation's runs' undelivered messages, read from their inbox files (after a restart
    too); the conversation is the kernel's own, opened through the same gate as every turn."""
    from ..runtime.inbox import read_undelivered

    base = target.conversation.path / "delegates"
    lines = []
    for directory in sorted(base.iterdir()) if base.is_dir() else ():
        for message in read_undelivered(directory):
            first = message["text"].strip().splitlines()[0]
            text = first if len(first) <= 80 else first[:79] + "…"
            sender = message["from"]["userId"]
            lines.append(f"{directory.name}  {message['id']}  from {sender} at {message['queuedAt']}: {text}")
    if not lines:
        return "no messages wait undelivered for this conversation's sub-agent runs"
    return "\n".join(["undelivered messages (run, id, sender, queued at, text):", *lines])


def _agent_code_running(controller: ChatController) -> bool:
    """Whether a turn's ``python`` call runs in this kernel (on any shell's thread)."""
    with controller._turns_lock:
        turns = list(controller._turns)
    return any(turn.runner.running for turn in turns)


def inbox_transformer(lines: list[str]) -> list[str]:
    """``%inbox`` lines as plain magic calls, so that a message ending in ``?`` is sent rather than
    taken by IPython for a help request. Only a cell of line magics is rewritten: in any other cell a
    line that reads ``%inbox`` may sit inside a string, and a cell magic's body is its own."""
    if not lines or lines[0].lstrip().startswith("%%"):
        return lines
    if not all(line.lstrip().startswith("%") for line in lines if line.strip()):
        return lines
    out = []
    for line in lines:
        stripped = line.strip()
        if stripped == "%inbox" or stripped.startswith("%inbox "):
            indent = line[: len(line) - len(line.lstrip())]
            args = stripped.removeprefix("%inbox").strip()
            line = f"{indent}get_ipython().run_line_magic('inbox', {args!r})\n"
        out.append(line)
    return out


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
        shell.input_transformers_cleanup.insert(0, inbox_transformer)
        shell.input_transformers_cleanup.insert(0, chat_transformer)
    return controller


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext neuralis_jupyter``: ``%%chat`` and the line magics in any IPython kernel."""
    register(shell)
