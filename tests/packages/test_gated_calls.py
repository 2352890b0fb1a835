"""A feature-gated tool is absent from a member's catalog, and calling it anyway gets the generic answer."""

from __future__ import annotations

import asyncio
import json

from neuralis_jupyter.packages import PackageLoader
from neuralis_jupyter.policy import PolicyEngine
from neuralis_jupyter.providers.scripted import Call, Reply, ScriptedModel
from neuralis_jupyter.runtime import AgentRuntime, TurnRequest
from neuralis_jupyter.store import Store

from .builders import install_distribution, session_for, tool

MODULE = """
from pathlib import Path
PACKAGE_ROOT = Path(__file__).with_name("pkg")
CALLS = []

async def _read_logs(args, ctx):
    CALLS.append(args)
    return "the platform log"

TOOL_HANDLERS = {"read_logs": _read_logs}
"""


def test_gated_tool_hidden_and_a_hallucinated_call_answered_generically(tmp_path, monkeypatch):
    dist = install_distribution(tmp_path / "site", monkeypatch, module_body=MODULE)
    root = dist.package_root
    (root / "tools").mkdir(parents=True)
    (root / "neuralis.json").write_text(
        json.dumps({"id": "ops-tools", "version": "1.0.0", "trust": "trusted", "description": "Ops."})
    )
    (root / "tools" / "read_logs.json").write_text(json.dumps(tool("read_logs", features=["core.logs"])))
    packages = PackageLoader(builtin_root=None, entry_points=True).load()
    assert [h["status"] for h in packages.health() if h["id"] == "ops-tools"] == ["ok"]

    store = Store.open(tmp_path / "home")
    member = session_for("member").replace(project_id="default", conversation_id=None)
    admin = session_for("admin").replace(project_id="default", conversation_id=None)
    assert "read_logs" in packages.tool_registry(admin)
    registry = packages.tool_registry(member)
    assert "read_logs" not in registry

    conv = store.conversations.create(project_id="default", agent_id="assistant", user_id="alice")
    model = ScriptedModel(
        [Reply(calls=(Call(name="read_logs", input={"q": "x"}, id="t1"),)), Reply(text="ok")]
    )
    engine = PolicyEngine(store, trust_of=packages.trust_of)
    request = TurnRequest(
        session=member, conversation=conv, model=model, tools=registry, message="logs?", policy=engine,
        permission=engine,
    )  # fmt: skip
    asyncio.run(AgentRuntime(store).run(request))
    assert "read_logs" not in {t.name for t in model.requests[0].tools}
    block = next(b for r in conv.read_all() if r["role"] == "tool" for b in r["content"])
    assert block["content"] == "Tool not available: read_logs"
    assert block["outcome"] == "unavailable"
    module = __import__(dist.module)
    assert module.CALLS == []
