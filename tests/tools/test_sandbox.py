"""The shell sandbox around the corpus: egress only with core.web, fail-closed without bubblewrap,
timeouts that kill the whole process tree, output caps, and the order of bwrap's mounts."""

from __future__ import annotations

import asyncio
import itertools
import secrets
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuralis_jupyter.tools.sandbox import Capture, bwrap_argv

from .exec_support import (
    BWRAP,
    MEMBER,
    ExecRig,
    exec_data_root,
    exec_session,
    gone,
    needs_bwrap,
    processes_with,
)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[ExecRig]:
    with exec_data_root(tmp_path) as root:
        yield ExecRig.build(root)


@needs_bwrap
def test_network_true_with_core_web_reaches_the_loopback_server(rig: ExecRig) -> None:
    """The positive control for the socket case: the same probe connects when egress is allowed."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2).close()"
        web = exec_session(features=(*MEMBER, "core.web"))
        result = rig.shell(f'{sys.executable} -c "{probe}"', web, network=True)
        assert result["exitCode"] == 0, result["stderr"]
        conn, _ = server.accept()
        conn.close()


def test_network_true_without_core_web_is_refused(rig: ExecRig) -> None:
    block = rig.call(command="echo never", network=True)
    assert block["outcome"] == "refused"
    assert "core.web" in block["content"]


def test_without_bubblewrap_the_shell_is_refused(tmp_path: Path) -> None:
    with exec_data_root(tmp_path) as root:
        rig = ExecRig.build(root, settings={"bwrap_path": str(tmp_path / "no-such-bwrap")})
        block = rig.call(command=f"touch {tmp_path}/ran")
        assert block["outcome"] == "refused"
        assert block["is_error"] is True
        text = block["content"]
        assert text.startswith("Refused: execute was not run because the shell sandbox cannot start")
        assert "bubblewrap was not found" in text
        assert "apt-get install bubblewrap" in text
        assert "exec.unconfined" in text
        assert "Nothing ran" in text
        assert not (tmp_path / "ran").exists()


def test_without_bubblewrap_exec_unconfined_runs_unconfined(tmp_path: Path) -> None:
    with exec_data_root(tmp_path) as root:
        rig = ExecRig.build(root, settings={"bwrap_path": str(tmp_path / "no-such-bwrap")})
        admin = exec_session(features=(*MEMBER, "exec.unconfined"))
        result = rig.shell("echo $HOME; env | sort | cut -d= -f1", admin)
        assert result["unconfined"] is True
        assert result["exitCode"] == 0
        lines = result["stdout"].split()
        assert lines[0] == str(rig.workspace)
        assert set(lines[1:]) <= {"HOME", "LANG", "NEURALIS_SESSION_TOKEN", "PATH", "PWD", "SHLVL", "_"}


@pytest.mark.parametrize("confinement", ["sandbox", "unconfined"])
def test_a_timeout_kills_the_whole_process_group(tmp_path: Path, confinement: str) -> None:
    if confinement == "sandbox" and BWRAP is None:
        pytest.skip("bubblewrap is not installed")
    settings = (
        {"timeout": 0.5} if confinement == "sandbox" else {"timeout": 0.5, "bwrap_path": "/nonexistent"}
    )
    marker = f"1000.{secrets.randbelow(10**6):06d}"
    with exec_data_root(tmp_path) as root:
        rig = ExecRig.build(root, settings=settings)
        session = exec_session(features=(*MEMBER, "exec.unconfined"))
        # The call asks for more than the limit: it is clamped to the configured 0.5 s.
        result = rig.shell(f"sleep {marker} & sleep {marker}", session, timeout=100)
        assert ("unconfined" in result) is (confinement == "unconfined")
        assert result["timedOut"] is True
        assert result["exitCode"] is None
        assert result["_block"]["is_error"] is True
        assert result["_block"]["outcome"] == "error"
        assert asyncio.run(gone(marker)), processes_with(marker)


@needs_bwrap
def test_output_is_capped_with_head_and_tail(tmp_path: Path) -> None:
    with exec_data_root(tmp_path) as root:
        rig = ExecRig.build(root, settings={"max_output_bytes": 1000})
        result = rig.shell("printf START; head -c 50000 /dev/zero | tr '\\0' a; printf END; printf small >&2")
        out = result["stdout"]
        assert out.startswith("START" + "a" * 495)
        assert out.endswith("a" * 497 + "END")
        assert f"\n[… {50008 - 1000} bytes omitted …]\n" in out
        assert result["stderr"] == "small"


def test_capture_keeps_head_and_tail_across_chunks() -> None:
    cap = Capture(10)
    for chunk in (b"0123", b"456789", b"abcdef"):
        cap.add(chunk)
    assert cap.text() == "01234\n[… 6 bytes omitted …]\nbcdef"
    small = Capture(10)
    small.add(b"hello")
    assert small.text() == "hello"


def test_bwrap_argv_hides_then_binds_the_workspace_back(tmp_path: Path) -> None:
    with exec_data_root(tmp_path) as data:
        work = data / "projects" / "p" / "agents" / "a" / "workspace"
        work.mkdir(parents=True)
        (data / "inner").mkdir()
        hidden = ["/etc", "/etc/ssl", "/nonexistent", tmp_path, data]
        argv = bwrap_argv("bwrap", cwd=work, network=False, hidden=hidden)
        pairs = list(itertools.pairwise(argv))
        tmpfs = [b for a, b in pairs if a == "--tmpfs"]
        if not str(data).startswith("/tmp/"):
            assert tmpfs == ["/tmp", "/etc", str(data)]  # outermost only; /tmp is private already
            assert ("--remount-ro", str(data)) in pairs
        assert argv.index("--bind") > argv.index("/etc")
        assert ("--bind", str(work)) in pairs
        assert ("--chdir", str(work)) in pairs
        assert all("/nonexistent" not in a for a in argv)
        flags = {"--unshare-net", "--unshare-pid", "--disable-userns", "--die-with-parent", "--new-session"}
        assert flags <= set(argv)
        assert ("--cap-drop", "ALL") in pairs
        assert "--unshare-net" not in bwrap_argv("bwrap", cwd=work, network=True, hidden=[])
        # A hidden path inside the working directory is covered after the workspace is bound.
        nested = bwrap_argv("bwrap", cwd=data, network=False, hidden=["/etc", data / "inner"])
        if not str(data).startswith("/tmp/"):
            assert nested.index(str(data / "inner")) > nested.index("--bind")


def test_a_read_only_bind_never_brings_a_hidden_path_back(tmp_path: Path) -> None:
    with exec_data_root(tmp_path) as data:
        secret = data / "secret.txt"
        secret.write_text("S3CRET-bind")
        parent = str(data.parent)
        argv = bwrap_argv("bwrap", cwd=data / "ws", network=False, hidden=[data, secret], ro_binds=[parent])
        bind_at = argv.index("--ro-bind-try")
        if not str(data).startswith("/tmp/"):
            covers = [i for i, a in enumerate(argv) if a == str(data) and argv[i - 1] == "--tmpfs"]
            assert len(covers) == 2
            assert covers[0] < bind_at < covers[1]
        single = bwrap_argv("bwrap", cwd=data / "ws", network=False, hidden=[secret])
        if not str(data).startswith("/tmp/"):
            assert tuple(single[single.index(str(secret)) - 2 : single.index(str(secret))]) == (
                "--ro-bind",
                "/dev/null",
            )


def test_a_workspace_that_holds_the_data_root_is_refused(tmp_path: Path) -> None:
    with exec_data_root(tmp_path) as root:
        rig = ExecRig.build(root, settings={"workspace": str(root.parent)})
        block = rig.call(exec_session(features=(*MEMBER, "exec.unconfined")), command="echo never")
        assert block["outcome"] == "error"
        assert "holds the data root" in block["content"]


@needs_bwrap
def test_a_bubblewrap_without_disable_userns_still_sandboxes(tmp_path: Path) -> None:
    """bubblewrap before 0.8 (Ubuntu 22.04 ships 0.6) rejects --disable-userns: the probe drops it."""
    old = tmp_path / "old-bwrap"
    old.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = --disable-userns ] && {\n'
        '  echo "bwrap: Unknown option $a" >&2; exit 1; }\n'
        "done\n"
        f'exec {BWRAP} "$@"\n'
    )
    old.chmod(0o755)
    with exec_data_root(tmp_path) as root:
        rig = ExecRig.build(root, settings={"bwrap_path": str(old)})
        result = rig.shell(f"touch /etc/neuralis-old-{secrets.token_hex(4)}; ls /home; echo ran")
        assert "unconfined" not in result
        assert result["stdout"] == "ran\n"
        assert "Read-only file system" in result["stderr"]
