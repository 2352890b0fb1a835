"""Tools a kernel turn adds: ``python`` runs code in the notebook's namespace, ``variables`` lists it.

``python`` is declared a write with the ``exec`` effect: it changes the researcher's namespace and runs
arbitrary code, so the guard asks before it under safe and balanced. Its output (stdout, stderr, the
value of the last expression, or the traceback) is captured and bounded. ``variables`` is a plain read:
names with their type, shape, dtypes and a short repr.
"""

from __future__ import annotations

import ast
import contextlib
import io
import traceback
from typing import Any

from ..runtime import Tool, ToolOutput
from ..runtime.tools import AGENT_CORE_ID

__all__ = ["MAX_OUTPUT_CHARS", "notebook_tools"]

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


def run_python(code: str, namespace: dict[str, Any]) -> tuple[str, bool]:
    """Run ``code`` in ``namespace`` like a REPL cell; (output, failed)."""
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
    except Exception:
        out.write(traceback.format_exc(limit=-3))
        return _bounded(out.getvalue()), True
    return _bounded(out.getvalue() or "(no output)"), False


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


def notebook_tools(shell: Any) -> list[Tool]:
    namespace = shell.user_ns

    async def python(args: dict[str, Any], ctx: Any) -> ToolOutput:
        text, failed = run_python(args["code"], namespace)
        return ToolOutput(content=text, is_error=failed, outcome="error" if failed else "ok")

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
