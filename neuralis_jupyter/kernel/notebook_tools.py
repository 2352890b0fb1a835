"""Tools a kernel turn adds: ``python`` runs code in the notebook's namespace, ``variables`` lists it.

``python`` is declared a write with the ``exec`` effect: it changes the researcher's namespace and runs
arbitrary code, so the guard asks before it under safe and balanced. Its output (stdout, stderr, the
value of the last expression, or the traceback) is captured and bounded. ``variables`` is a plain read:
names with their type, shape, dtypes and a short repr.

The code runs where a cell's code runs, on the kernel's main thread, so that it behaves like a cell
(signal handlers, GUI event loops, libraries that check which thread they are on). That thread also
runs the event loop, which the code blocks: a stop set on the loop would be seen only when the code
returned. :class:`CodeRunner` therefore lets SIGINT raise ``KeyboardInterrupt`` in the code, as in a
normal cell, and turns a stop from elsewhere (``%stop`` on a subshell, a stop flag in the store) into a
SIGINT to the main thread. An interrupted call stops the turn.
"""

from __future__ import annotations

import ast
import contextlib
import io
import logging
import signal
import threading
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any, Literal

from ..contracts import refusals
from ..runtime import Tool, ToolOutput
from ..runtime.tools import AGENT_CORE_ID

__all__ = ["MAX_OUTPUT_CHARS", "CodeRunner", "notebook_tools"]

log = logging.getLogger(__name__)

Ran = Literal["ok", "error", "interrupted"]
_INTERRUPTED = "KeyboardInterrupt: the code was interrupted\n"

MAX_OUTPUT_CHARS = 10_000
#: The kernel's own tools are first-party code: they are trusted as the builtin package is.
KERNEL_TOOLS_PACKAGE = AGENT_CORE_ID
_REPR_CHARS = 120

PYTHON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"code": {"type": "string", "minLength": 1, "description": "Python source to run."}},
    "required": ["code"],
    "additionalProperties": False,
}
VARIABLES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "names": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Only these names; all public variables when omitted.",
        }
    },
    "additionalProperties": False,
}


def _bounded(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    if len(text) <= limit:
        return text
    head, tail = text[: limit // 2], text[-limit // 2 :]
    return f"{head}\n[… {len(text) - limit:,} characters omitted …]\n{tail}"


def run_python(code: str, namespace: dict[str, Any]) -> tuple[str, Ran]:
    """Run ``code`` in ``namespace`` like a REPL cell; (output, how it ended). A ``KeyboardInterrupt``
    ends it as "interrupted", keeping what it printed before."""
    out = io.StringIO()
    try:
        tree = ast.parse(code, mode="exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            exec(compile(tree, "<agent>", "exec"), namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), "<agent>", "eval"), namespace)
                if value is not None:
                    namespace["_"] = value
                    print(repr(value))
    except KeyboardInterrupt:
        out.write(_INTERRUPTED)
        return _bounded(out.getvalue()), "interrupted"
    except Exception:
        out.write(traceback.format_exc(limit=-3))
        return _bounded(out.getvalue()), "error"
    return _bounded(out.getvalue() or "(no output)"), "ok"


class CodeRunner:
    """Runs the ``python`` tool's code on the main thread so that a stop can interrupt it (see the module
    docstring). One per turn: ``poll`` answers whether a stop for the turn was written to the store.

    :meth:`interrupt` may be called from any thread. It sends SIGINT while holding the lock that the main
    thread takes to leave the code, so a signal it sends always finds this runner's handler installed.
    """

    def __init__(self, *, poll: Callable[[], bool] | None = None, poll_interval: float = 0.25) -> None:
        self._poll = poll
        self._interval = poll_interval
        self._lock = threading.Lock()
        self._running = False
        self._signalled = False
        # Calls of ``run`` not yet returned, on whichever thread (``_running`` is the main thread's).
        self._calls = 0
        #: Why the running code was asked to stop (the first reason wins); ``None`` for a plain SIGINT.
        self.reason: str | None = None

    def interrupt(self, reason: str) -> bool:
        """Interrupt the code running on the main thread; False when none is running."""
        with self._lock:
            if not self._running:
                return False
            self.reason = self.reason or reason
            main = threading.main_thread().ident
            assert main is not None
            signal.pthread_kill(main, signal.SIGINT)
        return True

    @property
    def running(self) -> bool:
        """Whether the agent's code runs now (on any thread): what it calls runs as the agent."""
        return self._calls > 0

    def run(self, code: str, namespace: dict[str, Any]) -> tuple[str, Ran]:
        self._calls += 1
        try:
            return self._run(code, namespace)
        finally:
            self._calls -= 1

    def _run(self, code: str, namespace: dict[str, Any]) -> tuple[str, Ran]:
        if threading.current_thread() is not threading.main_thread():
            return run_python(code, namespace)  # a subshell's turn: signals reach only the main thread
        self._signalled, self.reason = False, None
        text, ran = _INTERRUPTED, "interrupted"
        done = threading.Event()
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            # The handler raises only while ``_running``: after _leave() nothing here can be interrupted.
            try:
                self._running = True
                if self._poll is not None:
                    watch = threading.Thread(target=self._watch, args=(done,), name="stop-watch", daemon=True)
                    watch.start()
                text, ran = run_python(code, namespace)
            finally:
                self._leave()
        except KeyboardInterrupt:  # outside the code itself (it was starting, or had just returned)
            pass
        finally:
            done.set()
            signal.signal(signal.SIGINT, previous)
        if self._signalled and ran != "interrupted":
            # The stop arrived as the code returned: its output is whole, but the turn still stops.
            ran = "interrupted"
        return text, ran

    def _leave(self) -> None:
        while True:
            try:
                with self._lock:
                    self._running = False
                return
            except KeyboardInterrupt:  # raised while taking the lock: the handler has seen it
                continue

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self._signalled = True
        if self._running:
            raise KeyboardInterrupt

    def _watch(self, done: threading.Event) -> None:
        """The turn's own watcher polls the store on the event loop, which the code blocks: poll here."""
        assert self._poll is not None
        while not done.wait(self._interval):
            try:
                found = self._poll()
            except Exception:
                log.warning("could not poll for a stop request while python ran", exc_info=True)
                continue
            if found:
                self.interrupt("stop requested")
                return


def describe(name: str, value: Any) -> dict[str, Any]:
    info: dict[str, Any] = {"name": name, "type": type(value).__name__}
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple):
        info["shape"] = list(shape)
    dtypes = getattr(value, "dtypes", None)
    if dtypes is not None and hasattr(dtypes, "items"):
        info["dtypes"] = {str(k): str(v) for k, v in list(dtypes.items())[:20]}
    elif getattr(value, "dtype", None) is not None:
        info["dtype"] = str(value.dtype)
    elif isinstance(value, (list, tuple, set, dict, str)):
        info["len"] = len(value)
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<repr failed: {exc}>"
    info["repr"] = text if len(text) <= _REPR_CHARS else text[: _REPR_CHARS - 1] + "…"
    return info


def _public(namespace: dict[str, Any]) -> dict[str, Any]:
    import types

    hidden = {"In", "Out", "exit", "quit", "get_ipython", "open"}
    return {
        k: v
        for k, v in namespace.items()
        if not k.startswith("_")
        and k not in hidden
        and not isinstance(v, (types.ModuleType, types.FunctionType, type))
    }


def notebook_tools(shell: Any, runner: CodeRunner | None = None) -> list[Tool]:
    namespace = shell.user_ns
    runner = runner or CodeRunner()

    async def python(args: dict[str, Any], ctx: Any) -> ToolOutput:
        if ctx.stop.is_set():  # e.g. another call of this step was interrupted: this one must not start
            return ToolOutput(content=refusals.stopped("python"), is_error=True, outcome="stopped")
        text, ran = runner.run(args["code"], namespace)
        if ran == "interrupted":
            # Like an interrupted cell, an interrupted call ends the turn (the partial answer is kept).
            reason = runner.reason or "interrupted"
            ctx.stop.set(reason)
            return ToolOutput(content=text, is_error=True, outcome="stopped", data={"interrupted": reason})
        return ToolOutput(content=text, is_error=ran == "error", outcome=ran)

    async def variables(args: dict[str, Any], ctx: Any) -> ToolOutput:
        import json

        public = _public(namespace)
        names = args.get("names") or sorted(public)
        found = [describe(n, namespace[n]) for n in names if n in namespace]
        missing = [n for n in names if n not in namespace]
        result: dict[str, Any] = {"variables": found}
        if missing:
            result["missing"] = missing
        return ToolOutput(content=json.dumps(result, indent=1), data=result)

    return [
        Tool(
            name="python",
            description=(
                "Run Python in the notebook's own namespace (the researcher's variables). Returns what it "
                "printed and the value of the last expression. Changes persist in the notebook."
            ),
            input_schema=PYTHON_SCHEMA,
            handler=python,
            access="write",
            effects=frozenset({"exec"}),
            attested=True,
            package_id=KERNEL_TOOLS_PACKAGE,
        ),
        Tool(
            name="variables",
            description="List the notebook's variables with their type, shape, dtypes and a short repr.",
            input_schema=VARIABLES_SCHEMA,
            handler=variables,
            access="read",
            attested=True,
            package_id=KERNEL_TOOLS_PACKAGE,
        ),
    ]
