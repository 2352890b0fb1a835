"""``neuralis run`` in-process: arguments, parameters, recorded answers, the normaliser. No kernel."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from neuralis_jupyter.cli import main
from neuralis_jupyter.kernel.headless import (
    ANSWERS_ENV,
    GIVEN_BY,
    RecordedAnswerer,
    RecordedApprover,
    headless_answerers,
    parse_answers,
)
from neuralis_jupyter.notebook_run import inject_parameters, may_chat, parse_parameters, parse_value
from neuralis_jupyter.providers.cassette import FORMAT, Cassette
from neuralis_jupyter.store.interactions import PendingInteraction

from .run_helpers import normalise_text

NEURALIS = {"kernelspec": {"name": "neuralis", "display_name": "Neuralis Agent", "language": "python"}}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3),
        ("-2.5", -2.5),
        ("1e3", 1000.0),
        ("true", True),
        ("False", False),
        ("null", None),
        ("None", None),
        ("[1, 2]", [1, 2]),
        ('{"a": 1}', {"a": 1}),
        ('"07"', "07"),
        ("alice", "alice"),
        ("[not json", "[not json"),
        ("", ""),
    ],
)
def test_parameter_values_are_parsed(text: str, value: object) -> None:
    assert parse_value(text) == value


@pytest.mark.parametrize("item", ["n", "=3", "2x=1", "class=1", "a-b=2"])
def test_bad_parameters_are_refused(item: str) -> None:
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_parameters([item])


def test_parameters_go_after_the_tagged_cell_and_replace_an_earlier_injection() -> None:
    nb = new_notebook(
        cells=[
            new_markdown_cell("intro"),
            new_code_cell("%%python\nn = 1", metadata={"tags": ["parameters"]}),
            new_code_cell("%%python\n# old", metadata={"tags": ["injected-parameters"]}),
            new_code_cell("Hello"),
        ]
    )
    index = inject_parameters(nb, {"n": 2, "name": "x"}, python_prefix=True)
    assert index == 2
    assert [c.source.splitlines()[0] for c in nb.cells] == ["intro", "%%python", "%%python", "Hello"]
    assert nb.cells[2].source.splitlines()[1:] == [
        "# Parameters injected by neuralis run",
        "n = 2",
        "name = 'x'",
    ]
    assert "# old" not in json.dumps(nb)


def test_without_a_parameters_cell_they_go_first_and_plain_kernels_get_no_prefix() -> None:
    nb = new_notebook(cells=[new_code_cell("print(n)")])
    assert inject_parameters(nb, {"n": 1}, python_prefix=False) == 0
    assert nb.cells[0].source == "# Parameters injected by neuralis run\nn = 1"


@pytest.mark.parametrize(
    ("source", "chats"),
    [("Hello", True), ("%%chat\nhi", True), ("%%python\n1", False), ("%guard auto", False), ("!ls", False)],
)
def test_may_chat(source: str, chats: bool) -> None:
    assert may_chat(source) is chats


# -- the command line, before any kernel starts ------------------------------------------------------


def _write(path: Path, **metadata: object) -> Path:
    nbformat.write(new_notebook(cells=[new_code_cell("Hello")], metadata=metadata), path)
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.ipynb"], "no notebook at"),
        (["--replay", "{nb}"], "no cassette at"),
        (["--record", "--model", "demo", "{nb}"], "PROVIDER:MODEL"),
        (["-p", "x", "{nb}"], "NAME=VALUE"),
        (["--answer", "python=maybe", "{nb}"], "approve or deny"),
        (["--record", "--model", "scripted:demo", "{nb}"], "needs a script"),
        (["--kernel", "no-such-kernel", "{nb}"], "no kernel named 'no-such-kernel' is installed"),
        (["-o", "missing/out.ipynb", "{nb}"], "no folder missing"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    nb = _write(tmp_path / "nb.ipynb", **NEURALIS)
    code = main(["run", *[a.replace("{nb}", str(nb)) for a in args]])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("neuralis run: ")
    assert message in err


def test_a_replay_takes_no_model_and_no_answers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nb = _write(tmp_path / "nb.ipynb", **NEURALIS)
    (tmp_path / "nb.ipynb.cassette.jsonl").write_text(json.dumps({"type": "header", "format": FORMAT}) + "\n")
    assert main(["run", "--answer", "python=approve", str(nb)]) == 2
    assert "a replay uses its cassette" in capsys.readouterr().err


def test_a_notebook_for_another_kernel_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nb = _write(tmp_path / "nb.ipynb", kernelspec={"name": "python3", "display_name": "Python 3"})
    assert main(["run", str(nb)]) == 2
    err = capsys.readouterr().err
    assert "names the 'python3' kernel, not 'neuralis'; pass --kernel python3" in err


# -- answers given on the command line, and answers on the cassette ---------------------------------


def test_answers_are_parsed() -> None:
    given = parse_answers(["python=approve", "toolu_9=deny", "question=yes", "question:toolu_5=a, b"])
    assert given.approval("toolu_9", "python") is False  # the call's id beats the tool's name
    assert given.approval("toolu_1", "python") is True
    assert given.approval("toolu_1", "execute") is None
    assert given.question("toolu_5") == "a, b"
    assert given.question("toolu_6") == "yes"


def _interaction(tool_use_id: str = "toolu_1", tool: str = "python") -> PendingInteraction:
    now = datetime.now(UTC)
    return PendingInteraction(
        id="i-1",
        created=now,
        updated=now,
        project_id="default",
        user_id="alice",
        agent_id="assistant",
        conversation_id="c-1",
        request_id="r-1",
        tool_use_id=tool_use_id,
        tool_name=tool,
        package_id="@neuralis/agent-core",
        kind="tool_approval",
        input_json="{}",
        input_hash="",
        status="pending",
        asked_by="guard",
        guard_profile="balanced",
        session_json="{}",
    )


def test_recorded_approvals_replay_and_unrecorded_ones_are_refused_by_the_guard(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    recorder = Cassette(path, "record")
    recorder.write_header(provider="scripted", model_id="demo")
    approver = RecordedApprover(given=parse_answers(["python=approve"]), cassette=recorder)
    answer = asyncio.run(approver.ask(_interaction("toolu_1")))
    assert (answer.approve, answer.by) == (True, GIVEN_BY)
    refused = asyncio.run(approver.ask(_interaction("toolu_2", tool="execute")))
    assert refused.approve is False
    assert [json.loads(line)["type"] for line in path.read_text().splitlines()] == ["header", "answer"]

    replay = RecordedApprover(given=parse_answers([]), cassette=Cassette(path, "replay"))
    again = asyncio.run(replay.ask(_interaction("toolu_1")))
    assert (again.approve, again.by) == (True, GIVEN_BY)
    other = asyncio.run(replay.ask(_interaction("toolu_3")))
    assert other.approve is False
    assert "the guard profile is 'balanced'" in (other.reason or "")


def test_a_denial_given_up_front_says_so() -> None:
    answer = asyncio.run(
        RecordedApprover(given=parse_answers(["python=deny"]), cassette=None).ask(_interaction())
    )
    assert answer.approve is False
    assert answer.reason == f"denied by {GIVEN_BY}"


def test_question_answers_are_recorded_and_replayed(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    recorder = Cassette(path, "record")
    recorder.write_header(provider="scripted", model_id="demo")
    answerer = RecordedAnswerer(given=parse_answers(["question:toolu_1=a, b"]), cassette=recorder)
    options = [{"id": "a", "label": "A"}, {"id": "b", "label": "B"}]
    ask = {"question": "Which?", "options": options, "multiple": True}
    assert asyncio.run(answerer.ask(**ask, tool_use_id="toolu_1")) == ["a", "b"]
    assert asyncio.run(answerer.ask(**ask, tool_use_id="toolu_2")) is None  # unanswered, recorded as such

    replay = Cassette(path, "replay")
    _, replayed = headless_answerers(replay)
    assert replayed is not None
    assert asyncio.run(replayed.ask(**ask, tool_use_id="toolu_1")) == ["a", "b"]
    assert asyncio.run(replayed.ask(**ask, tool_use_id="toolu_2")) is None


def test_without_question_answers_there_is_no_answerer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ANSWERS_ENV, json.dumps(["python=approve"]))
    assert headless_answerers(None)[1] is None
    monkeypatch.setenv(ANSWERS_ENV, json.dumps(["question=yes"]))
    _, answerer = headless_answerers(None)
    assert answerer is not None
    assert asyncio.run(answerer.ask(question="Go?", options=[], multiple=False, tool_use_id="t")) == ["yes"]


# -- the normaliser --------------------------------------------------------------------------------


def test_the_normaliser_replaces_what_changes_between_runs() -> None:
    text = (
        "conversation c-0b02c7f6a1a24152 request r-b2b61427ef084fa7 at 2026-11-29T21:08:26.242Z and "
        "2026-11-29 21:08:26.242567+00:00, took 4 ms then 1.5 s, <object at 0x7f3a2b1c9d90>, "
        "model 1b4e28ba-2fa1-11d2-883f-0016d3cca427 in /tmp/home-x/projects; 2 steps, 6 rows"
    )
    assert normalise_text(text, ["/tmp/home-x"]) == (
        "conversation <id> request <id> at <timestamp> and <timestamp>, took <duration> then <duration>, "
        "<object at <address>>, model <uuid> in <path>/projects; 2 steps, 6 rows"
    )
