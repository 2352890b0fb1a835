"""The kernel's notebook tools: ``python`` (bounded output, tracebacks, interrupts) and ``variables``.

The handlers run here against a plain namespace, the way a kernel turn calls them; the last test runs
both tools in a real kernel under ``%guard safe``, where only ``python`` (a write) asks.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import threading
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from neuralis_jupyter.kernel.notebook_tools import MAX_OUTPUT_CHARS, CodeRunner, notebook_tools
from neuralis_jupyter.runtime import StopSignal, ToolOutput

from .harness import KernelHarness, is_button


def call(
    tool: str, args: dict[str, Any], namespace: dict[str, Any], stop: StopSignal | None = None
) -> ToolOutput:
    """Call a tool's handler as a turn does; of the ToolContext, the notebook tools use only the stop."""
    tools = {t.name: t for t in notebook_tools(SimpleNamespace(user_ns=namespace))}
    ctx = SimpleNamespace(stop=stop or StopSignal())
    out = asyncio.run(tools[tool].handler(args, ctx))  # type: ignore[arg-type]
    assert isinstance(out, ToolOutput)
    return out


def test_long_output_is_bounded_with_a_marker() -> None:
    out = call("python", {"code": "print('x' * 50_000)\nprint('the end')"}, {})

    assert not out.is_error
    assert len(out.content) < MAX_OUTPUT_CHARS + 100
    omitted = 50_000 + len("\nthe end\n") - MAX_OUTPUT_CHARS
    assert f"[… {omitted:,} characters omitted …]" in out.content
    assert out.content.startswith("x" * 100), "the head is kept"
    assert out.content.endswith("the end\n"), "and the tail"


def test_an_exception_returns_its_traceback_and_what_was_printed_before() -> None:
    namespace: dict[str, Any] = {}
    out = call("python", {"code": "print('before')\nhalf = 1\n1 / 0"}, namespace)

    assert out.is_error
    assert out.outcome == "error"
    assert out.content.startswith("before\n")
    assert "Traceback" in out.content
    assert "ZeroDivisionError: division by zero" in out.content
    assert namespace["half"] == 1, "what ran before the error stays in the namespace"


def test_the_last_expression_is_the_result_and_lands_in_underscore() -> None:
    namespace: dict[str, Any] = {"xs": [3, 4, 5]}
    out = call("python", {"code": "xs.append(6)\nsum(xs)"}, namespace)

    assert (out.content, out.outcome) == ("18\n", "ok")
    assert namespace["_"] == 18


def test_a_call_after_the_turn_was_stopped_does_not_run() -> None:
    stop = StopSignal()
    stop.set("interrupted")
    namespace: dict[str, Any] = {}

    out = call("python", {"code": "ran = True"}, namespace, stop)

    assert (out.outcome, out.is_error) == ("stopped", True)
    assert "not run" in out.content
    assert "ran" not in namespace


def test_variables_describe_a_dataframe_and_an_ndarray() -> None:
    namespace: dict[str, Any] = {
        "df": pd.DataFrame({"depth": [1.5, 2.0, 3.25], "n": [1, 2, 3], "wet": [True, False, True]}),
        "grid": np.zeros((4, 2), dtype="float32"),
        "_hidden": 1,
        "np": np,
    }
    out = call("variables", {}, namespace)

    assert out.data is not None
    described = {v["name"]: v for v in out.data["variables"]}
    assert sorted(described) == ["df", "grid"], "private names and modules are left out"
    df = described["df"]
    assert df["type"] == "DataFrame"
    assert df["shape"] == [3, 3]
    assert df["dtypes"] == {"depth": "float64", "n": "int64", "wet": "bool"}
    grid = described["grid"]
    assert (grid["type"], grid["shape"], grid["dtype"]) == ("ndarray", [4, 2], "float32")
    assert grid["repr"].startswith("array([[0., 0.]")
    assert json.loads(out.content) == out.data


def test_variables_name_what_is_missing() -> None:
    out = call("variables", {"names": ["grid", "nope"]}, {"grid": np.ones(3)})

    assert out.data is not None
    assert [v["name"] for v in out.data["variables"]] == ["grid"]
    assert out.data["missing"] == ["nope"]


def test_an_interrupt_from_another_thread_ends_the_code_on_the_main_thread() -> None:
    started = threading.Event()
    namespace: dict[str, Any] = {"started": started}
    runner = CodeRunner()
    handler = signal.getsignal(signal.SIGINT)
    answers: list[bool] = []

    def stop() -> None:
        started.wait(20)
        answers.append(runner.interrupt("enough"))

    stopper = threading.Thread(target=stop)
    stopper.start()
    text, ran = runner.run(
        "print('before')\nstarted.set()\nimport time\ntime.sleep(30)\nafter = 1", namespace
    )
    stopper.join()

    assert ran == "interrupted"
    assert answers == [True]
    assert runner.reason == "enough"
    assert text.startswith("before\n")
    assert "KeyboardInterrupt" in text
    assert "after" not in namespace
    assert signal.getsignal(signal.SIGINT) is handler, "the handler is put back"
    assert runner.interrupt("too late") is False, "nothing runs: nothing to interrupt"


def test_a_stop_found_by_polling_ends_the_code() -> None:
    requested = threading.Event()
    runner = CodeRunner(poll=requested.is_set, poll_interval=0.01)

    namespace: dict[str, Any] = {"requested": requested}
    text, ran = runner.run("requested.set()\nimport time\ntime.sleep(30)\nafter = 1", namespace)

    assert ran == "interrupted"
    assert runner.reason == "stop requested"
    assert "KeyboardInterrupt" in text
    assert "after" not in namespace


@pytest.mark.slow
def test_under_guard_safe_python_asks_and_variables_does_not(kernel: KernelHarness) -> None:
    kernel.run("%guard safe")
    try:
        kernel.run("%%python\nimport numpy as np\nreadings = np.arange(6).reshape(2, 3)")
        kernel.script(
            {"text": "", "calls": [{"name": "variables", "input": {"names": ["readings"]}}]},
            {"text": "", "calls": [{"name": "python", "input": {"code": "total = int(readings.sum())"}}]},
            {"text": "The total is 15."},
        )

        execution = kernel.start("Look at readings, then sum them.")
        button = kernel.wait_for(execution, is_button("Approve"))
        kernel.click(button["content"]["comm_id"])
        run = kernel.finish(execution)
    finally:
        kernel.run("%guard auto")

    assert run.status == "ok"
    markdown = run.markdown()
    assert markdown.count("Approve ") == 1
    assert "Approve python?" in markdown
    assert "Approve variables?" not in markdown
    variables = next(b for b in run.final() if "🔧 variables" in b["text/markdown"])
    assert "✓ done" in variables["text/markdown"]
    result = re.sub(r"\s+", "", variables["text/markdown"])  # the card shows the JSON the model read
    assert '"type":"ndarray","shape":[2,3],"dtype":"int64"' in result
    assert kernel.run("%%python\nprint(total)").text().strip() == "15"
