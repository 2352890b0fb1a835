"""``neuralis run``: execute a notebook headless in the Neuralis kernel, replaying or recording its cassette.

The model traffic goes through ``<notebook>.cassette.jsonl`` beside the notebook: ``--replay`` (the
default when that file exists) answers every model call from it (no key, no network) and fails on the
first request that differs; ``--record`` runs the real model (or ``scripted:demo``, answering from
``<stem>.demo.jsonl``) and replaces the cassette when the run succeeds; ``--live`` uses no cassette.

Nobody can click in a headless run: an approval the guard profile asks for is refused, unless it was
answered with ``--answer`` while recording (the answer is recorded, and the replay reuses it).

The notebook must name the ``neuralis`` kernel; ``--kernel NAME`` runs it in another one (a chat cell
there is ``%%chat`` after ``%load_ext neuralis_jupyter``). The kernel runs in the notebook's folder.

Transcripts and usage go to your data root (``$NEURALIS_HOME``, else ``<jupyter data dir>/neuralis``),
in a new conversation of the project's default agent, and the command says where; ``--home DIR`` keeps
the run apart. A replay checks the whole request, system prompt included, so an agent whose identity
files, packages or settings changed since the recording shows up in the diff: replay in a fresh
``--home`` to check the notebook alone.

Exit status: 0 every cell ran; 1 a cell failed, timed out or the kernel died (the cell is named);
2 bad arguments, an unusable notebook or no such kernel; 3 the run diverged from the cassette (the
diff is printed); 130 interrupted (Ctrl-C). The executed notebook is written whenever the kernel
started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from nbformat import NotebookNode

    from ..notebook_run import CellFailure, RunOutcome

__all__ = ["register"]

EXIT_OK, EXIT_CELL, EXIT_USAGE, EXIT_MISMATCH, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class UsageError(Exception):
    """Bad arguments or an unusable notebook: exit status 2."""


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """Everything decided before the kernel starts."""

    path: Path
    nb: NotebookNode
    kernel: str
    mode: Literal["replay", "record", "live"]
    env: Mapping[str, str]
    cassette: Path
    #: Where ``--record`` writes until the run succeeds (then it replaces ``cassette``).
    recording: Path
    output: Path
    timeout: float | None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="execute a notebook headless, replaying its cassette",
        description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        epilog=next(par for par in __doc__.split("\n\n") if par.startswith("Exit status")),
    )
    p.add_argument("notebook", type=Path, help="the .ipynb to execute")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        help="where to write the executed notebook (default: <stem>.out.ipynb beside it)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--replay",
        dest="mode",
        action="store_const",
        const="replay",
        help="answer model calls from <notebook>.cassette.jsonl (default when it exists)",
    )
    mode.add_argument(
        "--record",
        dest="mode",
        action="store_const",
        const="record",
        help="call the model and record the cassette (replaces it when the run succeeds)",
    )
    mode.add_argument(
        "--live",
        dest="mode",
        action="store_const",
        const="live",
        help="call the model, no cassette (default when there is no cassette)",
    )
    p.add_argument(
        "-p",
        "--parameter",
        dest="parameters",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a variable in a cell after the one tagged 'parameters' (ints, floats, "
        "true/false, null and JSON are parsed; anything else is a string)",
    )
    p.add_argument(
        "--answer",
        dest="answers",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --record or --live: TOOL=approve|deny or TOOL_USE_ID=approve|deny for a call "
        "the guard asks about; question=TEXT or question:TOOL_USE_ID=TEXT for ask_question",
    )
    p.add_argument(
        "--model",
        metavar="PROVIDER:MODEL",
        help="with --record or --live, e.g. anthropic:claude-sonnet-4-6 or scripted:demo",
    )
    p.add_argument("--kernel", metavar="NAME", help="run in this kernel instead of the notebook's")
    p.add_argument(
        "--home",
        type=Path,
        metavar="DIR",
        help="data root for this run (default: $NEURALIS_HOME, else <jupyter data dir>/neuralis)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds one cell may run (default: 600; 0: no limit)",
    )
    p.set_defaults(func=run, mode=None)


def _say(message: str) -> None:
    print(f"neuralis run: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from ..notebook_run import skip_iri_grammar

    with skip_iri_grammar():
        import nbclient  # noqa: F401  # and nbformat, jsonschema: 0.9 s faster here than later
    try:
        plan = _plan(args)
    except UsageError as exc:
        _say(str(exc))
        return EXIT_USAGE
    return _execute(plan)


def _plan(args: argparse.Namespace) -> RunPlan:
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    from ..kernel.headless import ANSWERS_ENV, parse_answers
    from ..notebook_run import inject_parameters, parse_parameters
    from ..providers.cassette import cassette_path_for

    path: Path = args.notebook
    if not path.is_file():
        raise UsageError(f"no notebook at {path}")
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:
        raise UsageError(f"{path} is not a readable notebook: {exc}") from None
    spec = nb.metadata.get("kernelspec", {}).get("name")
    kernel = args.kernel or spec
    if kernel != "neuralis" and not args.kernel:
        raise UsageError(
            f"{path} names the {spec or 'unnamed'!r} kernel, not 'neuralis'; pass --kernel "
            f"{spec or 'NAME'} to run it there anyway"
        )
    try:
        KernelSpecManager().get_kernel_spec(kernel)
    except NoSuchKernel:
        raise UsageError(
            f"no kernel named {kernel!r} is installed (jupyter kernelspec list; neuralis kernel install)"
        ) from None
    cassette = cassette_path_for(path)
    mode = args.mode or ("replay" if cassette.is_file() else "live")
    if mode == "replay" and not cassette.is_file():
        raise UsageError(f"no cassette at {cassette}: record one with --record")
    if mode == "replay" and (args.model or args.answers):
        raise UsageError("--model and --answer apply to --record and --live; a replay uses its cassette")
    if args.model and ":" not in args.model:
        raise UsageError(f"write the model as PROVIDER:MODEL, e.g. scripted:demo, not {args.model!r}")
    try:
        params = parse_parameters(args.parameters)
        parse_answers(args.answers)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if params:
        inject_parameters(nb, params, python_prefix=kernel == "neuralis")
    output = args.output or path.with_name(path.stem + ".out.ipynb")
    if not output.parent.is_dir():
        raise UsageError(f"cannot write {output}: no folder {output.parent}")
    recording = cassette.with_name(cassette.name + ".recording")
    env = _kernel_env(args, path, mode, cassette=cassette, recording=recording, answers_env=ANSWERS_ENV)
    if mode == "record" and cassette.exists():
        _say(f"--record replaces {cassette} when the run succeeds")
    return RunPlan(
        path=path,
        nb=nb,
        kernel=kernel,
        mode=mode,
        env=env,
        cassette=cassette,
        recording=recording,
        output=output,
        timeout=args.timeout or None,
    )


def _kernel_env(
    args: argparse.Namespace, path: Path, mode: str, *, cassette: Path, recording: Path, answers_env: str
) -> dict[str, str]:
    """This process's environment, headless, with the run's cassette, model, answers and data root."""
    # Answers and cassettes come only from this command line, never from an inherited environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURALIS_CASSETTE") and k != answers_env}
    env["NEURALIS_HEADLESS"] = "1"
    if args.home:
        env["NEURALIS_HOME"] = str(args.home.expanduser().resolve())
    if args.answers:
        env[answers_env] = json.dumps(args.answers)
    if args.model:
        env["NEURALIS_MODEL"] = args.model
    scripted = env.get("NEURALIS_MODEL", "").startswith("scripted:")
    if mode != "replay" and scripted and "NEURALIS_DEMO_SCRIPT" not in env:
        script = path.with_name(path.stem + ".demo.jsonl")
        if not script.is_file():
            raise UsageError(
                f"the scripted demo model needs a script: write {script} or set NEURALIS_DEMO_SCRIPT"
            )
        env["NEURALIS_DEMO_SCRIPT"] = str(script.resolve())
    if mode != "live":
        env["NEURALIS_CASSETTE"] = str((recording if mode == "record" else cassette).resolve())
        env["NEURALIS_CASSETTE_MODE"] = mode
    return env


def _execute(plan: RunPlan) -> int:
    try:
        return _execute_and_report(plan)
    finally:  # a recording is kept only when the run succeeded (then it already replaced the cassette)
        plan.recording.unlink(missing_ok=True)


def _execute_and_report(plan: RunPlan) -> int:
    import nbformat

    from ..notebook_run import execute_notebook

    with tempfile.TemporaryFile("w+") as kernel_log:
        try:
            outcome = asyncio.run(
                execute_notebook(
                    plan.nb,
                    kernel_name=plan.kernel,
                    env=plan.env,
                    cwd=plan.path.parent.resolve(),
                    cell_timeout=plan.timeout,
                    kernel_stderr=kernel_log,
                )
            )
        except (RuntimeError, TimeoutError) as exc:  # the kernel died or did not answer while starting
            _say(f"the {plan.kernel!r} kernel did not start: {type(exc).__name__}: {exc}")
            kernel_log.seek(0)
            _print_tail(kernel_log.read())
            return EXIT_CELL
        kernel_log.seek(0)
        log_text = kernel_log.read()
    nbformat.write(outcome.notebook, plan.output)
    _say(f"wrote {plan.output}")
    _report_records(outcome)
    if outcome.failure is not None:
        if plan.mode == "record":
            _say(f"nothing was recorded; {plan.cassette} is unchanged")
        return _report_failure(plan, outcome.failure, log_text)
    cassette = (outcome.report or {}).get("cassette") or {}
    if cassette.get("incomplete"):
        _say(
            f"the run diverged from {plan.cassette}: {cassette['incomplete']}; the notebook no longer "
            "makes the recorded model calls: re-record with --record if it changed on purpose"
        )
        return EXIT_MISMATCH
    if plan.mode == "record":
        if plan.recording.is_file() and plan.recording.stat().st_size:
            os.replace(plan.recording, plan.cassette)
            _say(f"recorded {plan.cassette}")
        else:
            _say("the notebook made no model calls; no cassette was written")
    return EXIT_OK


def _report_records(outcome: RunOutcome) -> None:
    """Where the run's transcripts and usage went."""
    report = outcome.report
    if not report:
        return
    _say(f"data root {report['data_root']}")
    for chat in outcome.conversations:
        _say(
            f"transcript {chat['transcript']} (conversation {chat['conversation_id']}, agent "
            f"{chat['agent_id']}, project {chat['project_id']})"
        )
    if outcome.conversations:
        ids = ", ".join(repr(c["conversation_id"]) for c in outcome.conversations)
        _say(f"usage {report['usage_file'] or report['store']} (frames.usage(conversation={ids}))")


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _report_failure(plan: RunPlan, failure: CellFailure, log_text: str) -> int:
    from ..notebook_run import INTERRUPTED

    first = next((line.strip() for line in failure.source.splitlines() if line.strip()), "")
    where = f"cell {failure.index + 1} ({first[:60]}{'…' if len(first) > 60 else ''})"
    if failure.ename == INTERRUPTED:
        _say(f"interrupted at {where}; the kernel was shut down")
        return EXIT_INTERRUPTED
    if failure.ename == "CassetteMismatch":
        _say(f"{where} diverged from the cassette {plan.cassette}:")
        print(failure.evalue, file=sys.stderr)
        return EXIT_MISMATCH
    _say(f"{where} failed: {failure.ename}: {failure.evalue}")
    text = _ANSI.sub("", failure.traceback).strip()
    if text:
        print("\n".join(text.splitlines()[-30:]), file=sys.stderr)
    if failure.ename == "DeadKernelError":
        _print_tail(log_text)
    return EXIT_CELL


def _print_tail(text: str, lines: int = 20) -> None:
    tail = [line for line in text.splitlines() if "without encryption" not in line][-lines:]
    if tail:
        print("\n".join(["--- kernel log (last lines) ---", *tail]), file=sys.stderr)
