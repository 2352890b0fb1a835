"""web_fetch's save_to: where it writes (the conversation's tmp folder, the caller's workspace as
c.ExecuteSettings.workspace names it), how (never through a symlink, a hard link or a FIFO, even one a
background shell swapped in), and when (never in shadow mode, in a sub-agent, or outside the envelope)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from neuralis_jupyter.contracts.envelope import Envelope, Scope
from neuralis_jupyter.runtime.context import SHADOW
from neuralis_jupyter.tools import web_fetch

from .webfixtures import Bench, WebServer, bench_fixture, call, tiny_pdf, web_fixture  # noqa: F401

Fetcher = Callable[..., Any]


@pytest.fixture
def fetcher(bench: Bench) -> Callable[..., Fetcher]:
    def make(**execute: Any) -> Fetcher:
        env = bench.env(WebSettings={"allowed_hosts": ["127.0.0.1"]}, ExecuteSettings=execute)
        return web_fetch.handlers(env)["web_fetch"]

    return make


def workspace_of(bench: Bench, user: str = "alice") -> Path:
    return bench.store.data_root.agent_dir("default", "assistant") / "workspace" / user


@pytest.fixture
def page(web: WebServer) -> str:
    web.route("/page", "fresh text", content_type="text/plain")
    return f"{web.url}/page"


def test_save_to_tmp_keeps_the_whole_rendering(bench, web, fetcher):
    web.route("/long.txt", "w" * 3000, content_type="text/plain")
    ctx = bench.context()
    out = call(fetcher(), ctx, url=f"{web.url}/long.txt", max_chars=10, save_to="tmp")
    saved = out.data["savedTo"]
    assert saved.startswith(str(ctx.request.conversation.path / "tmp"))
    assert saved.endswith(".md")
    with open(saved, encoding="utf-8") as f:
        assert f.read() == "w" * 3000
    assert f"saved to {saved}" in out.content


def test_save_to_lands_in_the_callers_own_workspace_and_keeps_raw_bytes(bench, web, fetcher):
    pdf = tiny_pdf("Keep me")
    web.route("/paper.pdf", pdf, content_type="application/pdf")
    out = call(fetcher(), bench.context(), url=f"{web.url}/paper.pdf", format="raw", save_to="papers/p.pdf")
    target = workspace_of(bench) / "papers" / "p.pdf"
    assert out.data["savedTo"] == str(target)
    assert target.read_bytes() == pdf


def test_save_to_honours_the_workspace_setting(bench, page, fetcher):
    """The same folder the shell runs in: c.ExecuteSettings.workspace, placeholders filled in."""
    out = call(fetcher(workspace="shared/{project}/{user}"), bench.context(), url=page, save_to="n/x.txt")
    target = bench.store.data_root.root / "shared" / "default" / "alice" / "n" / "x.txt"
    assert out.data["savedTo"] == str(target)
    assert target.read_text() == "fresh text"
    assert not (bench.store.data_root.agent_dir("default", "assistant") / "workspace").exists()


def test_a_workspace_setting_outside_the_data_root_is_refused_before_fetching(
    bench, web, page, fetcher, tmp_path
):
    out = call(fetcher(workspace=str(tmp_path / "{user}")), bench.context(), url=page, save_to="x.txt")
    assert out.outcome == "refused"
    assert "not a folder inside the data root" in out.content
    assert not web.hits
    assert not (tmp_path / "alice").exists()


@pytest.mark.parametrize(
    ("save_to", "why"),
    [
        ("/etc/passwd", "relative path"),
        ("../escape.md", "'..'"),
        ("notes/../../x.md", "'..'"),
        ("~/x.md", "relative path"),
        ("data://project/x.md", "data://"),
        ("notes\\x.md", "relative path"),
    ],
)
def test_save_to_outside_the_workspace_is_refused_before_fetching(save_to, why, bench, web, page, fetcher):
    out = call(fetcher(), bench.context(), url=page, save_to=save_to)
    assert out.outcome == "refused"
    assert why in out.content
    assert not web.hits


def test_save_to_through_a_symlink_out_of_the_workspace_is_refused(bench, page, fetcher, tmp_path):
    workspace = workspace_of(bench)
    workspace.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, workspace / "link")
    out = call(fetcher(), bench.context(), url=page, save_to="link/sub/x.md")
    assert out.outcome == "refused"
    assert "symlink" in out.content
    assert not list(outside.iterdir())


def test_save_to_never_follows_a_symlinked_folder_even_one_that_stays_inside(bench, page, fetcher):
    """A link that points inside now could point outside a moment later (a background shell shares the
    workspace): every folder is opened without following links, so no check-then-use gap is left."""
    workspace = workspace_of(bench)
    (workspace / "real").mkdir(parents=True)
    os.symlink(workspace / "real", workspace / "link")
    out = call(fetcher(), bench.context(), url=page, save_to="link/x.md")
    assert out.outcome == "refused"
    assert "'link' is a symlink or not a folder" in out.content
    assert not list((workspace / "real").iterdir())


#: A FIFO opened for writing without a reader blocks the host thread forever: fail the run instead.
@pytest.mark.timeout(10, method="thread")
@pytest.mark.parametrize("kind", ["symlink", "hard link", "fifo", "fifo with a reader", "folder"])
def test_the_file_itself_is_never_written_through(bench, page, fetcher, tmp_path, kind):
    workspace = workspace_of(bench)
    workspace.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    name = workspace / "x.md"
    reader = None
    if kind == "symlink":
        os.symlink(victim, name)
    elif kind == "hard link":
        os.link(victim, name)
    elif kind.startswith("fifo"):
        os.mkfifo(name)
        if kind == "fifo with a reader":
            reader = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
    else:
        name.mkdir()
    try:
        out = call(fetcher(), bench.context(), url=page, save_to="x.md")
        assert out.outcome == "refused", out.content
        assert victim.read_text() == "original"
        if reader is not None:
            assert os.read(reader, 100) == b""
    finally:
        if reader is not None:
            os.close(reader)


def test_save_to_replaces_an_earlier_save(bench, web, fetcher):
    web.route("/a", "first version, longer", content_type="text/plain")
    web.route("/b", "second", content_type="text/plain")
    call(fetcher(), bench.context(), url=f"{web.url}/a", save_to="page.txt")
    out = call(fetcher(), bench.context(), url=f"{web.url}/b", save_to="page.txt")
    assert out.outcome == "ok"
    assert (workspace_of(bench) / "page.txt").read_text() == "second"


# -- when save_to may write at all ----------------------------------------------------------------


def with_request(ctx: Any, **changes: Any) -> Any:
    ctx.request = dataclasses.replace(ctx.request, **changes)
    return ctx


READ_ONLY = Envelope(scope=Scope.of(writes=()))


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"mode": SHADOW}, "this run is in shadow mode, which performs no effects"),
        ({"depth": 1}, "a sub-agent only reads"),
        ({"envelope": READ_ONLY}, "it is not among the writes this run may make"),
        ({"envelope": Envelope(scope=Scope.of(writes=["todos"]))}, "not among the writes"),
    ],
    ids=["shadow", "sub-agent", "read-only envelope", "other writes only"],
)
@pytest.mark.parametrize("save_to", ["tmp", "notes/x.md"])
def test_save_to_is_refused_where_no_write_may_happen(bench, web, page, fetcher, changes, why, save_to):
    ctx = with_request(bench.context(), **changes)
    out = call(fetcher(), ctx, url=page, save_to=save_to)
    assert (out.outcome, out.is_error) == ("refused", True)
    assert out.content.startswith("Refused: save_to writes a file")
    assert why in out.content
    assert not web.hits, "refused before any egress"
    assert not (ctx.request.conversation.path / "tmp").exists()
    assert not workspace_of(bench).exists()
    # The same call without save_to is the read it is declared to be.
    assert call(fetcher(), ctx, url=page).outcome == "ok"


def test_save_to_runs_when_the_envelope_admits_web_fetch_as_a_write(bench, page, fetcher):
    ctx = with_request(bench.context(), envelope=Envelope(scope=Scope.of(writes=["web_fetch"])))
    out = call(fetcher(), ctx, url=page, save_to="x.txt")
    assert out.outcome == "ok", out.content
    assert (workspace_of(bench) / "x.txt").read_text() == "fresh text"
