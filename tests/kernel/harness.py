"""Driving a real "neuralis" kernel through jupyter_client: cells, iopub messages, widget clicks, subshells.

The kernel runs with a private ``NEURALIS_HOME`` and the scripted demo model. The demo model keeps one
script per path for the kernel's life, so each test writes its own script file and points the kernel at
it (:meth:`KernelHarness.script`): tests sharing a kernel do not share replies.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
TIMEOUT = 20.0

Message = dict[str, Any]


def kernel_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a test kernel: a private data root and config, no keys, no network."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "NEURALIS_STORE_URL", "NEURALIS_CASSETTE")
    }
    env.update(
        NEURALIS_HOME=str(home),
        NEURALIS_USER="alice",
        NEURALIS_MODEL="scripted:demo",
        NEURALIS_MODEL_REQUESTS="loopback",
        JUPYTER_CONFIG_DIR=str(home / ".jupyter-config"),
        JUPYTER_NO_CONFIG="1",
        PYDEVD_DISABLE_FILE_VALIDATION="1",
    )
    env.update(extra)
    return env


@dataclass
class Execution:
    """One execute_request: its reply and the iopub messages it caused, in order."""

    msg_id: str
    reply: Message | None = None
    messages: list[Message] = field(default_factory=list)

    @property
    def status(self) -> str | None:
        return None if self.reply is None else self.reply["content"]["status"]

    def of_type(self, *types: str) -> list[Message]:
        return [m for m in self.messages if m["msg_type"] in types]

    def displays(self) -> dict[str, list[dict[str, Any]]]:
        """Every bundle sent for each display id (display_data first, then its updates), in order."""
        out: dict[str, list[dict[str, Any]]] = {}
        for m in self.of_type("display_data", "update_display_data"):
            display_id = m["content"].get("transient", {}).get("display_id")
            if display_id:
                out.setdefault(display_id, []).append(m["content"]["data"])
        return out

    def final(self) -> list[dict[str, Any]]:
        """The last bundle of each display id, in the order the outputs appeared."""
        return [bundles[-1] for bundles in self.displays().values()]

    def markdown(self) -> str:
        return "\n\n".join(b.get("text/markdown", "") for b in self.final())

    def text(self) -> str:
        """What a plain-text reader sees: streams, results and the final text/plain of each output."""
        parts = [m["content"]["text"] for m in self.of_type("stream")]
        parts += [m["content"]["data"].get("text/plain", "") for m in self.of_type("execute_result")]
        parts += [b.get("text/plain", "") for b in self.final()]
        return "\n".join(parts)


class KernelHarness:
    def __init__(self, km: KernelManager, kc: BlockingKernelClient, home: Path) -> None:
        self.km = km
        self.kc = kc
        self.home = home
        self._iopub: dict[str, list[Message]] = {}
        self._replies: dict[str, Message] = {}
        self._scripts = itertools.count(1)

    # -- messages ------------------------------------------------------------------------------------

    def _pump_iopub(self, timeout: float) -> Message | None:
        try:
            msg = self.kc.get_iopub_msg(timeout=timeout)
        except queue.Empty:
            return None
        self._iopub.setdefault(msg["parent_header"].get("msg_id", ""), []).append(msg)
        return msg

    def wait_for(
        self, execution: Execution, predicate: Callable[[Message], bool], timeout: float = TIMEOUT
    ) -> Message:
        """The first iopub message of ``execution`` that matches, waiting for it."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            filed = self._iopub.get(execution.msg_id, [])
            for msg in filed[seen:]:
                if predicate(msg):
                    return msg
            seen = len(filed)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching message for {execution.msg_id} in {timeout} s")
            self._pump_iopub(min(left, 0.5))

    def messages(self, execution: Execution) -> list[Message]:
        """The iopub messages of a running execution received so far."""
        return list(self._iopub.get(execution.msg_id, []))

    def finish(self, execution: Execution, timeout: float = TIMEOUT) -> Execution:
        """Wait for the execution's idle status and its reply."""
        self.wait_for(
            execution,
            lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == "idle",
            timeout,
        )
        deadline = time.monotonic() + timeout
        while execution.msg_id not in self._replies:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no execute_reply for {execution.msg_id} in {timeout} s")
            try:
                reply = self.kc.get_shell_msg(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            self._replies[reply["parent_header"].get("msg_id", "")] = reply
        execution.reply = self._replies.pop(execution.msg_id)
        execution.messages = [
            m for m in self._iopub.pop(execution.msg_id, []) if m["msg_type"] not in ("status",)
        ]
        return execution

    # -- cells ---------------------------------------------------------------------------------------

    def start(self, code: str, *, subshell_id: str | None = None) -> Execution:
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        }
        msg = self.kc.session.msg("execute_request", content)
        if subshell_id is not None:
            msg["header"]["subshell_id"] = subshell_id
        self.kc.shell_channel.send(msg)
        return Execution(msg_id=msg["header"]["msg_id"])

    def run(self, code: str, timeout: float = TIMEOUT) -> Execution:
        execution = self.finish(self.start(code), timeout)
        assert execution.status == "ok", execution.reply
        return execution

    def script(self, *replies: dict[str, Any]) -> Path:
        """A fresh script for the demo model; the kernel's next chat cells answer from it."""
        path = self.home / f"script-{next(self._scripts)}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in replies), encoding="utf-8")
        self.run(f"%%python\nimport os\nos.environ['NEURALIS_DEMO_SCRIPT'] = {str(path)!r}")
        return path

    # -- widgets, subshells, the store ---------------------------------------------------------------

    def click(self, comm_id: str) -> None:
        """Exactly what the widget frontend sends when a Button is clicked."""
        content = {"comm_id": comm_id, "data": {"method": "custom", "content": {"event": "click"}}}
        self.kc.shell_channel.send(self.kc.session.msg("comm_msg", content))

    def set_state(self, comm_id: str, **state: Any) -> None:
        """What the frontend sends when the user changes a widget's value."""
        content = {"comm_id": comm_id, "data": {"method": "update", "state": state, "buffer_paths": []}}
        self.kc.shell_channel.send(self.kc.session.msg("comm_msg", content))

    def create_subshell(self) -> str:
        msg = self.kc.session.msg("create_subshell_request", {})
        self.kc.control_channel.send(msg)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            reply = self.kc.get_control_msg(timeout=TIMEOUT)
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                assert reply["content"]["status"] == "ok", reply["content"]
                return str(reply["content"]["subshell_id"])
        raise TimeoutError("no create_subshell_reply")

    def conversation(self) -> str:
        """The current conversation id (``%conversation``)."""
        result = self.run("%conversation").of_type("execute_result")[0]
        text = result["content"]["data"]["text/plain"].strip("'\"")
        return text.split()[1]

    def transcript(self, conversation_id: str) -> list[dict[str, Any]]:
        """The conversation's rows as the store wrote them (the last row of each seq wins)."""
        (path,) = self.home.glob(f"projects/*/agents/*/conversations/{conversation_id}/messages.jsonl")
        rows: dict[int, dict[str, Any]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                rows[row["seq"]] = row
        return [rows[k] for k in sorted(rows)]


def widget_comm(execution_or_messages: Execution | list[Message], model: str, **state: Any) -> str | None:
    """The comm id of the first widget of ``model`` whose state has the given values."""
    messages = (
        execution_or_messages.messages
        if isinstance(execution_or_messages, Execution)
        else execution_or_messages
    )
    for m in messages:
        if m["msg_type"] != "comm_open":
            continue
        found = m["content"]["data"].get("state", {})
        if found.get("_model_name") == model and all(found.get(k) == v for k, v in state.items()):
            return str(m["content"]["comm_id"])
    return None


def is_widget(model: str, **state: Any) -> Callable[[Message], bool]:
    """Matches the comm_open of a widget of ``model`` whose state has the given values."""

    def match(m: Message) -> bool:
        return m["msg_type"] == "comm_open" and widget_comm([m], model, **state) is not None

    return match


def is_button(description: str) -> Callable[[Message], bool]:
    return is_widget("ButtonModel", description=description)


def is_card(text: str) -> Callable[[Message], bool]:
    """Matches the display_data of a card whose markdown contains ``text`` (shown after its widgets)."""

    def match(m: Message) -> bool:
        return m["msg_type"] == "display_data" and text in m["content"]["data"].get("text/markdown", "")

    return match
