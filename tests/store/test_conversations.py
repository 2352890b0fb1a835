from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from neuralis_jupyter.contracts import SentinelIdentityError
from neuralis_jupyter.store.conversations import ConversationStore
from neuralis_jupyter.store.errors import AlreadyExists, InvalidId, NotFound
from neuralis_jupyter.store.paths import DataRoot


@pytest.fixture
def store(tmp_path):
    return ConversationStore(DataRoot(tmp_path))


@pytest.fixture
def conv(store):
    return store.create(project_id="p", agent_id="a", user_id="alice")


def text_row(text, role="user"):
    return {"role": role, "content": [{"type": "text", "text": text}]}


def test_create_writes_readable_files(conv):
    assert (conv.path / "messages.jsonl").is_file()
    meta = json.loads((conv.path / "meta.json").read_text())
    assert meta["id"] == conv.id
    assert meta["user_id"] == "alice"
    assert conv.read_all() == []
    assert conv.last_seq() == 0


def test_seqs_are_consecutive_and_rows_readable(conv):
    assert conv.append(text_row("one")) == 1
    assert conv.append_many([text_row("two"), text_row("three")]) == [2, 3]
    rows = conv.read_all()
    assert [r["seq"] for r in rows] == [1, 2, 3]
    assert [r["content"][0]["text"] for r in rows] == ["one", "two", "three"]
    assert all(r["ts"].endswith("+00:00") for r in rows)
    # The file is plain JSON lines a researcher can read.
    lines = (conv.path / "messages.jsonl").read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [1, 2, 3]


def test_read_since_is_inclusive(conv):
    conv.append_many([text_row(str(i)) for i in range(10)])
    assert [r["seq"] for r in conv.read_since(7)] == [7, 8, 9, 10]
    assert [r["seq"] for r in conv.read_since(10)] == [10]
    assert conv.read_since(11) == []
    assert [r["seq"] for r in conv.read_since(0)] == list(range(1, 11))
    with pytest.raises(ValueError, match="seq"):
        conv.read_since(-1)


def test_replaced_row_keeps_its_seq_and_last_wins(conv):
    conv.append(text_row("question"))
    seq = conv.append(
        {"role": "tool", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}]}
    )
    conv.append(text_row("later"))
    merged = {
        "role": "tool",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "a"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "b"},
        ],
    }
    conv.replace(seq, merged)
    rows = conv.read_all()
    assert [r["seq"] for r in rows] == [1, 2, 3]
    assert [b["tool_use_id"] for b in rows[1]["content"]] == ["t1", "t2"]
    # sinceSeq of the merged row returns it, with the newer version.
    since = conv.read_since(2)
    assert [r["seq"] for r in since] == [2, 3]
    assert len(since[0]["content"]) == 2
    # The next new row continues after the highest seq, not after the re-append.
    assert conv.append(text_row("next")) == 4
    with pytest.raises(NotFound):
        conv.replace(99, text_row("nope"))


def test_torn_last_line_is_ignored_then_repaired(store, conv):
    conv.append_many([text_row("a"), text_row("b")])
    with open(conv.path / "messages.jsonl", "ab") as fh:
        fh.write(b'{"seq": 3, "role": "user", "content": [{"type": "te')  # crash mid-write
    reopened = store.open(project_id="p", agent_id="a", conversation_id=conv.id)
    assert [r["seq"] for r in reopened.read_all()] == [1, 2]
    assert reopened.append(text_row("c")) == 3
    rows = reopened.read_all()
    assert [(r["seq"], r["content"][0]["text"]) for r in rows] == [(1, "a"), (2, "b"), (3, "c")]
    for line in (conv.path / "messages.jsonl").read_bytes().splitlines():
        json.loads(line)
    # The fragment is kept for inspection, not silently dropped.
    assert b'"te' in (conv.path / "messages.torn").read_bytes()


def test_index_lagging_the_file_is_reconciled(conv):
    conv.append_many([text_row(str(i)) for i in range(5)])
    # A crash between the row write and the index write: the last record is missing.
    idx = conv.path / "messages.idx"
    idx.write_bytes(idx.read_bytes()[:-16])
    assert [r["seq"] for r in conv.read_since(5)] == [5]
    assert conv.append(text_row("six")) == 6
    assert [r["seq"] for r in conv.read_since(4)] == [4, 5, 6]
    assert len(idx.read_bytes()) == 6 * 16


def test_missing_index_is_rebuilt(conv):
    conv.append_many([text_row(str(i)) for i in range(4)])
    (conv.path / "messages.idx").unlink()
    assert [r["seq"] for r in conv.read_since(3)] == [3, 4]
    assert conv.append(text_row("x")) == 5


def test_tail_read_uses_the_index(conv):
    conv.append_many([text_row("x" * 50) for _ in range(2000)])
    # Count the bytes read: a tail read must not scan the file from the start.
    reads = []
    real_pread = os.pread

    def counting_pread(fd, n, off):
        data = real_pread(fd, n, off)
        reads.append(len(data))
        return data

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "pread", counting_pread)
        rows = conv.read_since(1995)
    assert [r["seq"] for r in rows] == [1995, 1996, 1997, 1998, 1999, 2000]
    size = (conv.path / "messages.jsonl").stat().st_size
    assert sum(reads) < size / 20


def test_threads_get_unique_seqs(conv):
    def worker(n):
        for i in range(50):
            conv.append(text_row(f"{n}-{i}"))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r["seq"] for r in conv.read_all()] == list(range(1, 201))


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from neuralis_jupyter.store.conversations import Conversation
    conv = Conversation(Path(sys.argv[1]), conversation_id=sys.argv[2])
    name = sys.argv[3]
    for i in range(150):
        if i % 3 == 0:
            conv.append_many([{"role": "user", "content": [{"type": "text", "text": f"{name}-{i}-{k}"}]}
                              for k in range(2)])
        else:
            conv.append({"role": "user", "content": [{"type": "text", "text": f"{name}-{i}" * 40}]})
    """
)


def test_two_processes_append_concurrently(conv):
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(conv.path), conv.id, name])
        for name in ("kernel", "server", "cli")
    ]
    for p in procs:
        assert p.wait(timeout=60) == 0
    raw = (conv.path / "messages.jsonl").read_bytes().splitlines()
    parsed = [json.loads(line) for line in raw]  # every line is valid JSON: no interleaving
    seqs = [r["seq"] for r in parsed]
    per_proc = 150 + 50  # 100 single rows + 50 batches of 2
    assert sorted(seqs) == list(range(1, 3 * per_proc + 1))
    assert seqs == sorted(seqs)  # file order is seq order
    for name in ("kernel", "server", "cli"):
        own = [r["seq"] for r in parsed if r["content"][0]["text"].startswith(name)]
        assert len(own) == per_proc
        assert own == sorted(own)


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_meta_replace_is_atomic(conv, monkeypatch, failing):
    conv.update_meta(lambda m: m.update(title="first"))
    before = (conv.path / "meta.json").read_bytes()
    staged = []

    def crash(*args):
        # The OS fails after the new document is fully written to a temp file: a crash at that
        # instant must leave the old meta.json whole.
        staged.extend(json.loads(p.read_text()) for p in conv.path.iterdir() if p.name.endswith(".tmp"))
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, failing, crash)
    with pytest.raises(OSError, match="Input/output"):
        conv.update_meta(lambda m: m.update(title="second"))
    monkeypatch.undo()
    assert [doc["title"] for doc in staged] == ["second"]  # the new document was staged in full
    assert (conv.path / "meta.json").read_bytes() == before
    assert [p.name for p in conv.path.iterdir() if p.name.endswith(".tmp")] == []
    # A value that cannot be serialised fails before anything is written.
    with pytest.raises(TypeError):
        conv.update_meta(lambda m: m.update(title=object()))
    assert conv.read_meta()["title"] == "first"


READER = textwrap.dedent(
    """
    import json, os, sys
    path, ready, done = sys.argv[1:]
    def read():
        with open(path) as fh:
            doc = json.load(fh)   # raises on a half-written file
        assert doc["id"], doc
        return doc
    read()
    open(ready, "w").close()
    while not os.path.exists(done):
        read()
    print(read()["counter"])
    """
)


def test_meta_readers_never_see_a_partial_file(conv, tmp_path):
    updates = 300
    ready, done = tmp_path / "ready", tmp_path / "done"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(conv.path / "meta.json"), str(ready), str(done)],
        stdout=subprocess.PIPE,
        text=True,
    )
    while not ready.exists():  # the reader is reading before the first replace
        assert reader.poll() is None, "the reader died before it was ready"
        time.sleep(0.005)
    for i in range(1, updates + 1):
        conv.update_meta(lambda m, i=i: m.update(title="t" * (i * 17 % 5000), counter=i))
    done.touch()
    out, _ = reader.communicate()
    assert reader.returncode == 0
    assert int(out) == updates  # its last read, after the writer finished, saw the last update


def test_fork_is_a_child_of_the_root(store, conv):
    conv.append_many([text_row(str(i)) for i in range(5)])
    fork = store.fork(conv, user_id="bob", up_to_seq=3)
    assert fork.path.parent.name == "forks"
    assert fork.path.parent.parent == conv.path
    assert [r["seq"] for r in fork.read_all()] == [1, 2, 3]
    assert fork.append(text_row("branch")) == 4
    assert conv.last_seq() == 5  # the parent is untouched
    meta = fork.read_meta()
    assert meta["root_id"] == conv.id
    assert meta["forked_from"] == {"conversation_id": conv.id, "seq": 3}
    assert meta["user_id"] == "bob"
    # A fork of a fork still lives under the root.
    nested = store.fork(fork, user_id="bob")
    assert nested.path.parent == conv.path / "forks"
    found = store.find(project_id="p", agent_id="a", conversation_id=nested.id)
    assert found.path == nested.path


def test_failed_fork_leaves_no_directory(store, conv):
    conv.append(text_row("x"))
    with pytest.raises(InvalidId):
        store.fork(conv, user_id="bob", fork_id="../escape")
    first = store.fork(conv, user_id="bob", fork_id="f1")
    with pytest.raises(AlreadyExists):
        store.fork(first, user_id="bob", fork_id="f1")
    forks = conv.path / "forks"
    assert sorted(p.name for p in forks.iterdir()) == ["f1"]


def test_fork_failing_midway_cleans_up(store, conv, monkeypatch):
    conv.append(text_row("x"))

    def disk_full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", disk_full)  # the last step of a fork fails
    with pytest.raises(OSError, match="No space"):
        store.fork(conv, user_id="bob")
    monkeypatch.undo()
    assert list((conv.path / "forks").iterdir()) == []


@pytest.mark.parametrize("bad", ["__system__", "../x", "a/b", "", ".hidden", "x" * 200])
def test_ids_are_checked(store, bad):
    with pytest.raises((InvalidId, SentinelIdentityError)):
        store.create(project_id="p", agent_id="a", user_id="alice", conversation_id=bad)
    with pytest.raises((InvalidId, SentinelIdentityError)):
        store.create(project_id=bad, agent_id="a", user_id="alice")


@pytest.mark.parametrize("field", ["project_id", "agent_id", "user_id", "conversation_id"])
def test_nothing_is_created_under_a_sentinel(store, tmp_path, field):
    kwargs = {"project_id": "p", "agent_id": "a", "user_id": "alice", field: "__system__"}
    with pytest.raises(SentinelIdentityError):
        store.create(**kwargs)
    assert not (tmp_path / "projects").exists()


def test_list_most_recent_first(store):
    a = store.create(project_id="p", agent_id="a", user_id="alice")
    b = store.create(project_id="p", agent_id="a", user_id="alice")
    a.update_meta(lambda m: m.update(title="touched"))
    assert [m["id"] for m in store.list(project_id="p", agent_id="a")] == [a.id, b.id]
    assert store.list(project_id="p", agent_id="nobody") == []


def test_append_without_waiting_refuses_a_held_lock(conv):
    conv.append(text_row("first"))
    with conv.lock():  # another writer holds the lock
        with pytest.raises(BlockingIOError):
            conv.append(text_row("inline"), wait=False)
        with pytest.raises(BlockingIOError):
            conv.replace(1, text_row("inline"), wait=False)
    assert conv.append(text_row("second"), wait=False) == 2
    assert [r["content"][0]["text"] for r in conv.read_all()] == ["first", "second"]


def test_a_writer_does_not_wait_forever_for_a_stuck_lock(conv):
    from neuralis_jupyter.store.errors import StoreError

    conv.lock_timeout = 0.2
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)",
            str(conv.path / ".lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreError, match="stayed locked"):
            conv.append(text_row("blocked"))
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert conv.append(text_row("free again")) == 1
