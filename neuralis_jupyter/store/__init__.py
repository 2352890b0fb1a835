"""The store: conversations as files under the data root, everything relational behind one SQL URL.

:class:`Store` is the one object the kernel, the server extension, the CLI and ``frames`` hold. It
builds nothing at construction: the SQL engine is opened and migrated on first use of ``.engine`` (or
of a store that needs it), so creating a ``Store`` in a kernel costs no I/O.
"""

from __future__ import annotations

import threading
from functools import cached_property
from pathlib import Path

from sqlalchemy.engine import Engine, make_url

from ..config import NeuralisSettings
from .agents import AgentStore
from .audit import AuditEvent, AuditStore
from .calls import CallLogStore
from .conversations import ConversationStore
from .errors import (
    AlreadyExists,
    InvalidId,
    NotAMember,
    NotFound,
    SeatLimitReached,
    StoreCorrupt,
    StoreError,
)
from .interactions import InteractionStore
from .migrations import migrate
from .paths import DataRoot
from .projects import ProjectStore
from .sql import open_engine
from .stops import StopRequests
from .tickets import TicketStore
from .usage import UsageEvent, UsageStore

__all__ = [
    "AlreadyExists",
    "AuditEvent",
    "InvalidId",
    "NotAMember",
    "NotFound",
    "SeatLimitReached",
    "Store",
    "StoreCorrupt",
    "StoreError",
    "UsageEvent",
]


class Store:
    """Every store of one data root and one SQL URL, taken from ``settings``."""

    def __init__(self, settings: NeuralisSettings) -> None:
        self.settings = settings
        self.data_root = DataRoot(settings.data_root)
        self._engine: Engine | None = None
        self._engine_lock = threading.Lock()

    @classmethod
    def open(cls, data_root: str | Path, *, store_url: str | None = None) -> Store:
        """A store over ``data_root``; the SQL store defaults to ``neuralis.db`` inside it.

        Unlike :func:`neuralis_jupyter.config.load_settings`, this reads no config file and no
        environment variable: what you pass is what you get (notebooks, tests, scripts).
        """
        root = Path(data_root).expanduser().resolve()
        url = store_url or f"sqlite:///{root / 'neuralis.db'}"
        return cls(NeuralisSettings(data_root=str(root), store_url=url))

    @property
    def engine(self) -> Engine:
        """The SQL engine, migrated to the current schema the first time it is asked for."""
        with self._engine_lock:
            if self._engine is None:
                engine = open_engine(self.settings.store_url)
                migrate(engine)
                self._engine = engine
            return self._engine

    @cached_property
    def usage(self) -> UsageStore:
        return UsageStore(self.engine)

    @cached_property
    def audit(self) -> AuditStore:
        return AuditStore(self.engine)

    @cached_property
    def conversations(self) -> ConversationStore:
        return ConversationStore(self.data_root)

    @cached_property
    def calls(self) -> CallLogStore:
        return CallLogStore(self.engine)

    @cached_property
    def stops(self) -> StopRequests:
        return StopRequests(self.engine)

    @cached_property
    def projects(self) -> ProjectStore:
        return ProjectStore(self.data_root)

    @cached_property
    def agents(self) -> AgentStore:
        return AgentStore(self.data_root, max_agents_per_project=self.settings.max_agents_per_project)

    @cached_property
    def interactions(self) -> InteractionStore:
        return InteractionStore(self.engine)

    @cached_property
    def tickets(self) -> TicketStore:
        return TicketStore(self.engine)

    def __repr__(self) -> str:
        url = make_url(self.settings.store_url).render_as_string(hide_password=True)
        return f"Store(data_root={str(self.data_root.root)!r}, store_url={url!r})"
