"""The Neuralis kernel against plain ipykernel: cold start, and a 50-step replay against 50 plain cells.

(a) Cold start to ready: from launching the kernel process to its ``kernel_info`` reply
    (``jupyter_client.manager.start_new_async_kernel``), "neuralis" vs "python3", interleaved, many times.
    Goal: median ratio <= 1.2. When it is missed, ``python -X importtime`` shows which modules the Neuralis
    kernel imports that ipykernel does not.
(b) ``neuralis run --replay`` of a 50-cell chat notebook (one model call a cell: a 50-step cassette,
    recorded first with the scripted demo model) vs ``jupyter execute`` (nbclient's command) of a 50-cell
    plain Python notebook in the python3 kernel. Both are whole commands: process start, imports, kernel
    start, 50 cells, shutdown. Goal: median ratio <= 1.3. The replay's own cells are timed from the
    executed notebook (nbclient's timing metadata) to show where the time goes.

Never part of the test suite. ``python benchmarks/kernel_bench.py [--starts N] [--runs N]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import nbformat
from jupyter_client.manager import start_new_async_kernel
from nbformat.v4 import new_code_cell, new_notebook

CELLS = 50
NEURALIS_SPEC = {"name": "neuralis", "display_name": "Neuralis Agent", "language": "python"}
PYTHON_SPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def bench_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURALIS_", "ANTHROPIC_", "OPENAI_"))}
    env.update(NEURALIS_HOME=str(home), JUPYTER_NO_CONFIG="1", NEURALIS_MODEL_REQUESTS="loopback")
    return env


# -- (a) cold start ------------------------------------------------------------------------------------


async def _start_once(name: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    km, kc = await start_new_async_kernel(
        kernel_name=name, env=env, startup_timeout=60, stderr=subprocess.DEVNULL
    )
    ready = time.perf_counter() - started
    kc.stop_channels()
    await km.shutdown_kernel(now=True)
    return ready


async def cold_starts(reps: int, env: dict[str, str]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"neuralis": [], "python3": []}
    await _start_once("neuralis", env)  # warm the disk cache for both, untimed
    await _start_once("python3", env)
    for _ in range(reps):
        for name in times:
            times[name].append(await _start_once(name, env))
    return times


def _importtime(code: str) -> dict[str, tuple[int, int]]:
    """module -> (self us, cumulative us) for ``python -X importtime -c code``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found: dict[str, tuple[int, int]] = {}
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m:
            found[m.group(4)] = (int(m.group(1)), int(m.group(2)))
    return found


#: What starting the Neuralis kernel imports: the kernel module, and what ``NeuralisKernel.__init__`` adds
#: (the magics, and the chat controller it builds, e.g. the user id it fixes at start).
_OUR_START = """\
import neuralis_jupyter.kernel.__main__
from neuralis_jupyter.kernel.magics import NeuralisMagics
from neuralis_jupyter.kernel.chat import ChatController
ChatController(None)
"""


def import_culprits(top: int = 12) -> list[str]:
    """What the Neuralis kernel's start imports beyond plain ipykernel's, heaviest first."""
    ours = _importtime(_OUR_START)
    base = _importtime("import ipykernel.kernelapp, ipykernel.ipkernel")
    extra = {m: t for m, t in ours.items() if m not in base}
    total = sum(s for s, _ in extra.values())
    lines = [f"  modules beyond ipykernel: {len(extra)}, {total / 1000:.1f} ms of import time (self)"]
    for module, (own, cumulative) in sorted(extra.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"  {cumulative / 1000:8.1f} ms cumulative {own / 1000:7.1f} ms self  {module}")
    return lines


# -- (b) replay ------------------------------------------------------------------------------------------


def write_notebooks(folder: Path) -> tuple[Path, Path]:
    chat = new_notebook(
        cells=[new_code_cell(f"Step {i}: reply with the word ok.") for i in range(1, CELLS + 1)],
        metadata={"kernelspec": NEURALIS_SPEC},
    )
    nbformat.write(chat, folder / "chat50.ipynb")
    script = [json.dumps({"text": f"ok {i}"}) for i in range(1, CELLS + 1)]
    (folder / "chat50.demo.jsonl").write_text("\n".join(script) + "\n")
    plain = new_notebook(
        cells=[new_code_cell(f"x{i} = sum(range({i * 10}))\nx{i}") for i in range(1, CELLS + 1)],
        metadata={"kernelspec": PYTHON_SPEC},
    )
    nbformat.write(plain, folder / "plain50.ipynb")
    return folder / "chat50.ipynb", folder / "plain50.ipynb"


def _timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return took


def cell_seconds(executed: Path) -> list[float]:
    """Seconds from execute_input to execute_reply, per code cell (nbclient's timing metadata)."""
    out = []
    for cell in nbformat.read(executed, as_version=4).cells:
        timing = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in timing and "shell.execute_reply" in timing:
            start = datetime.fromisoformat(timing["iopub.execute_input"].replace("Z", "+00:00"))
            end = datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00"))
            out.append((end - start).total_seconds())
    return out


def replays(runs: int, folder: Path, env: dict[str, str]) -> dict[str, list[float]]:
    chat, plain = write_notebooks(folder)
    neuralis = [sys.executable, "-m", "neuralis_jupyter.cli", "run"]
    record = [*neuralis, str(chat), "--record", "--model", "scripted:demo", "-o", str(folder / "rec.ipynb")]
    _timed(record, env)
    replay = [*neuralis, str(chat), "--replay", "-o", str(folder / "chat50.out.ipynb")]
    execute = [
        str(Path(sys.executable).with_name("jupyter-execute")),
        str(plain),
        "--output",
        "plain50.out.ipynb",
    ]
    # What if the kernel, too, imported jsonschema without rfc3987_syntax (as `neuralis run` itself
    # does): a package of that name that fails to import, first on the kernel's path.
    shim = folder / "no-rfc3987" / "rfc3987_syntax"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('left out by kernel_bench.py')\n")
    shimmed = {**env, "PYTHONPATH": str(shim.parent)}
    times: dict[str, list[float]] = {"replay": [], "plain": [], "what-if": []}
    _timed(replay, env)  # warm-up, untimed
    _timed(execute, env)
    for _ in range(runs):
        times["replay"].append(_timed(replay, env))
        times["plain"].append(_timed(execute, env))
        times["what-if"].append(_timed([*replay[:-1], str(folder / "chat50.what-if.ipynb")], shimmed))
    return times


# -- report ----------------------------------------------------------------------------------------------


def _line(label: str, values: list[float]) -> str:
    return (
        f"  {label:<34} median {statistics.median(values):7.3f} s   min {min(values):7.3f} s   "
        f"max {max(values):7.3f} s   (n={len(values)})"
    )


def cold_start_report(reps: int, env: dict[str, str]) -> None:
    print(f"\n(a) kernel cold start to ready (kernel_info reply), {reps} interleaved starts each")
    starts = asyncio.run(cold_starts(reps, env))
    print(_line("neuralis", starts["neuralis"]))
    print(_line("python3 (plain ipykernel)", starts["python3"]))
    ratio = statistics.median(starts["neuralis"]) / statistics.median(starts["python3"])
    print(f"  ratio neuralis / python3: {ratio:.2f}x (goal <= 1.2x: {'met' if ratio <= 1.2 else 'MISSED'})")
    print("  import time, python -X importtime (what the Neuralis kernel imports beyond ipykernel):")
    print("\n".join(import_culprits()))


def replay_report(runs: int, folder: Path, env: dict[str, str]) -> None:
    print(f"\n(b) {CELLS}-step cassette replay vs nbclient on {CELLS} plain cells, {runs} runs each")
    times = replays(runs, folder, env)
    print(_line(f"neuralis run --replay ({CELLS} chats)", times["replay"]))
    print(_line(f"jupyter execute ({CELLS} plain cells)", times["plain"]))
    ratio = statistics.median(times["replay"]) / statistics.median(times["plain"])
    print(f"  ratio replay / plain: {ratio:.2f}x (goal <= 1.3x: {'met' if ratio <= 1.3 else 'MISSED'})")
    print(_line("what-if: kernel skips rfc3987_syntax", times["what-if"]))
    what_if = statistics.median(times["what-if"]) / statistics.median(times["plain"])
    print(f"  what-if ratio replay / plain: {what_if:.2f}x")
    cells = cell_seconds(folder / "chat50.out.ipynb")
    plain = cell_seconds(folder / "plain50.out.ipynb")
    print(
        f"  replay cells: first {cells[0]:.3f} s (workbench, packages, store), then median "
        f"{statistics.median(cells[1:]) * 1000:.1f} ms a chat cell, {sum(cells):.3f} s in all"
    )
    print(f"  plain cells: median {statistics.median(plain) * 1000:.1f} ms a cell, {sum(plain):.3f} s in all")
    kernel = _importtime("import neuralis_jupyter.workbench")
    plain_cli = _importtime("import nbclient")
    our_cli = _importtime(
        "from neuralis_jupyter.notebook_run import skip_iri_grammar\nwith skip_iri_grammar(): import nbclient"
    )
    for label, table, module in (
        ("kernel, first chat: import neuralis_jupyter.workbench", kernel, "neuralis_jupyter.workbench"),
        ("  of which jsonschema", kernel, "jsonschema"),
        ("  of which rfc3987_syntax (jsonschema's IRI format)", kernel, "rfc3987_syntax"),
        ("jupyter execute: import nbclient (nbformat, jsonschema)", plain_cli, "nbclient"),
        ("neuralis run: the same without rfc3987_syntax", our_cli, "nbclient"),
    ):
        if module in table:
            print(f"  {label}: {table[module][1] / 1000:.0f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=20, help="cold starts per kernel (default 20)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each command (default 5)")
    parser.add_argument("--only", choices=("a", "b"), help="run one of the two benchmarks")
    args = parser.parse_args(argv)
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="kernel-bench-") as tmp:
        env = bench_env(Path(tmp) / "home")
        if args.only != "b":
            cold_start_report(args.starts, env)
        if args.only != "a":
            folder = Path(tmp) / "nb"
            folder.mkdir()
            replay_report(args.runs, folder, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
