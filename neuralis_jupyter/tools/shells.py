"""Background shells: commands that outlive the turn that started them and report back when they end.

Files: ``<conversation dir>/shells/<shellId>/meta.json`` (status, exitCode, startedAt, endedAt, command,
owner) and ``output.jsonl`` (one ``{"t", "stream", "text"}`` line per output chunk, ``t`` in seconds
since the start), appended in batches from a worker thread and capped at ``max_log_bytes``. Handles
carry ``data://`` URIs relative to the data root (:func:`resolve_data_uri`): no host path reaches the
model.

When a shell ends, its meta.json is made final, a ``background_report`` event row (exit code, bounded
head + tail) is appended to the conversation (the next turn's history shows it to the model), and then
the host's continuation runs ``(session, conversation, report)`` as the starter, with no request id so
that the new turn gets its own. A shell stopped by :meth:`BackgroundShells.kill` or ``aclose`` gets its
row but no continuation: whoever stopped it is already acting.

``list``, ``output`` and ``kill`` answer only the starter (same project, user and agent); anyone else
sees no shell (``NotFound``), except that a kill from another session of the shell's project is
refused with :class:`ShellStopForbidden` (``shell_stop_forbidden``).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict

from ..contracts.identity import SessionContext
from ..runtime.errors import NeuralisRuntimeError
from ..runtime.events import BackgroundReport
from ..store.conversations import Conversation, utcnow_iso
from ..store.errors import NotFound
from .sandbox import Capture, Exit, Launch, Stream, run_process

__all__ = [
    "BackgroundShells",
    "Continuation",
    "OutputLine",
    "ShellMeta",
    "ShellSpec",
    "ShellStarted",
    "ShellStopForbidden",
    "resolve_data_uri",
]

log = logging.getLogger(__name__)

ShellStatus = Literal["running", "exited", "timed_out", "killed", "failed"]
#: The host's "continue the conversation" hook: a new turn, as ``session``, with no user message.
Continuation = Callable[[SessionContext, Conversation, BackgroundReport], Awaitable[None]]
_KILL_WAIT = 5.0


class ShellStopForbidden(NeuralisRuntimeError, PermissionError):
    code = "shell_stop_forbidden"

    def __init__(self, shell_id: str) -> None:
        self.shell_id = shell_id
        super().__init__(f"shell {shell_id!r} was started by another agent's session; only it may stop it")


class ShellOwner(TypedDict):
    userId: str
    agentId: str | None
    projectId: str


class ShellMeta(TypedDict):
    shellId: str
    status: ShellStatus
    exitCode: int | None
    startedAt: str
    endedAt: str | None
    command: str
    cwd: str
    sandboxed: bool
    conversationId: str
    owner: ShellOwner
    statusUri: str
    outputUri: str


class ShellStarted(TypedDict):
    shellId: str
    statusUri: str
    outputUri: str
    status: Literal["running"]


class OutputLine(TypedDict):
    t: float
    stream: Literal["stdout", "stderr", "notice"]
    text: str


@dataclass(frozen=True, kw_only=True)
class ShellSpec:
    session: SessionContext
    conversation: Conversation
    command: str
    launch: Launch
    timeout: float
    report_bytes: int = 4_000
    max_log_bytes: int = 10_000_000


def data_uri(data_root: Path, path: Path) -> str:
    """``path`` (inside the data root) as a ``data://`` URI."""
    return "data://" + path.relative_to(data_root).as_posix()


def resolve_data_uri(data_root: Path, uri: str) -> Path:
    """The file a ``data://`` URI names; refuses anything that would leave the data root."""
    rel = uri.removeprefix("data://")
    if rel == uri or rel.startswith("/") or ".." in Path(rel).parts:
        raise ValueError(f"not a data:// path inside the data root: {uri!r}")
    return data_root / rel


class _Log:
    """Decodes a shell's output, queues it for output.jsonl, and keeps the report's head and tail."""

    def __init__(self, path: Path, *, max_bytes: int, report_bytes: int) -> None:
        self.path = path
        self.report = Capture(report_bytes)
        self._started = time.monotonic()
        self._max = max_bytes
        self._seen = 0
        self._pending: list[OutputLine] = []
        self._decoders = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in ("stdout", "stderr")}

    def add(self, stream: Stream, data: bytes) -> None:
        self.report.add(data)
        t = round(time.monotonic() - self._started, 3)
        if self._seen >= self._max:
            return
        self._seen += len(data)
        text = self._decoders[stream].decode(data)
        if text:
            self._pending.append({"t": t, "stream": stream, "text": text})
        if self._seen >= self._max:
            notice = f"[output beyond {self._max} bytes is not kept; the command keeps running]"
            self._pending.append({"t": t, "stream": "notice", "text": notice})

    async def flush(self) -> None:
        lines, self._pending = self._pending, []
        if lines:
            await asyncio.to_thread(_append_lines, self.path, lines)

    async def pump(self, done: asyncio.Event, interval: float) -> None:
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), timeout=interval)
            await self.flush()
        await self.flush()  # what arrived while the last batch was being written


def _append_lines(path: Path, lines: list[OutputLine]) -> None:
    data = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(data)


def _read_lines(path: Path, since: int) -> list[OutputLine]:
    try:
        with open(path, encoding="utf-8") as fh:
            return [json.loads(line) for i, line in enumerate(fh) if i >= since and line.endswith("\n")]
    except FileNotFoundError:
        return []


def _write_meta(directory: Path, meta: ShellMeta) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".meta.{secrets.token_hex(4)}.tmp"
    tmp.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, directory / "meta.json")
    (directory / "output.jsonl").touch()


@dataclass(kw_only=True)
class _Shell:
    spec: ShellSpec
    meta: ShellMeta
    directory: Path
    log: _Log
    kill: asyncio.Future[None]
    continuation: Continuation | None
    task: asyncio.Task[None] | None = None
    #: Set once meta.json is final and the report row is written (before any continuation runs).
    settled: asyncio.Event = field(default_factory=asyncio.Event)


class BackgroundShells:
    """Owns every background shell of one host process (``env.services["shells"]``)."""

    def __init__(
        self,
        *,
        data_root: Path,
        continuation_timeout: float = 3600.0,
        keep_finished: int = 200,
        flush_interval: float = 0.1,
    ) -> None:
        self.data_root = data_root
        self.continuation_timeout = continuation_timeout
        self.keep_finished = keep_finished
        self.flush_interval = flush_interval
        self._shells: dict[str, _Shell] = {}
        self._closing = False

    async def start(self, spec: ShellSpec, *, continuation: Continuation | None = None) -> ShellStarted:
        """Start ``spec`` detached from the calling turn and return its handle at once."""
        if self._closing:
            raise RuntimeError("the background shell manager is closed")
        shell_id = "nrs-sh-" + secrets.token_hex(12)
        directory = spec.conversation.path / "shells" / shell_id
        session = spec.session
        meta: ShellMeta = {
            "shellId": shell_id,
            "status": "running",
            "exitCode": None,
            "startedAt": utcnow_iso(),
            "endedAt": None,
            "command": spec.command,
            "cwd": str(spec.launch.cwd),
            "sandboxed": spec.launch.sandboxed,
            "conversationId": spec.conversation.id,
            "owner": {
                "userId": session.user_id,
                "agentId": session.agent_id,
                "projectId": session.project_id,
            },
            "statusUri": data_uri(self.data_root, directory / "meta.json"),
            "outputUri": data_uri(self.data_root, directory / "output.jsonl"),
        }
        await asyncio.to_thread(_write_meta, directory, meta)
        shell = _Shell(
            spec=spec,
            meta=meta,
            directory=directory,
            log=_Log(
                directory / "output.jsonl", max_bytes=spec.max_log_bytes, report_bytes=spec.report_bytes
            ),
            kill=asyncio.get_running_loop().create_future(),
            continuation=continuation,
        )
        self._shells[shell_id] = shell
        shell.task = asyncio.create_task(self._run(shell), name=f"background shell {shell_id}")
        log.info("background shell %s started for %s/%s", shell_id, session.user_id, session.agent_id)
        return {
            "shellId": shell_id,
            "statusUri": meta["statusUri"],
            "outputUri": meta["outputUri"],
            "status": "running",
        }

    # -- the runtime functions (the server exposes them as routes) ---------------------------------

    def list(self, session: SessionContext) -> list[ShellMeta]:
        """The caller's own shells (in the session's conversation when it names one), oldest first."""
        return [
            s.meta.copy()
            for s in self._shells.values()
            if _owns(session, s.meta) and session.conversation_id in (None, s.meta["conversationId"])
        ]

    async def output(self, session: SessionContext, shell_id: str, since: int = 0) -> list[OutputLine]:
        """Output lines with index >= ``since``; ``NotFound`` unless the caller started the shell."""
        if since < 0:
            raise ValueError(f"since must be >= 0, got {since!r}")
        shell = self._shells.get(shell_id)
        if shell is None or not _owns(session, shell.meta):
            raise NotFound("shell", shell_id)
        return await asyncio.to_thread(_read_lines, shell.log.path, since)

    async def kill(self, session: SessionContext, shell_id: str) -> ShellMeta:
        """Stop a shell the caller started; its final meta. Idempotent for an ended shell."""
        shell = self._shells.get(shell_id)
        if shell is None or shell.meta["owner"]["projectId"] != session.project_id:
            raise NotFound("shell", shell_id)
        if not _owns(session, shell.meta):
            raise ShellStopForbidden(shell_id)
        if not shell.kill.done():
            shell.kill.set_result(None)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(shell.settled.wait(), timeout=_KILL_WAIT)
        return shell.meta.copy()

    def pending(self) -> list[asyncio.Task[None]]:
        """The tasks of shells still running or still reporting back (for a host that must wait)."""
        return [s.task for s in self._shells.values() if s.task is not None and not s.task.done()]

    async def aclose(self) -> None:
        """Kill every running shell and wait for its report row; later ``start`` calls are refused."""
        self._closing = True
        tasks = [s.task for s in self._shells.values() if s.task is not None and not s.task.done()]
        for shell in self._shells.values():
            if not shell.kill.done():
                shell.kill.set_result(None)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=_KILL_WAIT)
        for task in pending:  # a continuation still running, or a stuck write
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=_KILL_WAIT)

    # -- one shell's life --------------------------------------------------------------------------

    async def _run(self, shell: _Shell) -> None:
        try:
            await self._finish(shell, await self._execute(shell))
        except Exception:
            log.exception("background shell %s failed", shell.meta["shellId"])
        finally:
            shell.settled.set()
            self._prune()

    async def _execute(self, shell: _Shell) -> Exit | OSError:
        done = asyncio.Event()
        async with asyncio.TaskGroup() as group:
            group.create_task(shell.log.pump(done, self.flush_interval))
            try:
                return await run_process(
                    shell.spec.launch, time_limit=shell.spec.timeout, sink=shell.log.add, kill=shell.kill
                )
            except OSError as exc:
                return exc
            finally:
                done.set()

    async def _finish(self, shell: _Shell, ended: Exit | OSError) -> None:
        meta = shell.meta
        if isinstance(ended, OSError):
            meta["status"] = "failed"
        else:
            meta["status"] = "exited" if ended.ending == "exited" else ended.ending
            meta["exitCode"] = ended.code
        meta["endedAt"] = utcnow_iso()
        await asyncio.to_thread(_write_meta, shell.directory, meta)
        report = BackgroundReport(
            shell_id=meta["shellId"], exit_code=meta["exitCode"], text=_report(shell, ended)
        )
        block = {"type": "background_report", "shell_id": report.shell_id, "exit_code": report.exit_code}
        session = shell.spec.session
        row = {
            "role": "event",
            "content": [{**block, "text": report.text}],
            "user_id": session.user_id,
            "agent_id": session.agent_id,
        }
        await asyncio.to_thread(shell.spec.conversation.append, row)
        shell.settled.set()
        killed = isinstance(ended, Exit) and ended.ending == "killed"
        if shell.continuation is None or killed or self._closing:
            return
        starter = session.replace(request_id=None, tool_use_id=None)
        try:
            async with asyncio.timeout(self.continuation_timeout):
                await shell.continuation(starter, shell.spec.conversation, report)
        except Exception:
            log.exception("the continuation after background shell %s failed", meta["shellId"])

    def _prune(self) -> None:
        finished = [k for k, s in self._shells.items() if s.task is not None and s.task.done()]
        for key in finished[: max(0, len(finished) - self.keep_finished)]:
            del self._shells[key]


def _owns(session: SessionContext, meta: ShellMeta) -> bool:
    owner = (meta["owner"]["projectId"], meta["owner"]["userId"], meta["owner"]["agentId"])
    return (session.project_id, session.user_id, session.agent_id) == owner


def _report(shell: _Shell, ended: Exit | OSError) -> str:
    meta = shell.meta
    if isinstance(ended, OSError):
        how = f"could not start: {ended}"
    elif ended.ending == "exited":
        how = f"exited with code {ended.code} after {ended.seconds:.1f} s"
    elif ended.ending == "timed_out":
        how = f"was killed when its {shell.spec.timeout:g} s timeout ran out"
    else:
        how = f"was stopped by a kill request after {ended.seconds:.1f} s"
    output = shell.log.report.text() or "(no output)"
    return (
        f"Background shell {meta['shellId']} {how}.\n"
        f"Command: {meta['command']}\n"
        f"Output (head and tail, stdout and stderr as they came):\n{output}\n"
        f"Full log: {meta['outputUri']}"
    )
