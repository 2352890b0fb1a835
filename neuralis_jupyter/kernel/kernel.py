"""``NeuralisKernel``: IPython, except that a cell is a chat message to the current agent.

A cell that starts with ``%%python`` runs its remaining lines as IPython; so does any cell that starts
with a magic (``%agent research``, ``%%time``) or a shell escape. Everything else goes to the agent. The
turn is a coroutine awaited inside ``do_execute``: ipykernel >= 7.4 keeps delivering comm messages (a
widget's Approve click) while it awaits, and an interrupt stops the turn cleanly instead of killing it.
"""

from __future__ import annotations

import traceback
from typing import Any, Literal

from ipykernel.ipkernel import IPythonKernel

from .. import __version__

__all__ = ["NeuralisKernel", "classify"]

CellKind = Literal["python", "chat"]


def classify(code: str) -> tuple[CellKind, str]:
    """Which way a cell goes, and the code or message it carries."""
    stripped = code.lstrip()
    if stripped.startswith("%%python"):
        _, _, rest = stripped.partition("\n")
        return "python", rest
    if not stripped or stripped.startswith(("%", "!")):
        return "python", code
    return "chat", code.strip()


class NeuralisKernel(IPythonKernel):
    implementation = "neuralis"
    implementation_version = __version__
    banner = (
        "Neuralis Agent: a cell is a message to your agent; start a cell with %%python to run Python.\n"
        "Magics: %agent %model %guard %conversation %usage %transcript %stop %inbox"
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        from .magics import register

        self.chat = register(self.shell)

    async def do_execute(
        self,
        code: str,
        silent: bool,
        store_history: bool = True,
        user_expressions: dict[str, Any] | None = None,
        allow_stdin: bool = False,
        *,
        cell_meta: dict[str, Any] | None = None,
        cell_id: str | None = None,
    ) -> dict[str, Any]:
        kind, body = classify(code)
        if kind == "python":
            return await super().do_execute(
                body,
                silent,
                store_history,
                user_expressions,
                allow_stdin,
                cell_meta=cell_meta,
                cell_id=cell_id,
            )
        # IPython counts a cell when run_cell stores its history; a chat cell bypasses run_cell, so it
        # counts itself (the frontend already showed this number, with the execute_input).
        count = self.shell.execution_count
        if store_history and not silent:
            self.shell.execution_count += 1
        try:
            await self.chat.run(body)
        except Exception as exc:
            return self._error_reply(exc, count)
        return {"status": "ok", "execution_count": count, "payload": [], "user_expressions": {}}

    async def do_shutdown(self, restart: bool) -> dict[str, Any]:
        # What outlives turns (background shells and sub-agents) must not outlive the kernel.
        await self.chat.aclose()
        return super().do_shutdown(restart)

    def _error_reply(self, exc: BaseException, count: int) -> dict[str, Any]:
        from ..providers.errors import CassetteMismatch

        name = type(exc).__name__
        tb = traceback.format_exception(exc)
        if isinstance(exc, CassetteMismatch):  # the diff says what changed; our stack would not
            tb = [str(exc)]
        content = {"ename": name, "evalue": str(exc), "traceback": tb}
        self.send_response(self.iopub_socket, "error", content)
        return {"status": "error", "execution_count": count, **content}
