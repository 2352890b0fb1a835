"""``neuralis run`` end to end: real subprocesses, real kernels, a private data root, no key, no network.

Every run starts a kernel, so runs are shared: the committed notebooks are replayed twice each (the two
notebooks side by side), and the other tests make one or two runs of their own.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from .run_helpers import NOTEBOOKS, Ran, assert_same_outputs, neuralis_run

pytestmark = pytest.mark.slow
NAMES = ("quickstart", "usage")


@pytest.fixture(scope="module")
def run_env() -> dict[str, str]:
    """The environment of every ``neuralis run``: no keys, no stray cassette, loopback-only models."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("NEURALIS_") and k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")
    }
    env.update(NEURALIS_USER="alice", NEURALIS_MODEL_REQUESTS="loopback", JUPYTER_NO_CONFIG="1")
    return env


def run(notebook: Path, *args: str, home: Path, output: Path, env: dict[str, str]) -> Ran:
    return neuralis_run(notebook, *args, home=home, output=output, env=env, clear_env=True)


@pytest.fixture(scope="module")
def replays(tmp_path_factory: pytest.TempPathFactory, run_env: dict[str, str]) -> dict[str, list[Ran]]:
    """Each committed notebook replayed twice in a row in one data root (both notebooks at once)."""
    homes = {name: tmp_path_factory.mktemp(f"home-{name}") for name in NAMES}
    out = tmp_path_factory.mktemp("out")
    runs: dict[str, list[Ran]] = {name: [] for name in NAMES}
    with ThreadPoolExecutor(len(NAMES)) as pool:
        for attempt in (1, 2):
            jobs = {
                name: pool.submit(
                    run,
                    NOTEBOOKS / f"{name}.ipynb",
                    home=homes[name],
                    output=out / f"{name}.{attempt}.ipynb",
                    env=run_env,
                )
                for name in NAMES
            }
            for name, job in jobs.items():
                runs[name].append(job.result())
    return runs


def _ok(ran: Ran) -> None:
    assert ran.returncode == 0, ran.stderr
    nb = nbformat.read(ran.output, as_version=4)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors


def test_committed_quickstart_cassette_is_up_to_date(replays: dict[str, list[Ran]]) -> None:
    """The README's first command: the committed notebook replays from its committed cassette."""
    _ok(replays["quickstart"][0])
    header = json.loads((NOTEBOOKS / "quickstart.ipynb.cassette.jsonl").read_text().splitlines()[0])
    assert (header["provider"], header["model"]) == ("scripted", "demo")
    intro = nbformat.read(NOTEBOOKS / "quickstart.ipynb", as_version=4).cells[0]
    assert intro.cell_type == "markdown"
    assert "scripted demo model" in intro.source


@pytest.mark.parametrize("name", NAMES)
def test_replay_twice_gives_identical_outputs(replays: dict[str, list[Ran]], name: str) -> None:
    first, second = replays[name]
    _ok(first)
    _ok(second)
    home = Path(first.said("data root")[0])
    assert_same_outputs(first.output, second.output, [home])
    # Two runs, two conversations: the second one saw the first one's data and still came out the same.
    assert first.said("transcript") != second.said("transcript")


def test_usage_notebook_plots_its_spend(replays: dict[str, list[Ran]]) -> None:
    nb = nbformat.read(replays["usage"][0].output, as_version=4)
    mimes = [set(o.get("data", {})) for c in nb.cells for o in c.get("outputs", [])]
    assert any("image/png" in m for m in mimes)


def test_report_lines_point_at_files_that_exist(replays: dict[str, list[Ran]]) -> None:
    ran = replays["quickstart"][0]
    (root,) = ran.said("data root")
    (transcript,) = ran.said("transcript")
    (usage,) = ran.said("usage")
    assert Path(root).is_dir()
    path = Path(transcript.split(" (conversation ")[0])
    assert path.is_file()
    assert path.is_relative_to(root)
    assert path.parent.name in transcript  # the conversation id is named
    assert Path(usage.split(" (frames.usage")[0]).is_file()
    assert f"conversation={path.parent.name!r}" in usage


@pytest.fixture
def quickstart_copy(tmp_path: Path) -> Path:
    """The quickstart with its demo script and cassette, in a folder of its own."""
    for name in ("quickstart.ipynb", "quickstart.ipynb.cassette.jsonl", "quickstart.demo.jsonl"):
        shutil.copy(NOTEBOOKS / name, tmp_path / name)
    return tmp_path / "quickstart.ipynb"


def test_a_changed_prompt_fails_with_the_diff(
    quickstart_copy: Path, tmp_path: Path, run_env: dict[str, str]
) -> None:
    nb = nbformat.read(quickstart_copy, as_version=4)
    (cell,) = [c for c in nb.cells if c.source == "Hi! What can you do in this notebook?"]
    cell.source = "Hi! What can you NOT do in this notebook?"
    nbformat.write(nb, quickstart_copy)
    ran = run(quickstart_copy, home=tmp_path / "home", output=tmp_path / "out.ipynb", env=run_env)
    assert ran.returncode == 3, ran.stderr
    (where,) = ran.said("cell")
    assert "What can you NOT do" in where
    assert "diverged from the cassette" in where
    assert "the request at step 1 of" in ran.stderr
    assert '-          "text": "Hi! What can you do in this notebook?"' in ran.stderr
    assert '+          "text": "Hi! What can you NOT do in this notebook?"' in ran.stderr
    assert ran.output.is_file()  # the partial notebook is still written


def test_record_with_the_demo_model_then_replay_identically(
    quickstart_copy: Path, tmp_path: Path, run_env: dict[str, str]
) -> None:
    cassette = quickstart_copy.with_name("quickstart.ipynb.cassette.jsonl")
    cassette.unlink()
    home = tmp_path / "home"
    recorded = run(
        quickstart_copy,
        "--record",
        "--model",
        "scripted:demo",
        "--answer",
        "python=approve",
        home=home,
        output=tmp_path / "recorded.ipynb",
        env=run_env,
    )
    _ok(recorded)
    assert recorded.said("recorded") == [str(cassette)]
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    answers = [line for line in lines if line["type"] == "answer"]
    assert [a["key"] for a in answers] == ["approval:toolu_demo_means"]
    assert answers[0]["answer"]["approve"] is True

    replayed = run(quickstart_copy, "--replay", home=home, output=tmp_path / "replayed.ipynb", env=run_env)
    _ok(replayed)
    assert_same_outputs(recorded.output, replayed.output, [home])


def test_parameters_every_conversation_and_a_failing_cell_are_reported(
    tmp_path: Path, run_env: dict[str, str]
) -> None:
    """One live run with the demo model: injected parameters, two conversations, then a failing cell."""
    nb = new_notebook(
        cells=[
            new_code_cell('%%python\nn = 1\nlabel = "default"', metadata={"tags": ["parameters"]}),
            new_code_cell("%%python\nprint(n * 2, label, flag, sizes)"),
            new_code_cell("Hello"),
            new_code_cell("%conversation new"),
            new_code_cell("Hello again"),
            new_code_cell('%%python\nraise ValueError("boom")'),
            new_code_cell("%%python\nprint('never runs')"),
        ],
        metadata={"kernelspec": {"name": "neuralis", "display_name": "Neuralis Agent", "language": "python"}},
    )
    path = tmp_path / "params.ipynb"
    nbformat.write(nb, path)
    (tmp_path / "params.demo.jsonl").write_text('{"text": "Hi."}\n{"text": "Hi again."}\n')
    ran = run(
        path,
        *("--live", "--model", "scripted:demo"),
        *("-p", "n=21", "-p", "label=alice", "-p", "flag=true", "-p", "sizes=[1, 2]"),
        home=tmp_path / "home",
        output=tmp_path / "out.ipynb",
        env=run_env,
    )
    assert ran.returncode == 1, ran.stderr
    (failed,) = ran.said("cell")
    assert failed == "7 (%%python) failed: ValueError: boom"
    out = nbformat.read(ran.output, as_version=4)
    injected = out.cells[1]
    assert injected.metadata.tags == ["injected-parameters"]
    assert injected.source.startswith("%%python\n")
    assert out.cells[2].outputs[0].text == "42 alice True [1, 2]\n"
    assert out.cells[7].get("outputs") == []
    transcripts = ran.said("transcript")
    assert len(transcripts) == 2  # "%conversation new" between the two chats
    assert all(Path(t.split(" (conversation ")[0]).is_file() for t in transcripts)
    assert not (tmp_path / "params.ipynb.cassette.jsonl").exists()  # --live records nothing


def test_a_replay_that_makes_fewer_model_calls_than_recorded_fails(
    tmp_path: Path, run_env: dict[str, str]
) -> None:
    """A cassette's leftover model calls mean the notebook no longer does what was recorded."""
    nb = new_notebook(
        cells=[new_code_cell("First question."), new_code_cell("Second question.")],
        metadata={"kernelspec": {"name": "neuralis", "display_name": "Neuralis Agent", "language": "python"}},
    )
    path = tmp_path / "two.ipynb"
    nbformat.write(nb, path)
    (tmp_path / "two.demo.jsonl").write_text('{"text": "One."}\n{"text": "Two."}\n')
    home = tmp_path / "home"
    recorded = run(
        path, "--record", "--model", "scripted:demo", home=home, output=tmp_path / "rec.ipynb", env=run_env
    )
    _ok(recorded)
    cassette = tmp_path / "two.ipynb.cassette.jsonl"
    assert recorded.said("recorded") == [str(cassette)]

    nb.cells.pop()  # the second question is gone: one model call of the two recorded is left over
    nbformat.write(nb, path)
    ran = run(path, "--replay", home=home, output=tmp_path / "short.ipynb", env=run_env)

    assert ran.returncode == 3, ran.stderr
    (diverged,) = ran.said("the run diverged from")
    assert diverged.startswith(f"{cassette}: ")
    assert "the run ended after 1 model calls but 2 were recorded" in diverged
    assert "re-record with --record" in diverged
    assert ran.output.is_file()
    assert nbformat.read(ran.output, as_version=4).cells[0].outputs, "the cells that ran are written"


@pytest.fixture(autouse=True)
def _no_output_beside_notebooks() -> Iterator[None]:
    before = set(NOTEBOOKS.iterdir())
    yield
    assert set(NOTEBOOKS.iterdir()) == before, "a test wrote into notebooks/"
