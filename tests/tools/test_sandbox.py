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

from neuralis_jupyter.tools.sandbox import Capture, bwrap_argv, parse_bwrap_version, supports_disable_userns

from .exec_support import (
    BWRAP,
    MEMBER,
    ExecRig,
    exec_data_root,
    exec_session,
    gone,
    needs_bwrap,
    processes_with,
    require_bwrap,
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


def test_without_bubblewrap_exec_unconfined_runs_unconfined_when_it_may_use_the_network(
    tmp_path: Path,
) -> None:
    with exec_data_root(tmp_path) as root:
        rig = ExecRig.build(root, settings={"bwrap_path": str(tmp_path / "no-such-bwrap")})
        admin = exec_session(features=(*MEMBER, "exec.unconfined", "core.web"))
        result = rig.shell("echo $HOME; env | sort | cut -d= -f1", admin, network=True)
        assert result["unconfined"] is True
        assert result["exitCode"] == 0
        lines = result["stdout"].split()
        assert lines[0] == str(rig.workspace)
        assert set(lines[1:]) <= {"HOME", "LANG", "NEURALIS_SESSION_TOKEN", "PATH", "PWD", "SHLVL", "_"}


@pytest.mark.parametrize("features", [(), ("core.web",)], ids=["no-core-web", "core-web"])
def test_without_bubblewrap_an_unconfined_call_without_network_is_refused(
    tmp_path: Path, features: tuple[str, ...]
) -> None:
    """An unconfined command has the host's network: network false (or no core.web) refuses it."""
    with exec_data_root(tmp_path) as root:
        rig = ExecRig.build(root, settings={"bwrap_path": str(tmp_path / "no-such-bwrap")})
        admin = exec_session(features=(*MEMBER, "exec.unconfined", *features))
        block = rig.call(admin, command=f"touch {tmp_path}/ran", network=False)
        assert (block["outcome"], block["is_error"]) == ("refused", True)
        assert "the host's network" in block["content"]
        assert "c.ExecuteSettings.unconfined_network" in block["content"]
        assert not (tmp_path / "ran").exists()
        # The explicit setting lets it run (and says so in the result).
        allowed = ExecRig.build(
            root, settings={"bwrap_path": str(tmp_path / "no-such-bwrap"), "unconfined_network": True}
        )
        result = allowed.shell(f"touch {tmp_path}/ran", admin)
        assert result["unconfined"] is True
        assert (tmp_path / "ran").exists()


@pytest.mark.parametrize("confinement", ["sandbox", "unconfined"])
def test_a_timeout_kills_the_whole_process_group(tmp_path: Path, confinement: str) -> None:
    if confinement == "sandbox":
        require_bwrap()
    unconfined = {"bwrap_path": "/nonexistent", "unconfined_network": True}
    settings = {"timeout": 0.5} if confinement == "sandbox" else {"timeout": 0.5, **unconfined}
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


def test_every_bind_covers_again_the_hidden_paths_nested_inside_it(tmp_path: Path) -> None:
    """/home hidden, the data root at /home/shared/neuralis, /home/shared bound: the data root is
    covered after the bind although /home alone was covered first."""
    with exec_data_root(tmp_path) as home:
        if str(home).startswith("/tmp/"):
            pytest.skip("needs a writable /var/tmp (a path under /tmp is never masked)")
        root = home / "shared" / "neuralis"
        work = root / "projects" / "p" / "agents" / "a" / "workspace" / "u"
        work.mkdir(parents=True)
        shared = str(home / "shared")
        argv = bwrap_argv("bwrap", cwd=work, network=False, hidden=[home, root], ro_binds=[shared])
        pairs = list(itertools.pairwise(argv))
        assert [b for a, b in pairs if a == "--tmpfs"] == ["/tmp", str(home), str(root)]
        bound = argv.index(shared)
        assert argv.index(str(home)) < bound < argv.index(str(root)) < argv.index("--bind")
        assert ("--remount-ro", str(root)) in pairs


@pytest.mark.parametrize("workspace", ["{parent}", "{root}", "/var/tmp/{user}", "link/{user}"])
def test_a_workspace_outside_the_data_root_is_refused(tmp_path: Path, workspace: str) -> None:
    with exec_data_root(tmp_path) as root:
        (root / "link").symlink_to(tmp_path)  # a relative template that leads out through a symlink
        template = workspace.format(parent=root.parent, root=root, user="{user}")
        rig = ExecRig.build(root, settings={"workspace": template})
        block = rig.call(exec_session(features=(*MEMBER, "exec.unconfined")), command="echo never")
        assert block["outcome"] == "error"
        assert "which is not a folder inside the data root" in block["content"]
        assert not (tmp_path / "alice").exists()


@needs_bwrap
def test_each_user_has_a_workspace_of_their_own(rig: ExecRig) -> None:
    """Conversations are private, so are shells: the default workspace ends in the user's id."""
    rig.shell("echo alice > mine.txt")
    bob = exec_session(user_id="bob")
    result = rig.shell("ls; echo bob > mine.txt", bob)
    assert result["stdout"] == ""
    assert result["cwd"] == str(rig.workspace.parent / "bob")
    assert (rig.workspace / "mine.txt").read_text() == "alice\n"
    assert (rig.workspace.parent / "bob" / "mine.txt").read_text() == "bob\n"


@pytest.mark.parametrize(
    ("said", "version", "flag"),
    [
        ("bubblewrap 0.8.0\n", (0, 8, 0), True),
        ("bubblewrap 0.11.0", (0, 11, 0), True),
        ("bubblewrap 1.0", (1, 0), True),
        ("bubblewrap 0.6.1\n", (0, 6, 1), False),
        ("bubblewrap 0.4.0", (0, 4, 0), False),
        ("bwrap: Unknown option --version", None, True),
        ("", None, True),
    ],
)
def test_disable_userns_is_decided_from_the_version(
    said: str, version: tuple[int, ...] | None, flag: bool
) -> None:
    """0.8.0 and later know --disable-userns; an unknown version keeps it (fail closed)."""
    assert parse_bwrap_version(said) == version
    assert supports_disable_userns(version) is flag


def fake_bwrap(path: Path, *, version: str, refuse: str, log: Path) -> str:
    """A bubblewrap that reports ``version``, logs its argv, and fails with ``refuse`` on stderr whenever
    it is given --disable-userns; anything else runs the real one."""
    path.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = --version ] && {{ echo "bubblewrap {version}"; exit 0; }}\n'
        f'echo "$*" >> {log}\n'
        'for a in "$@"; do [ "$a" = --disable-userns ] && {\n'
        f'  echo "{refuse}" >&2; exit 1; }}\n'
        "done\n"
        f'exec {BWRAP} "$@"\n'
    )
    path.chmod(0o755)
    return str(path)


@needs_bwrap
def test_a_bubblewrap_before_0_8_sandboxes_without_disable_userns(tmp_path: Path) -> None:
    """bubblewrap before 0.8 (Ubuntu 22.04 ships 0.6) has no --disable-userns: its version says so."""
    log = tmp_path / "argv.log"
    old = fake_bwrap(tmp_path / "old-bwrap", version="0.6.1", refuse="bwrap: Unknown option", log=log)
    with exec_data_root(tmp_path) as root:
        rig = ExecRig.build(root, settings={"bwrap_path": old})
        result = rig.shell(f"touch /etc/neuralis-old-{secrets.token_hex(4)}; ls /home; echo ran")
        assert "unconfined" not in result
        assert result["stdout"] == "ran\n"
        assert "Read-only file system" in result["stderr"]
        assert "--disable-userns" not in log.read_text()


@needs_bwrap
def test_an_error_message_never_drops_disable_userns(tmp_path: Path) -> None:
    """A 0.8+ bubblewrap whose setup fails with a message naming disable-userns is refused, not weakened."""
    log = tmp_path / "argv.log"
    said = "bwrap: --disable-userns: setting up the namespace failed"
    liar = fake_bwrap(tmp_path / "bwrap", version="0.9.0", refuse=said, log=log)
    with exec_data_root(tmp_path) as root:
        rig = ExecRig.build(root, settings={"bwrap_path": liar})
        for _ in range(2):
            block = rig.call(command=f"touch {tmp_path}/ran")
            assert block["outcome"] == "refused"
            assert "--disable-userns: setting up the namespace failed" in block["content"]
        assert not (tmp_path / "ran").exists()
        runs = log.read_text().splitlines()
        assert len(runs) == 2
        assert all("--disable-userns" in run for run in runs)
