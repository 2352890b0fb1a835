"""Execute a notebook headless with nbclient: parameters, the kernel's environment, its run report.

This is the engine of ``neuralis run`` (:mod:`neuralis_jupyter.cli.run` is its command line).
:func:`inject_parameters` follows papermill: the values go into a new cell right after the cell tagged
``parameters`` (or at the top), tagged ``injected-parameters``; a cell injected by an earlier run is
replaced. :func:`execute_notebook` runs the cells one by one like ``NotebookClient.execute`` and, after
chat cells, before the next cell that could switch the conversation (a magic, ``%%python``) and at the
end, asks the kernel for its run report (a silent user expression; see
:mod:`neuralis_jupyter.kernel.current`): the conversations a run used are known without guessing from
the store, for one round trip per run of chat cells.

:func:`skip_iri_grammar` is for the command's own process: nbformat imports jsonschema, whose optional
``iri`` format checker imports ``rfc3987_syntax``, which builds some 40 Earley parsers at import (about
0.9 s, and more when they are collected at exit). A notebook's schema has no ``iri`` field.
"""

from __future__ import annotations

import ast
import asyncio
import json
import keyword
import logging
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ._jsonschema import skip_iri_grammar

if TYPE_CHECKING:
    from nbclient import NotebookClient
    from nbformat import NotebookNode

__all__ = [
    "CellFailure",
    "RunOutcome",
    "execute_notebook",
    "inject_parameters",
    "may_chat",
    "parse_parameters",
    "parse_value",
    "skip_iri_grammar",
]

log = logging.getLogger(__name__)

#: ``CellFailure.ename`` when Ctrl-C stopped the run.
INTERRUPTED = "KeyboardInterrupt"
PARAMETERS_TAG = "parameters"
INJECTED_TAG = "injected-parameters"
#: Seconds to wait for the kernel's run report.
_REPORT_WAIT = 30.0
_REPORT_EXPRESSION = "__import__('neuralis_jupyter.kernel.current', fromlist=['_']).run_report()"
_LITERALS: dict[str, Any] = {"true": True, "false": False, "none": None, "null": None}


def parse_value(text: str) -> Any:
    """``-p`` values: ints, floats, booleans, null/None, JSON arrays/objects/strings; else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text.lower() in _LITERALS:
        return _LITERALS[text.lower()]
    if text[:1] in ("[", "{", '"'):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass
    return text


def parse_parameters(items: Sequence[str]) -> dict[str, Any]:
    """``["n=3", "name=alice"]`` -> ``{"n": 3, "name": "alice"}``; ValueError names a bad item."""
    params: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier() or keyword.iskeyword(name):
            raise ValueError(f"-p {item!r}: write NAME=VALUE with NAME a Python identifier")
        params[name] = parse_value(value)
    return params


def inject_parameters(nb: NotebookNode, params: Mapping[str, Any], *, python_prefix: bool) -> int:
    """Insert the parameters cell; return its index. ``python_prefix`` starts it with ``%%python`` (in
    the Neuralis kernel a cell without it would be a chat message)."""
    import nbformat

    nb.cells = [c for c in nb.cells if INJECTED_TAG not in c.get("metadata", {}).get("tags", [])]
    tagged = [i for i, c in enumerate(nb.cells) if PARAMETERS_TAG in c.get("metadata", {}).get("tags", [])]
    index = tagged[-1] + 1 if tagged else 0
    lines = ["%%python"] if python_prefix else []
    lines.append("# Parameters injected by neuralis run")
    lines += [f"{name} = {value!r}" for name, value in params.items()]
    cell = nbformat.v4.new_code_cell("\n".join(lines), metadata={"tags": [INJECTED_TAG]})
    nb.cells.insert(index, cell)
    return index


def may_chat(source: str) -> bool:
    """True unless the cell surely runs as Python (``%%python``, a line magic, a shell escape). A wrong
    True costs the kernel one silent report, never a missed conversation."""
    stripped = source.lstrip()
    if stripped.startswith("%%chat"):
        return True
    return bool(stripped) and not stripped.startswith(("%", "!"))


@dataclass(frozen=True, kw_only=True)
class CellFailure:
    """The cell that stopped the run and its error."""

    index: int
    source: str
    ename: str
    evalue: str
    traceback: str = ""


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    notebook: NotebookNode
    failure: CellFailure | None = None
    #: The kernel's last run report (``None`` when the kernel could not give one).
    report: Mapping[str, Any] | None = None
    #: Every conversation a chat cell used, in order of first use.
    conversations: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)


async def _report(client: NotebookClient, wait: float) -> dict[str, Any] | None:
    """The kernel's run report, or ``None`` (a kernel without Neuralis, or no answer in time)."""
    from jupyter_client.utils import ensure_async

    assert client.kc is not None
    msg_id = client.kc.execute(
        "", silent=True, store_history=False, user_expressions={"neuralis": _REPORT_EXPRESSION}
    )
    try:
        reply = await ensure_async(client.kc.get_shell_msg(timeout=wait))
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = await ensure_async(client.kc.get_shell_msg(timeout=wait))
    except Exception:  # queue.Empty on timeout
        log.warning("the kernel gave no run report within %ss", wait)
        return None
    result = reply["content"].get("user_expressions", {}).get("neuralis", {})
    if result.get("status") != "ok":
        log.debug("no run report from the kernel: %s", result.get("evalue"))
        return None
    return json.loads(ast.literal_eval(result["data"]["text/plain"]))


def _note(report: Mapping[str, Any] | None, seen: dict[str, Mapping[str, Any]]) -> None:
    conversation = (report or {}).get("conversation")
    if conversation:
        seen.setdefault(conversation["conversation_id"], conversation)


def _failure(index: int, cell: NotebookNode, exc: Exception) -> CellFailure:
    from nbclient.exceptions import CellExecutionError

    if isinstance(exc, CellExecutionError):
        return CellFailure(
            index=index, source=cell.source, ename=exc.ename, evalue=exc.evalue, traceback=exc.traceback
        )
    return CellFailure(index=index, source=cell.source, ename=type(exc).__name__, evalue=str(exc))


async def execute_notebook(
    nb: NotebookNode,
    *,
    kernel_name: str,
    env: Mapping[str, str],
    cwd: Path,
    cell_timeout: float | None,
    startup_timeout: float = 60.0,
    kernel_stderr: IO[Any] | None = None,
) -> RunOutcome:
    """Run every code cell of ``nb`` (in place) until one fails; never raises for a cell's error.

    Ctrl-C stops the run at the current cell (``CellFailure.ename`` is :data:`INTERRUPTED`); leaving
    nbclient's kernel block then shuts the kernel down."""
    from jupyter_client.utils import ensure_async
    from nbclient import NotebookClient

    client = NotebookClient(
        nb,
        kernel_name=kernel_name,
        timeout=cell_timeout,
        startup_timeout=int(startup_timeout),
        resources={"metadata": {"path": str(cwd)}},
        store_widget_state=True,
    )
    seen: dict[str, Mapping[str, Any]] = {}
    start: dict[str, Any] = {"env": dict(env)}
    if kernel_stderr is not None:
        start["stderr"] = kernel_stderr
    async with client.async_setup_kernel(**start):
        assert client.kc is not None
        interrupted = asyncio.Event()
        task = asyncio.current_task()
        assert task is not None

        def on_sigint() -> None:  # replaces nbclient's handler, which only shuts the kernel down
            interrupted.set()
            task.cancel()

        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, on_sigint)
        info = await client.async_wait_for_reply(await ensure_async(client.kc.kernel_info()))
        if info is not None and "language_info" in info["content"]:
            nb.metadata["language_info"] = info["content"]["language_info"]
        failure, report = await _run_cells(client, nb, seen, interrupted)
        if failure is None or failure.ename not in ("DeadKernelError", "CellTimeoutError", INTERRUPTED):
            report = await _report(client, _REPORT_WAIT) or report
            _note(report, seen)
        client.set_widgets_metadata()
    return RunOutcome(notebook=nb, failure=failure, report=report, conversations=tuple(seen.values()))


async def _run_cells(
    client: NotebookClient, nb: NotebookNode, seen: dict[str, Mapping[str, Any]], interrupted: asyncio.Event
) -> tuple[CellFailure | None, dict[str, Any] | None]:
    """Execute the cells in order; the first failure stops them. Reports are asked for after chat cells,
    before the next cell that could switch the conversation."""
    from nbclient.exceptions import CellControlSignal, CellExecutionError, DeadKernelError

    report: dict[str, Any] | None = None
    chatted = False  # since the last report
    for index, cell in enumerate(nb.cells):
        code = cell.cell_type == "code" and bool(cell.source.strip())
        if code and chatted and not may_chat(cell.source):
            report = await _report(client, _REPORT_WAIT) or report
            _note(report, seen)
            chatted = False
        failure: CellFailure | None = None
        try:
            await client.async_execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
        except (CellExecutionError, CellControlSignal, DeadKernelError, TimeoutError) as exc:
            failure = _failure(index, cell, exc)
        except asyncio.CancelledError:
            if not interrupted.is_set():
                raise
        if interrupted.is_set():  # nbclient reports the cancelled wait as DeadKernelError
            task = asyncio.current_task()
            assert task is not None
            task.uncancel()
            failure = _failure(index, cell, KeyboardInterrupt("interrupted"))
        if failure is not None:
            return failure, report
        chatted = chatted or (code and may_chat(cell.source))
    return None, report
