"""Shared pieces for the execute, sandbox and background-shell tests: a real store and package set,
the execute handlers bound as the host binds them, and runtime turns driven by a ScriptedModel."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from neuralis_jupyter.config import NeuralisSettings
from neuralis_jupyter.contracts import SessionContext
from neuralis_jupyter.packages import AGENT_CORE_ID, PackageLoader, PackageSet
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import AgentRuntime, StopSignal, TurnRequest, TurnSettled
from neuralis_jupyter.runtime.context import ToolTape
from neuralis_jupyter.runtime.events import RuntimeEvent
from neuralis_jupyter.runtime.permission import PermissionDecision, PermissionRequest
from neuralis_jupyter.store import Store
from neuralis_jupyter.store.conversations import Conversation
from neuralis_jupyter.tools import execute
from neuralis_jupyter.tools.environment import ToolEnvironment

BWRAP = shutil.which("bwrap")
_NO_BWRAP = "bubblewrap is not installed: apt-get install bubblewrap (.ci/run installs it)"


def require_bwrap() -> None:
    """Skip the calling test without bwrap; fail it instead under ``NEURALIS_BWRAP_REQUIRED=1`` (.ci/run),
    where a sandbox test that silently skips would let a missing sandbox pass CI."""
    if BWRAP is None:
        if os.environ.get("NEURALIS_BWRAP_REQUIRED") == "1":
            pytest.fail(f"{_NO_BWRAP}; NEURALIS_BWRAP_REQUIRED=1 makes that a failure", pytrace=False)
        pytest.skip(_NO_BWRAP)


class _BwrapMissing:
    # pytest evaluates a skipif condition with bool() when each test sets up, not at import, so the
    # environment is read per test and require_bwrap's failure fails that test (not the collection).
    def __bool__(self) -> bool:
        if BWRAP is None and os.environ.get("NEURALIS_BWRAP_REQUIRED") == "1":
            require_bwrap()
        return BWRAP is None


needs_bwrap = pytest.mark.skipif(_BwrapMissing(), reason=_NO_BWRAP)

#: A member's shell grants: no exec.unconfined (a sandbox failure is refused) and no core.web.
MEMBER = ("core.agents", "core.execute", "exec.container", "core.observe")


def exec_session(*, features: Sequence[str] = MEMBER, **extra: Any) -> SessionContext:
    base: dict[str, Any] = {
        "user_id": "alice",
        "project_id": "default",
        "agent_id": "assistant",
        "role": "member",
        "priority": 30,
        "granted_features": tuple(features),
        "agent_access": "own",
    }
    return SessionContext(**{**base, **extra})


class AllowAll:
    async def __call__(self, request: PermissionRequest) -> PermissionDecision:
        return PermissionDecision(allowed=True, decided_by="test")


@contextlib.contextmanager
def exec_data_root(fallback: Path) -> Iterator[Path]:
    """A data root outside /tmp (when /var/tmp is writable), so that hiding it is the data-root mask's
    job and not a side effect of the sandbox's private /tmp."""
    try:
        root = Path(tempfile.mkdtemp(prefix="neuralis-exec-", dir="/var/tmp"))
    except OSError:
        root = fallback / "data"
        root.mkdir()
    try:
        yield root.resolve()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass(kw_only=True)
class ExecRig:
    root: Path
    store: Store
    env: ToolEnvironment
    packages: PackageSet
    conv: Conversation
    runtime: AgentRuntime

    @classmethod
    def build(
        cls,
        root: Path,
        *,
        settings: dict[str, Any] | None = None,
        package_roots: Sequence[Path] = (),
        trusted_packages: Sequence[str] = (),
        api_url: str | None = None,
    ) -> ExecRig:
        neuralis = NeuralisSettings(
            data_root=str(root),
            store_url=f"sqlite:///{root / 'neuralis.db'}",
            package_roots=[str(p) for p in package_roots],
            # The operator's list of the packages it trusts (c.NeuralisSettings.trusted_packages).
            config=Config(
                {"NeuralisSettings": {"trusted_packages": list(trusted_packages)}} if trusted_packages else {}
            ),
        )
        store = Store(neuralis)
        packages = PackageLoader.from_settings(neuralis, entry_points=False).load()
        env = ToolEnvironment(
            settings=neuralis,
            store=store,
            packages=packages,
            config=Config({"ExecuteSettings": settings or {}}),
            api_url=api_url,
        )
        packages.bind_handlers(AGENT_CORE_ID, execute.handlers(env))
        conv = store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")
        return cls(root=root, store=store, env=env, packages=packages, conv=conv, runtime=AgentRuntime(store))

    @property
    def workspace(self) -> Path:
        """alice's own workspace with the assistant (the default workspace is per user)."""
        return self.root / "projects" / "default" / "agents" / "assistant" / "workspace" / "alice"

    def open_session(self, session: SessionContext | None = None) -> SessionContext:
        """``session`` with a fresh request id and its stream opened, as the host does per turn."""
        s = (session or exec_session()).replace(
            request_id="r-" + uuid.uuid4().hex[:12], conversation_id=self.conv.id
        )
        self.store.tickets.open_stream(s)
        return s

    async def turn(
        self,
        model: ScriptedModel,
        *,
        session: SessionContext | None = None,
        message: str | None = "go",
        stop: StopSignal | None = None,
        on_event: Callable[[RuntimeEvent], None] | None = None,
        tape: ToolTape | None = None,
    ) -> TurnSettled:
        opened = await asyncio.to_thread(self.open_session, session)
        request = TurnRequest(
            session=opened,
            conversation=self.conv,
            model=model,
            tools=self.packages.tool_registry(opened),
            message=message,
            permission=AllowAll(),
            stop=stop,
            tape=tape,
        )
        return await self.runtime.run(request, on_event=on_event)

    def result(self, tool_use_id: str) -> dict[str, Any]:
        blocks = [
            b
            for r in self.conv.read_all()
            if r["role"] == "tool"
            for b in r["content"]
            if b["tool_use_id"] == tool_use_id
        ]
        assert len(blocks) == 1, f"no single result for {tool_use_id}"
        return blocks[0]

    def call(self, session: SessionContext | None = None, **args: Any) -> dict[str, Any]:
        """One turn that makes one execute call; its tool_result block."""
        call_id = "x-" + uuid.uuid4().hex[:10]
        model = ScriptedModel(
            [Reply(calls=(Call(name="execute", input=args, id=call_id),)), Reply(text="ok")]
        )
        settled = asyncio.run(self.turn(model, session=session))
        assert settled.status == "completed", settled
        return self.result(call_id)

    def shell(self, command: str, session: SessionContext | None = None, **args: Any) -> dict[str, Any]:
        """Run ``command`` in one turn; the parsed result with the block's ``is_error``/``outcome``."""
        block = self.call(session, command=command, **args)
        assert block["outcome"] in ("ok", "error"), block["content"]
        return {**json.loads(block["content"]), "_block": block}


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (zombies have none)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
    return found


async def gone(marker: str, within: float = 3.0) -> bool:
    """Whether every process carrying ``marker`` is gone within ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while processes_with(marker):
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True
