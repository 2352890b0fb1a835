"""``%load_ext neuralis_jupyter`` in the plain python3 kernel: ``%%chat`` behaves like a Neuralis cell."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.manager import start_new_kernel

from .harness import WIDGET_VIEW, KernelHarness, is_button, kernel_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def python3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelHarness]:
    home = tmp_path_factory.mktemp("python3-home")
    km, kc = start_new_kernel(kernel_name="python3", env=kernel_env(home), cwd=str(home))
    harness = KernelHarness(km, kc, home)
    try:
        harness.run("%load_ext neuralis_jupyter")
        yield harness
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def script(kernel: KernelHarness, name: str, *replies: dict[str, Any]) -> None:
    # In a python3 kernel %%python is IPython's own subprocess magic: set the variable directly.
    path = kernel.home / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in replies), encoding="utf-8")
    kernel.run(f"import os; os.environ['NEURALIS_DEMO_SCRIPT'] = {str(path)!r}")


def test_chat_cell_magic_streams_an_answer(python3: KernelHarness) -> None:
    answer = "Hello from the **demo** model, streamed in small pieces so that it arrives over time."
    script(python3, "hello", {"text": answer, "chunk": 2, "delay": 0.005})  # ~40 deltas

    run = python3.run("%%chat\nSay hello")

    assert run.of_type("execute_result") == [], "the turn's result object is not echoed as the cell's value"
    answer_id = next(iter(run.displays()))
    texts = [
        m["content"]["data"]["text/markdown"]
        for m in run.of_type("update_display_data")
        if m["content"]["transient"]["display_id"] == answer_id
    ]
    assert len(texts) >= 3, "the answer grows in several updates"
    assert all(answer.startswith(t) for t in texts)
    assert all(len(a) <= len(b) for a, b in itertools.pairwise(texts))
    assert len(texts[0]) < len(answer), "the first update came before the whole answer"
    assert texts[-1] == answer
    assert all(WIDGET_VIEW not in b for b in run.final())


def test_approval_click_reaches_a_chat_cell_magic(python3: KernelHarness) -> None:
    python3.run("x = 1")
    script(
        python3,
        "increment",
        {"calls": [{"name": "python", "input": {"code": "x = x + 41"}, "id": "toolu_inc"}]},
        {"text": "done"},
    )
    python3.run("%guard balanced")
    execution = python3.start("%%chat\nAdd 41 to x")
    opened = python3.wait_for(execution, is_button("Approve"))
    python3.click(opened["content"]["comm_id"])
    done = python3.finish(execution)
    assert done.status == "ok"
    value = python3.run("print(x)").of_type("stream")[0]["content"]["text"].strip()
    assert value == "42"
