"""The sandbox escape corpus: each attempt is its own shell call, and each is checked from the host
side (the file is unchanged, the socket saw no connection, the secret never came back)."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .exec_support import ExecRig, exec_data_root, needs_bwrap

pytestmark = needs_bwrap


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[ExecRig]:
    with exec_data_root(tmp_path) as root:
        yield ExecRig.build(root)


Check = Callable[[dict[str, Any]], None]


class Corpus:
    """One escape attempt's host-side fixtures, removed afterwards whatever happened."""

    def __init__(self, rig: ExecRig) -> None:
        self.rig = rig
        self.tag = secrets.token_hex(5)
        self.marker = f"S3CRET-{self.tag}"
        self._made: list[Path] = []

    def host(self, path: Path | str) -> Path:
        """A host path this case may create (directly or through a successful escape)."""
        p = Path(path)
        self._made.append(p)
        return p

    def secret_file(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.marker)
        return self.host(path)

    def cleanup(self) -> None:
        for p in reversed(self._made):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            elif os.path.lexists(p):
                p.unlink()


def absent(*paths: Path) -> Check:
    def check(result: dict[str, Any]) -> None:
        for p in paths:
            assert not os.path.lexists(p), f"the sandbox wrote {p} on the host"

    return check


def never_shows(marker: str) -> Check:
    def check(result: dict[str, Any]) -> None:
        assert marker not in result["stdout"] + result["stderr"]

    return check


def assert_never_connected(server: socket.socket) -> None:
    """No connection is waiting on the (non-blocking) listening socket; closes it either way."""
    with server:
        try:
            conn, _ = server.accept()
        except BlockingIOError:
            return
        conn.close()
    raise AssertionError("the sandbox reached a host socket")


def writes(c: Corpus, target: Path) -> tuple[str, Check]:
    return f"echo pwned > {target}", absent(c.host(target))


CASES: dict[str, Callable[[Corpus], tuple[str, Check]]] = {}


def case(fn: Callable[[Corpus], tuple[str, Check]]) -> Callable[[Corpus], tuple[str, Check]]:
    CASES[fn.__name__.removeprefix("escape_")] = fn
    return fn


@case
def escape_write_etc(c: Corpus) -> tuple[str, Check]:
    return writes(c, Path("/etc") / f"neuralis-escape-{c.tag}")


@case
def escape_write_usr(c: Corpus) -> tuple[str, Check]:
    return writes(c, Path("/usr") / f"neuralis-escape-{c.tag}")


@case
def escape_write_data_root(c: Corpus) -> tuple[str, Check]:
    return writes(c, c.rig.root / f"escape-{c.tag}")


@case
def escape_overwrite_conversation(c: Corpus) -> tuple[str, Check]:
    meta = c.rig.conv.path / "meta.json"
    before = meta.read_bytes()

    def check(result: dict[str, Any]) -> None:
        assert meta.read_bytes() == before

    return f"rm -f {meta}; echo pwned > {meta}", check


@case
def escape_write_other_agents_workspace(c: Corpus) -> tuple[str, Check]:
    other = c.rig.root / "projects" / "default" / "agents" / "other" / "workspace"
    other.mkdir(parents=True)
    return writes(c, other / f"x-{c.tag}")


@case
def escape_write_sibling_of_cwd(c: Corpus) -> tuple[str, Check]:
    sibling = c.host(c.rig.workspace.parent / f"sibling-{c.tag}")
    sibling.mkdir(parents=True)
    return f"echo pwned > ../sibling-{c.tag}/x", absent(sibling / "x")


@case
def escape_write_host_home(c: Corpus) -> tuple[str, Check]:
    return writes(c, Path.home() / f"neuralis-escape-{c.tag}")


@case
def escape_read_another_users_home(c: Corpus) -> tuple[str, Check]:
    if not os.access("/home", os.W_OK):
        pytest.skip("needs a writable /home to plant another user's home (CI runs as root)")
    home = c.host(Path("/home") / f"neuralis-test-{c.tag}")
    secret = c.secret_file(home / "secret")
    return f"cat {secret}; ls -la /home", never_shows(c.marker)


@case
def escape_read_data_root(c: Corpus) -> tuple[str, Check]:
    secret = c.secret_file(c.rig.root / "projects" / "default" / f"secret-{c.tag}.txt")
    return f"cat {secret}; ls -R {c.rig.root}; head -c 200 {c.rig.root}/neuralis.db", never_shows(c.marker)


@case
def escape_loopback_socket_without_egress(c: Corpus) -> tuple[str, Check]:
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    port = server.getsockname()[1]
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"

    def check(result: dict[str, Any]) -> None:
        assert_never_connected(server)
        assert result["exitCode"] != 0

    return f'{sys.executable} -c "{probe}"', check


@case
def escape_dns_without_egress(c: Corpus) -> tuple[str, Check]:
    def check(result: dict[str, Any]) -> None:
        assert result["exitCode"] != 0
        assert "gaierror" in result["stderr"]

    return f"{sys.executable} -c \"import socket; socket.getaddrinfo('example.com', 443)\"", check


@case
def escape_unix_socket_under_run(c: Corpus) -> tuple[str, Check]:
    if not os.access("/run", os.W_OK):
        pytest.skip("needs a writable /run to plant a service socket (CI runs as root)")
    path = c.host(Path("/run") / f"neuralis-test-{c.tag}.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    server.setblocking(False)

    def check(result: dict[str, Any]) -> None:
        assert_never_connected(server)

    probe = f"import socket; socket.socket(socket.AF_UNIX).connect('{path}')"
    return f'{sys.executable} -c "{probe}"', check


@case
def escape_symlink_to_host_file(c: Corpus) -> tuple[str, Check]:
    target = c.host(Path("/var/tmp") / f"neuralis-target-{c.tag}")
    target.write_text("original")
    c.host(c.rig.workspace / f"link-{c.tag}").symlink_to(target)

    def check(result: dict[str, Any]) -> None:
        assert target.read_text() == "original"

    return f"echo pwned > link-{c.tag}; echo pwned >> link-{c.tag}", check


@case
def escape_symlink_to_host_dir(c: Corpus) -> tuple[str, Check]:
    folder = c.host(Path("/var/tmp") / f"neuralis-tdir-{c.tag}")
    folder.mkdir()
    c.host(c.rig.workspace / f"dlink-{c.tag}").symlink_to(folder)
    return f"touch dlink-{c.tag}/new; ln -s / dlink-{c.tag}/root", absent(folder / "new", folder / "root")


@case
def escape_symlink_to_data_root(c: Corpus) -> tuple[str, Check]:
    secret = c.secret_file(c.rig.root / "projects" / "default" / f"secret-{c.tag}.txt")
    c.host(c.rig.workspace / f"root-{c.tag}").symlink_to(c.rig.root)
    rel = secret.relative_to(c.rig.root)
    return f"cat root-{c.tag}/{rel}; ls -R root-{c.tag}/", never_shows(c.marker)


@case
def escape_proc_root_links(c: Corpus) -> tuple[str, Check]:
    secret = c.secret_file(c.rig.root / "projects" / "default" / f"secret-{c.tag}.txt")
    roots = " ".join(f"/proc/{pid}/root{secret}" for pid in (1, os.getpid()))
    return f"cat {roots}; ls /proc/1/root{c.rig.root}", never_shows(c.marker)


@case
def escape_proc_host_environ(c: Corpus) -> tuple[str, Check]:
    holder = subprocess.Popen(["sleep", "30"], env={"NEURALIS_ESCAPE_SECRET": c.marker})

    def check(result: dict[str, Any]) -> None:
        holder.kill()
        holder.wait(timeout=5)
        never_shows(c.marker)(result)

    return f"cat /proc/{holder.pid}/environ; cat /proc/*/environ; env", check


@case
def escape_proc_host_cwd(c: Corpus) -> tuple[str, Check]:
    pid = os.getpid()

    def check(result: dict[str, Any]) -> None:
        assert result["stdout"].strip() == "hidden"

    return f"test -e /proc/{pid}/cwd && echo visible || echo hidden", check


@case
def escape_kill_host_process(c: Corpus) -> tuple[str, Check]:
    victim = subprocess.Popen(["sleep", "30"])

    def check(result: dict[str, Any]) -> None:
        try:
            assert victim.poll() is None, "the sandbox killed a host process"
        finally:
            victim.kill()
            victim.wait(timeout=5)

    return f"kill -9 {victim.pid}", check


@case
def escape_tmp_is_private(c: Corpus) -> tuple[str, Check]:
    target = c.host(Path("/tmp") / f"neuralis-escape-{c.tag}")

    def check(result: dict[str, Any]) -> None:
        assert result["stdout"].strip() == "inside", "a write to /tmp works inside the sandbox"
        assert not target.exists()

    return f"echo inside > {target} && cat {target}", check


@case
def escape_remount_read_write(c: Corpus) -> tuple[str, Check]:
    target = c.host(Path("/etc") / f"neuralis-escape-{c.tag}")
    return f"mount -o remount,rw /; mount -o remount,rw /etc; echo pwned > {target}", absent(target)


@case
def escape_nested_user_namespace(c: Corpus) -> tuple[str, Check]:
    secret = c.secret_file(c.rig.root / f"secret-{c.tag}.txt")
    return f"unshare -Urm sh -c 'umount -l {c.rig.root}; cat {secret}'", never_shows(c.marker)


@pytest.mark.parametrize("name", sorted(CASES))
def test_escape_is_contained(rig: ExecRig, name: str) -> None:
    corpus = Corpus(rig)
    try:
        rig.workspace.mkdir(parents=True, exist_ok=True)
        command, check = CASES[name](corpus)
        result = rig.shell(command)
        assert "unconfined" not in result, "the corpus must run inside the sandbox"
        assert result["exitCode"] is not None
        check(result)
    finally:
        corpus.cleanup()


def test_a_bind_over_the_data_roots_parent_keeps_the_data_root_hidden(tmp_path: Path) -> None:
    with exec_data_root(tmp_path) as root:
        rig = ExecRig.build(root, settings={"ro_binds": [str(root.parent)]})
        (root / "secret.txt").write_text("S3CRET-parent")
        result = rig.shell(f"cat {root}/secret.txt; ls {root}")
        assert "S3CRET-parent" not in result["stdout"]
        assert "secret.txt" not in result["stdout"]


@pytest.mark.parametrize("bind", ["hidden-parent", "hidden", "shared"])
def test_a_data_root_nested_in_a_hidden_path_stays_hidden_under_a_bind(tmp_path: Path, bind: str) -> None:
    """The data root lives under a hidden path (``/home/shared/neuralis`` under ``/home``) and a read-only
    bind covers it too: the hidden path's parent, the hidden path itself or ``/home/shared`` (the
    ro_binds example), each an ancestor of the working directory. The data root stays hidden; the
    working directory, and what a bind at or below the hidden path was for, still work."""
    with exec_data_root(tmp_path) as home:
        root = home / "shared" / "neuralis"
        (root / "projects" / "default").mkdir(parents=True)
        marker = f"S3CRET-{secrets.token_hex(5)}"
        (root / "projects" / "default" / "credentials.json").write_text(f'{{"API_KEY": "{marker}"}}')
        (home / "shared" / "dataset.csv").write_text("a,b\n")
        target = {"hidden-parent": home.parent, "hidden": home, "shared": home / "shared"}[bind]
        settings = {"hidden_paths": ["/home", "/root", "/run", str(home)], "ro_binds": [str(target)]}
        rig = ExecRig.build(root, settings=settings)
        result = rig.shell(
            f"cat {root}/projects/default/credentials.json; ls -R {root}; echo pwned > {root}/escape; "
            f"cat {home}/shared/dataset.csv; echo ok > inside.txt"
        )
        assert "unconfined" not in result
        assert marker not in result["stdout"] + result["stderr"]
        assert "credentials.json" not in result["stdout"]
        assert not (root / "escape").exists()
        # A bind at or inside the hidden path shows it; a bind above it covers the hidden path again.
        assert ("a,b" in result["stdout"]) is (bind != "hidden-parent")
        assert (rig.workspace / "inside.txt").read_text() == "ok\n"
