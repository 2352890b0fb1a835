"""The shell sandbox: bubblewrap's command line, whether it starts here, and running a command.

Inside the sandbox (bwrap applies its mount options in argv order):

- ``/`` read-only; a fresh ``/dev``; a fresh ``/proc`` in its own pid namespace, so no host process is
  visible; an empty writable ``/tmp`` that vanishes with the command;
- the hidden paths (``/home``, ``/root``, ``/run``, the data root, the host user's home) covered by
  empty read-only tmpfs mounts; then the extra read-only binds; then the working directory bound back
  writable: the only place a write lands on the host. Every bind is followed by covering again each
  hidden path inside it, nested ones included: a bind of ``/home/shared`` never shows a data root at
  ``/home/shared/neuralis``, although ``/home`` alone was covered at first;
- its own user namespace with every capability dropped and nested user namespaces disabled (so even
  root cannot remount or unmount its way out), and its own ipc, uts, cgroup and, unless the call may
  use the network, network namespace (only a private loopback). ``--disable-userns`` is left out only
  when ``bwrap --version`` names a release before 0.8, never on the strength of an error message;
- ``--die-with-parent`` and ``--new-session`` (no TIOCSTI into the host terminal).

The environment is bwrap's own process environment, which it hands to the command unchanged: secrets
(the session ticket, staged credentials) never sit in an argv that ``ps`` shows to other accounts.

Killing: every command starts in its own process group. Killing the group kills bwrap; its
pid-namespace init dies with it (``--die-with-parent``) and the kernel kills everything left in the
namespace, ``sleep 100 &`` children and ``setsid`` escapees included. An unconfined command only gets
the process-group kill. When the main process ends, whatever still holds its pipes is killed too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "Capture",
    "Exit",
    "Launch",
    "Sandbox",
    "bwrap_argv",
    "parse_bwrap_version",
    "run_process",
    "supports_disable_userns",
]

log = logging.getLogger(__name__)

Stream = Literal["stdout", "stderr"]
Ending = Literal["exited", "timed_out", "killed"]
OutputSink = Callable[[Stream, bytes], None]

#: Seconds to wait for pipes to drain or a killed process to go, before acting again.
_GRACE = 1.0
_PROBE_TIMEOUT = 10.0


@dataclass(frozen=True, kw_only=True)
class Launch:
    """One process to start: its full argv, its whole environment and its working directory."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path
    sandboxed: bool


@dataclass(frozen=True, kw_only=True)
class Exit:
    """How a process ended. ``code`` is ``None`` unless it exited by itself."""

    code: int | None
    ending: Ending
    seconds: float


class Capture:
    """The first and last ``limit // 2`` bytes of a stream, and how many bytes went by in between."""

    def __init__(self, limit: int) -> None:
        self._head_limit = limit // 2
        self._tail_limit = limit - self._head_limit
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            if len(self._tail) > self._tail_limit:
                del self._tail[: len(self._tail) - self._tail_limit]

    def text(self) -> str:
        omitted = self.total - len(self._head) - len(self._tail)
        head = self._head.decode("utf-8", errors="replace")
        tail = self._tail.decode("utf-8", errors="replace")
        if omitted <= 0:
            return head + tail
        return f"{head}\n[… {omitted} bytes omitted …]\n{tail}"


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _hidden(hidden: Iterable[str | Path]) -> list[str]:
    """Every existing hidden path, resolved, nested ones too; ``/tmp`` is already a private tmpfs."""
    found = {os.path.realpath(p) for p in hidden if os.path.lexists(p)}
    return sorted((p for p in found if p != "/" and not _under(p, "/tmp")), key=len)


def _outermost(paths: Iterable[str]) -> list[str]:
    """``paths`` (shortest first) without those inside another one."""
    kept: list[str] = []
    for path in paths:
        if not any(_under(path, k) for k in kept):
            kept.append(path)
    return kept


def _cover(path: str) -> list[str]:
    """Options that hide ``path``: an empty tmpfs over a directory, /dev/null over a file."""
    return ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]


def bwrap_argv(
    bwrap: str,
    *,
    cwd: Path,
    network: bool,
    hidden: Iterable[str | Path],
    ro_binds: Iterable[str | Path] = (),
    disable_userns: bool = True,
) -> list[str]:
    """bwrap's options for a command run in ``cwd`` (the command follows, after ``--``).

    Every hidden path is remembered, nested ones included (the data root under a hidden ``/home``):
    after each bind (the read-only binds, the resolver file, the working directory) every hidden path
    strictly inside it is covered again, so no bind can bring a hidden path back.
    """
    work = os.path.realpath(cwd)
    masks = _hidden(hidden)
    binds = list(dict.fromkeys(os.path.realpath(b) for b in ro_binds))
    covered: list[str] = []

    def cover(paths: Iterable[str]) -> list[str]:
        options: list[str] = []
        for mask in _outermost(paths):
            options += _cover(mask)
            covered.append(mask)
        return options

    def bind_then_recover(option: str, path: str) -> list[str]:
        inside = [m for m in masks if _under(m, path) and m != path]
        return [option, path, path, *cover(inside)]

    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    argv += cover(m for m in masks if not _under(m, work))
    for bind in binds:
        argv += bind_then_recover("--ro-bind-try", bind)
    if network:
        resolv = os.path.realpath("/etc/resolv.conf")
        if any(_under(resolv, m) for m in masks):
            argv += bind_then_recover("--ro-bind-try", resolv)
    argv += bind_then_recover("--bind", work)
    for mask in dict.fromkeys(covered):
        if os.path.isdir(mask):
            argv += ["--remount-ro", mask]
    argv += ["--chdir", work, "--unshare-user", *(["--disable-userns"] if disable_userns else [])]
    argv += ["--cap-drop", "ALL"]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        argv.append("--unshare-net")
    argv += ["--die-with-parent", "--new-session"]
    return argv


def parse_bwrap_version(text: str) -> tuple[int, ...] | None:
    """The version ``bwrap --version`` prints (``bubblewrap 0.8.0`` -> ``(0, 8, 0)``); ``None`` if none."""
    match = re.search(r"\bbubblewrap\s+v?(\d+(?:\.\d+)*)", text)
    return tuple(int(n) for n in match.group(1).split(".")) if match else None


def supports_disable_userns(version: tuple[int, ...] | None) -> bool:
    """Whether to pass --disable-userns: from 0.8.0 on, and whenever the version is unknown (fail
    closed: a bubblewrap that then rejects it refuses the shell instead of weakening it)."""
    return version is None or version >= (0, 8)


def _bwrap_version(found: str) -> tuple[int, ...] | None:
    try:
        done = subprocess.run(
            [found, "--version"], capture_output=True, text=True, timeout=_PROBE_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_bwrap_version(done.stdout) if done.returncode == 0 else None


class Sandbox:
    """Builds launches for one configuration and remembers where bubblewrap was seen to start."""

    def __init__(
        self,
        *,
        bwrap: str,
        shell: Sequence[str],
        hidden: Sequence[str | Path],
        ro_binds: Sequence[str | Path] = (),
    ) -> None:
        self.bwrap = bwrap
        self.shell = tuple(shell)
        self.hidden = tuple(hidden)
        self.ro_binds = tuple(ro_binds)
        #: What ``bwrap --version`` said, per bubblewrap executable (``None``: no version found).
        self._versions: dict[str, tuple[int, ...] | None] = {}
        self._started: set[tuple[str, bool]] = set()

    async def check(self, *, cwd: Path, network: bool) -> str | None:
        """``None`` when the sandbox starts on this host; otherwise why it does not."""
        found = await asyncio.to_thread(shutil.which, self.bwrap)
        if found is None:
            return f"bubblewrap was not found ({self.bwrap!r} is not an executable on PATH)"
        if (found, network) in self._started:
            return None
        if found not in self._versions:
            version = self._versions[found] = await asyncio.to_thread(_bwrap_version, found)
            if not supports_disable_userns(version):
                # Nested user namespaces stay possible, but every mount stays locked.
                shown = ".".join(map(str, version or ()))
                log.warning(
                    "%s is bubblewrap %s (before 0.8): sandboxing without --disable-userns", found, shown
                )
        why = await self._probe(found, cwd=cwd, network=network)
        if why is None:
            self._started.add((found, network))
        return why

    async def _probe(self, found: str, *, cwd: Path, network: bool) -> str | None:
        probe = await asyncio.to_thread(
            self.launch, "exit 0", cwd=cwd, env={"PATH": "/usr/bin:/bin"}, network=network
        )
        errors = Capture(2000)
        try:
            ended = await run_process(
                probe, time_limit=_PROBE_TIMEOUT, sink=lambda s, d: errors.add(d) if s == "stderr" else None
            )
        except OSError as exc:
            return f"bubblewrap ({found}) could not be started: {exc}"
        if ended.code != 0:
            said = " ".join(errors.text().split()) or "no message"
            return f"bubblewrap ({found}) could not set up the sandbox on this host: {said}"
        return None

    def launch(
        self,
        command: str,
        *,
        cwd: Path,
        env: Mapping[str, str],
        network: bool,
        ro_binds: Iterable[str | Path] = (),
    ) -> Launch:
        """The sandboxed launch of ``command`` (resolving paths stats the filesystem: call it from a
        worker thread on an event loop)."""
        bwrap = shutil.which(self.bwrap) or self.bwrap
        options = bwrap_argv(
            bwrap,
            cwd=cwd,
            network=network,
            hidden=self.hidden,
            ro_binds=[*self.ro_binds, *ro_binds],
            disable_userns=supports_disable_userns(self._versions.get(bwrap)),
        )
        return Launch(argv=(*options, "--", *self.shell, command), env=dict(env), cwd=cwd, sandboxed=True)

    def unconfined(self, command: str, *, cwd: Path, env: Mapping[str, str]) -> Launch:
        return Launch(argv=(*self.shell, command), env=dict(env), cwd=cwd, sandboxed=False)


class _Pipes(asyncio.SubprocessProtocol):
    def __init__(self, sink: OutputSink) -> None:
        loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[None] = loop.create_future()
        #: All pipes closed and the process exited.
        self.closed: asyncio.Future[None] = loop.create_future()
        self._sink = sink

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self._sink("stdout" if fd == 1 else "stderr", data)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(pgid, signal.SIGKILL)


async def run_process(
    launch: Launch, *, time_limit: float, sink: OutputSink, kill: asyncio.Future[None] | None = None
) -> Exit:
    """Run ``launch`` to its end, handing output chunks to ``sink`` as they arrive.

    The process group is killed after ``time_limit`` seconds, when ``kill`` resolves, and when the
    calling task is cancelled (a stopped turn): the cancellation is re-raised once the group is gone.
    """
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    transport, pipes = await loop.subprocess_exec(
        lambda: _Pipes(sink),
        *launch.argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(launch.env),
        cwd=launch.cwd,
        start_new_session=True,
    )
    pgid = transport.get_pid()
    ending: Ending = "exited"
    try:
        watched: set[asyncio.Future[None]] = {pipes.exited} if kill is None else {pipes.exited, kill}
        await asyncio.wait(watched, timeout=time_limit, return_when=asyncio.FIRST_COMPLETED)
        if not pipes.exited.done():
            ending = "killed" if kill is not None and kill.done() else "timed_out"
            _kill_group(pgid)
            await asyncio.wait({pipes.exited}, timeout=_GRACE)
        await asyncio.wait({pipes.closed}, timeout=_GRACE)
        if not pipes.closed.done():  # something the command left behind still holds its pipes
            _kill_group(pgid)
            await asyncio.wait({pipes.closed}, timeout=_GRACE)
    except asyncio.CancelledError:
        _kill_group(pgid)
        await asyncio.wait({pipes.closed}, timeout=_GRACE)
        raise
    finally:
        transport.close()
    code = transport.get_returncode()
    return Exit(code=code if ending == "exited" else None, ending=ending, seconds=time.monotonic() - started)
