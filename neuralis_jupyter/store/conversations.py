"""Conversations as files a researcher can read.

Storage design
--------------
``messages.jsonl`` is append-only, one JSON object per line, each with an integer ``seq``. A row that
changes (parallel tool results merging into one row) is appended again with the same ``seq``; readers
keep the last occurrence. New rows get ``seq = last + 1`` under an exclusive ``flock`` on ``.lock``, so
two processes (a kernel and the server) get unique, monotonic seqs and each row is written with one
``write(2)`` on an ``O_APPEND`` descriptor: bytes never interleave.

``messages.idx`` is an offset index: one 16-byte record ``(seq, offset)`` per NEW seq, in file order.
First occurrences are monotonic, so ``read_since(seq)`` binary-searches the index with ``pread`` and
reads only from that offset: a tail read does not scan the file. The index can lag the file by the rows
of one crashed append; every append reconciles it from the last indexed offset first.

A crash mid-write leaves a torn last line (no trailing newline). Readers ignore it; the next append
moves the fragment to ``messages.torn`` and truncates it away, so at most the row being written is lost.

``meta.json`` is replaced atomically (temp file, fsync, rename, fsync of the directory).

Forks are first-class conversations under the root: ``<root>/forks/<id>/``. A fork is built in a
temporary directory and renamed into place, so a failed fork leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

from .errors import AlreadyExists, NotFound, StoreCorrupt, StoreError
from .paths import DataRoot, check_id

__all__ = [
    "Conversation",
    "ConversationMeta",
    "ConversationStore",
    "Row",
    "new_conversation_id",
    "utcnow_iso",
]

MESSAGES = "messages.jsonl"
INDEX = "messages.idx"
TORN = "messages.torn"
META = "meta.json"
LOCK = ".lock"
_REC = struct.Struct("<QQ")


class Row(TypedDict, total=False):
    """One transcript row on disk. ``seq`` and ``ts`` are always present once written."""

    seq: int
    ts: str
    role: Literal["user", "assistant", "tool", "event", "system"]
    content: list[dict[str, Any]]
    request_id: str
    model: str
    step: int
    user_id: str
    agent_id: str


class ConversationMeta(TypedDict):
    """``meta.json``. Sections owned by other layers (todos, compaction) live under their own keys."""

    id: str
    project_id: str
    agent_id: str
    user_id: str
    created_at: str
    updated_at: str
    title: NotRequired[str | None]
    root_id: NotRequired[str | None]
    forked_from: NotRequired[dict[str, Any] | None]
    compaction_mode: NotRequired[Literal["apply", "show_full"]]
    #: Owned by tools/todos.py (the session ledger) and tools/compact.py (compaction instructions).
    session_ledger: NotRequired[dict[str, Any]]
    compaction: NotRequired[dict[str, Any]]


def utcnow_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def new_conversation_id() -> str:
    return "c-" + uuid.uuid4().hex[:16]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, value: object) -> None:
    """Replace ``path`` with ``value`` as JSON: temp file, fsync, rename, fsync the directory."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    data = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


class Conversation:
    """One conversation directory. Cheap to construct; every method opens what it needs."""

    #: Seconds a writer waits for another process's lock before giving up.
    lock_timeout: float = 30.0

    def __init__(self, path: Path, *, conversation_id: str, root_id: str | None = None) -> None:
        self.path = path
        self.id = conversation_id
        self.root_id = root_id

    # -- locking ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self, *, wait: bool = True) -> Iterator[None]:
        """Exclusive across processes and threads (each call opens its own file description).

        With ``wait=False`` a lock held elsewhere raises :class:`BlockingIOError` at once.
        """
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _acquire(fd, self.lock_timeout if wait else 0.0, self.path)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    # -- writing ----------------------------------------------------------------------------------

    def append(self, row: Row | dict[str, Any], *, wait: bool = True) -> int:
        """Append a new row; assign and return its ``seq``.

        ``wait=False`` never waits for another writer: it raises :class:`BlockingIOError` instead, so
        an event loop can append inline when the lock is free and hand off to a thread when it is not.
        """
        return self.append_many([row], wait=wait)[0]

    def append_many(self, rows: Iterable[Row | dict[str, Any]], *, wait: bool = True) -> list[int]:
        """Append rows in order with consecutive seqs, in one write."""
        rows = list(rows)
        if not rows:
            return []
        with self.lock(wait=wait):
            fd = os.open(self.path / MESSAGES, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            idx = os.open(self.path / INDEX, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                size = self._repair_tail(fd)
                last = self._reconcile_index(fd, idx, size)
                payload = bytearray()
                records = bytearray()
                seqs: list[int] = []
                for offset_row in rows:
                    last += 1
                    line = self._encode({**offset_row, "seq": last})
                    records += _REC.pack(last, size + len(payload))
                    payload += line
                    seqs.append(last)
                _write_all(fd, bytes(payload))
                _write_all(idx, bytes(records))
                return seqs
            finally:
                os.close(idx)
                os.close(fd)

    def replace(self, seq: int, row: Row | dict[str, Any], *, wait: bool = True) -> None:
        """Append ``row`` again under an existing ``seq``; readers keep this newest version."""
        with self.lock(wait=wait):
            fd = os.open(self.path / MESSAGES, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            idx = os.open(self.path / INDEX, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                size = self._repair_tail(fd)
                last = self._reconcile_index(fd, idx, size)
                if not 1 <= seq <= last:
                    raise NotFound("row", f"{self.id}#{seq}")
                _write_all(fd, self._encode({**row, "seq": seq}))
            finally:
                os.close(idx)
                os.close(fd)

    @staticmethod
    def _encode(row: dict[str, Any]) -> bytes:
        if "ts" not in row:
            row = {**row, "ts": utcnow_iso()}
        # One line per row whatever the content: json.dumps escapes embedded newlines.
        return json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"

    def _repair_tail(self, fd: int) -> int:
        """Move a torn last line to ``messages.torn`` and cut it off; return the clean size."""
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return size
        cut = size
        while cut > 0:
            start = max(0, cut - 65536)
            chunk = os.pread(fd, cut - start, start)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                cut = start + nl + 1
                break
            cut = start
        fragment = os.pread(fd, size - cut, cut)
        with open(self.path / TORN, "ab") as torn:
            torn.write(fragment + b"\n")
        os.ftruncate(fd, cut)
        return cut

    def _reconcile_index(self, fd: int, idx: int, size: int) -> int:
        """Bring the index up to the file; return the last seq in the file (0 when empty)."""
        isize = os.fstat(idx).st_size
        whole = isize - isize % _REC.size
        # Drop a torn record and any record pointing past the (repaired) end of the file.
        while whole >= _REC.size:
            _, off = _REC.unpack(os.pread(idx, _REC.size, whole - _REC.size))
            if off < size:
                break
            whole -= _REC.size
        if whole != isize:
            os.ftruncate(idx, whole)
        last_seq, start = 0, 0
        if whole:
            last_seq, start = _REC.unpack(os.pread(idx, _REC.size, whole - _REC.size))
        missing = bytearray()
        for offset, row in _scan(fd, start, size):
            seq = row.get("seq")
            if isinstance(seq, int) and seq > last_seq:
                missing += _REC.pack(seq, offset)
                last_seq = seq
        if missing:
            _write_all(idx, bytes(missing))
        return last_seq

    # -- reading ----------------------------------------------------------------------------------

    def last_seq(self) -> int:
        """The highest seq written (0 for an empty conversation)."""
        rows = self.read_since(self._last_indexed_seq())
        return rows[-1]["seq"] if rows else 0

    def _last_indexed_seq(self) -> int:
        try:
            with open(self.path / INDEX, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                whole = size - size % _REC.size
                if not whole:
                    return 0
                fh.seek(whole - _REC.size)
                return _REC.unpack(fh.read(_REC.size))[0]
        except FileNotFoundError:
            return 0

    def read_all(self) -> list[Row]:
        return self.read_since(0)

    def read_since(self, seq: int) -> list[Row]:
        """Rows with ``row.seq >= seq`` (inclusive), last version of each, in seq order."""
        if seq < 0:
            raise ValueError(f"seq must be >= 0, got {seq!r}")
        try:
            fd = os.open(self.path / MESSAGES, os.O_RDONLY)
        except FileNotFoundError:
            return []
        try:
            size = os.fstat(fd).st_size
            start = self._offset_for(seq, size)
            latest: dict[int, Row] = {}
            for _, row in _scan(fd, start, size):
                s = row.get("seq")
                if isinstance(s, int) and s >= seq:
                    latest[s] = row  # type: ignore[assignment]
            return [latest[s] for s in sorted(latest)]
        finally:
            os.close(fd)

    def _offset_for(self, seq: int, size: int) -> int:
        """Offset of the first row with seq >= ``seq``, or of the last indexed row if none is."""
        try:
            idx = os.open(self.path / INDEX, os.O_RDONLY)
        except FileNotFoundError:
            return 0
        try:
            n = os.fstat(idx).st_size // _REC.size
            lo, hi = 0, n
            while lo < hi:
                mid = (lo + hi) // 2
                mseq, _ = _REC.unpack(os.pread(idx, _REC.size, mid * _REC.size))
                if mseq < seq:
                    lo = mid + 1
                else:
                    hi = mid
            pick = lo if lo < n else n - 1
            if pick < 0:
                return 0
            _, off = _REC.unpack(os.pread(idx, _REC.size, pick * _REC.size))
            return off if off < size else 0
        finally:
            os.close(idx)

    # -- meta -------------------------------------------------------------------------------------

    def read_meta(self) -> ConversationMeta:
        try:
            with open(self.path / META, encoding="utf-8") as fh:
                return json.load(fh)
        except FileNotFoundError:
            raise NotFound("conversation", self.id) from None
        except json.JSONDecodeError as exc:
            raise StoreCorrupt(f"{self.path / META} is not valid JSON: {exc}") from exc

    def update_meta(self, change: Callable[[ConversationMeta], None]) -> ConversationMeta:
        """Read, change in place, and atomically replace ``meta.json`` under the lock."""
        with self.lock():
            meta = self.read_meta()
            change(meta)
            meta["updated_at"] = utcnow_iso()
            write_json_atomic(self.path / META, meta)
            return meta


def _acquire(fd: int, timeout: float, path: Path) -> None:
    """Take the exclusive lock, waiting at most ``timeout`` seconds (0: not at all)."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if timeout <= 0:
                raise
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"{path} stayed locked by another writer for {timeout:.0f} s; is a process stuck? "
                    "(a crashed one releases its lock when it exits)"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _scan(fd: int, start: int, end: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """Complete lines in ``[start, end)`` as ``(offset, row)``; a torn or unparsable line is skipped."""
    offset = start
    carry = b""
    chunk_size = 1 << 20
    pos = start
    while pos < end:
        chunk = os.pread(fd, min(chunk_size, end - pos), pos)
        if not chunk:
            break
        pos += len(chunk)
        data = carry + chunk
        lines = data.split(b"\n")
        carry = lines.pop()
        for line in lines:
            line_offset = offset
            offset += len(line) + 1
            if not line:
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                yield line_offset, row


class ConversationStore:
    """Create, open, list and fork the conversations of one data root."""

    def __init__(self, root: DataRoot) -> None:
        self.root = root

    def create(
        self,
        *,
        project_id: str,
        agent_id: str,
        user_id: str,
        conversation_id: str | None = None,
        title: str | None = None,
    ) -> Conversation:
        check_id("user", user_id)
        cid = new_conversation_id() if conversation_id is None else conversation_id
        path = self.root.conversation_dir(project_id, agent_id, cid)
        if path.exists():
            raise AlreadyExists("conversation", cid)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".tmp-{cid}-{uuid.uuid4().hex[:6]}"
        tmp.mkdir()
        try:
            now = utcnow_iso()
            meta: ConversationMeta = {
                "id": cid,
                "project_id": project_id,
                "agent_id": agent_id,
                "user_id": user_id,
                "created_at": now,
                "updated_at": now,
                "title": title,
                "root_id": None,
            }
            write_json_atomic(tmp / META, meta)
            (tmp / MESSAGES).touch()
            try:
                os.rename(tmp, path)  # refuses a non-empty existing directory
            except OSError:
                if path.exists():
                    raise AlreadyExists("conversation", cid) from None
                raise
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Conversation(path, conversation_id=cid)

    def open(
        self, *, project_id: str, agent_id: str, conversation_id: str, root_id: str | None = None
    ) -> Conversation:
        path = self.root.conversation_dir(project_id, agent_id, conversation_id, root_id=root_id)
        if not (path / META).is_file():
            raise NotFound("conversation", conversation_id)
        return Conversation(path, conversation_id=conversation_id, root_id=root_id)

    def find(self, *, project_id: str, agent_id: str, conversation_id: str) -> Conversation:
        """Open a conversation by id whether it is a root or a fork of some root."""
        check_id("conversation", conversation_id)
        base = self.root.conversations_dir(project_id, agent_id)
        direct = base / conversation_id
        if (direct / META).is_file():
            return Conversation(direct, conversation_id=conversation_id)
        for fork_meta in base.glob(f"*/forks/{conversation_id}/{META}"):
            root_id = fork_meta.parent.parent.parent.name
            return Conversation(fork_meta.parent, conversation_id=conversation_id, root_id=root_id)
        raise NotFound("conversation", conversation_id)

    def list(self, *, project_id: str, agent_id: str) -> list[ConversationMeta]:
        """Root conversations of an agent, most recently updated first."""
        base = self.root.conversations_dir(project_id, agent_id)
        metas: list[ConversationMeta] = []
        if not base.is_dir():
            return metas
        for entry in base.iterdir():
            if entry.name.startswith(".") or not (entry / META).is_file():
                continue
            with contextlib.suppress(NotFound, StoreCorrupt):
                metas.append(Conversation(entry, conversation_id=entry.name).read_meta())
        metas.sort(key=lambda m: m["updated_at"], reverse=True)
        return metas

    def fork(
        self,
        source: Conversation,
        *,
        user_id: str,
        up_to_seq: int | None = None,
        fork_id: str | None = None,
    ) -> Conversation:
        """Branch ``source`` (rows up to ``up_to_seq``, all by default) into a fork under its root."""
        check_id("user", user_id)
        meta = source.read_meta()
        root_id = source.root_id or source.id
        fid = check_id("conversation", fork_id or new_conversation_id())
        forks = self.root.conversation_dir(meta["project_id"], meta["agent_id"], root_id) / "forks"
        final = forks / fid
        if final.exists():
            raise AlreadyExists("conversation", fid)
        rows = source.read_all()
        if up_to_seq is not None:
            rows = [r for r in rows if r["seq"] <= up_to_seq]
        forks.mkdir(parents=True, exist_ok=True)
        tmp = forks / f".tmp-{fid}-{uuid.uuid4().hex[:6]}"
        tmp.mkdir()
        try:
            now = utcnow_iso()
            fork_meta: ConversationMeta = {
                "id": fid,
                "project_id": meta["project_id"],
                "agent_id": meta["agent_id"],
                "user_id": user_id,
                "created_at": now,
                "updated_at": now,
                "title": meta.get("title"),
                "root_id": root_id,
                "forked_from": {
                    "conversation_id": source.id,
                    "seq": rows[-1]["seq"] if rows else 0,
                },
            }
            write_json_atomic(tmp / META, fork_meta)
            fork = Conversation(tmp, conversation_id=fid, root_id=root_id)
            (tmp / MESSAGES).touch()
            # Keep the parent's seqs: a fork's row N is the parent's row N.
            with open(tmp / MESSAGES, "wb") as out, open(tmp / INDEX, "wb") as idx:
                offset = 0
                for row in rows:
                    line = Conversation._encode(dict(row))
                    out.write(line)
                    idx.write(_REC.pack(row["seq"], offset))
                    offset += len(line)
                # Durable before the rename publishes the fork: never a visible fork with empty files.
                for fh in (out, idx):
                    fh.flush()
                    os.fsync(fh.fileno())
            _fsync_dir(tmp)
            os.rename(tmp, final)
            _fsync_dir(forks)
            fork.path = final
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return fork
