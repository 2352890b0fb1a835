"""Caller identity: one ``SessionContext`` shape for every boundary (seed 002).

A session is built only from verified sources (the Jupyter identity provider, project membership, a
per-agent MCP key, a session ticket), never from a header, a body field or a tool argument. The fields
that carry authority are ``priority``, ``granted_features`` and ``agent_access``; ``role`` is a label.

System work runs under a :class:`SystemSession`, a permission envelope whose reason is one of a closed
set and which only :func:`create_system_session` can build. The ``__system__`` sentinels stand in for
ids when there is no project context at all; they are process-internal and never persisted or accepted
from outside (:func:`assert_not_sentinel`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypedDict, cast

__all__ = [
    "IDENTITY_FIELDS",
    "SENTINEL_IDS",
    "SESSION_FIELD_NAMES",
    "SKILL_USER_ID",
    "SYSTEM_AGENT_ID",
    "SYSTEM_PROJECT_ID",
    "SYSTEM_REASONS",
    "SYSTEM_USER_ID",
    "AgentAccess",
    "AgentOwnership",
    "CrossPackageSession",
    "DelegateMode",
    "SentinelIdentityError",
    "SessionContext",
    "SessionDoc",
    "SessionFieldInSchemaError",
    "SpendLimits",
    "SpendRule",
    "SystemReason",
    "SystemSession",
    "assert_no_sentinel_ids",
    "assert_not_sentinel",
    "check_tool_input_schema",
    "create_system_session",
    "is_sentinel",
    "session_from_dict",
    "session_to_dict",
]

SYSTEM_USER_ID = "__system__"
SYSTEM_PROJECT_ID = "__system__"
SYSTEM_AGENT_ID = "__system__"
#: The audit principal of a skill-originated call whose real user is not resolved yet. Deliberately
#: NOT a sentinel: it is an audit label, refused on its own path (ticket minting) instead.
SKILL_USER_ID = "__skill__"
SENTINEL_IDS: frozenset[str] = frozenset({SYSTEM_USER_ID, SYSTEM_PROJECT_ID, SYSTEM_AGENT_ID})

SystemReason = Literal["sync-scheduler", "mcp-api-key", "bootstrap"]
SYSTEM_REASONS: tuple[SystemReason, ...] = ("sync-scheduler", "mcp-api-key", "bootstrap")
AgentAccess = Literal["*", "own", "view"]
DelegateMode = Literal["foreground", "background"]
SpendPeriod = Literal["day", "week", "month"]


@dataclass(frozen=True, kw_only=True)
class SpendRule:
    """A USD ceiling over a rolling calendar window (day, week or month, UTC)."""

    amount_usd: float
    period: SpendPeriod = "month"

    def __post_init__(self) -> None:
        if self.amount_usd < 0:
            raise ValueError(f"amount_usd must be >= 0, got {self.amount_usd!r}")
        if self.period not in ("day", "week", "month"):
            raise ValueError(f"period must be day, week or month, got {self.period!r}")


@dataclass(frozen=True, kw_only=True)
class SpendLimits:
    """Project spend limits: a project total plus per-role, per-user and per-agent rules."""

    project_total: SpendRule | None = None
    by_role: Mapping[str, SpendRule] = field(default_factory=dict)
    by_user: Mapping[str, SpendRule] = field(default_factory=dict)
    by_agent: Mapping[str, SpendRule] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class AgentOwnership:
    """An explicit ownership record for one agent; it wins over the agent's creator field."""

    created_by: str
    assigned_to: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SessionContext:
    """Who is calling, in which project, through which agent and stream."""

    user_id: str
    project_id: str
    agent_id: str | None = None
    conversation_id: str | None = None
    request_id: str | None = None
    #: The runtime tool_use id; present only during a model-initiated tool call.
    tool_use_id: str | None = None
    #: Set on a sub-agent child's own tool calls.
    delegate_run_id: str | None = None
    delegate_mode: DelegateMode | None = None
    #: A cosmetic label. No gate reads it.
    role: str | None = None
    #: Ordinal role priority, lower is stronger; ``None`` means a system session.
    priority: int | None = None
    #: Features granted to the caller's role; ``("*",)`` grants every feature.
    granted_features: tuple[str, ...] | None = None
    spend_limits: SpendLimits | None = None
    llm_rate_limit_rpm: int | None = None
    agent_access: AgentAccess | None = None
    agent_ownership: Mapping[str, AgentOwnership] | None = None

    def replace(self, **changes: Any) -> SessionContext:
        """A copy with ``changes`` applied, keeping the concrete session class."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        values.update(changes)
        return type(self)(**values)


@dataclass(frozen=True, kw_only=True)
class CrossPackageSession(SessionContext):
    """A session carried on an in-process call from one package to another."""

    caller_package_id: str


_SYSTEM_TOKEN = object()


@dataclass(frozen=True, kw_only=True)
class SystemSession(CrossPackageSession):
    """A permission envelope for first-party background work; build it with create_system_session."""

    system_reason: SystemReason
    is_system: Literal[True] = True
    _token: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _SYSTEM_TOKEN:
            raise TypeError("a SystemSession is built only through create_system_session()")
        if self.system_reason not in SYSTEM_REASONS:
            raise ValueError(f"system_reason must be one of {SYSTEM_REASONS}, got {self.system_reason!r}")
        if self.priority is not None:
            raise ValueError("a SystemSession has no role priority")


def create_system_session(
    reason: SystemReason,
    caller_id: str,
    scope: SessionContext | None = None,
) -> SystemSession:
    """Open a system envelope for ``reason`` on behalf of package ``caller_id``.

    With ``scope`` the envelope targets that real project and user; without it every id is the
    ``__system__`` sentinel.
    """
    if reason not in SYSTEM_REASONS:
        raise ValueError(f"reason must be one of {SYSTEM_REASONS}, got {reason!r}")
    if not caller_id:
        raise ValueError("caller_id names the first-party package opening the envelope")
    return SystemSession(
        user_id=scope.user_id if scope else SYSTEM_USER_ID,
        project_id=scope.project_id if scope else SYSTEM_PROJECT_ID,
        agent_id=scope.agent_id if scope else SYSTEM_AGENT_ID,
        conversation_id=scope.conversation_id if scope else None,
        request_id=scope.request_id if scope else None,
        granted_features=("*",),
        caller_package_id=caller_id,
        system_reason=reason,
        _token=_SYSTEM_TOKEN,
    )


#: The id fields a sentinel must never occupy in a session built from outside input.
IDENTITY_FIELDS: tuple[str, ...] = (
    "user_id",
    "project_id",
    "agent_id",
    "conversation_id",
    "request_id",
    "delegate_run_id",
)


class SentinelIdentityError(ValueError):
    """A session from outside input carries a process-internal sentinel identity."""

    def __init__(self, field_name: str, value: str) -> None:
        self.field_name = field_name
        self.value = value
        super().__init__(
            f"{field_name}={value!r} is a process-internal sentinel identity and is never accepted "
            "from outside; authenticate as a real user"
        )

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.field_name, self.value))


def is_sentinel(value: object) -> bool:
    """True when ``value`` is one of the three ``__system__`` sentinels."""
    return isinstance(value, str) and value in SENTINEL_IDS


def assert_no_sentinel_ids(**ids: object) -> None:
    """Refuse the first of ``ids`` (column name: value) that is a sentinel: the store's check before a
    row is written, since sentinels are process-internal and never persisted."""
    for name, value in ids.items():
        if is_sentinel(value):
            raise SentinelIdentityError(name, str(value))


def assert_not_sentinel(session: SessionContext) -> SessionContext:
    """Refuse a session whose any identity field is a sentinel; return it otherwise."""
    for name in IDENTITY_FIELDS:
        value = getattr(session, name)
        if is_sentinel(value):
            raise SentinelIdentityError(name, value)
    return session


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


_SESSION_FIELDS = tuple(f.name for f in fields(SessionContext))
#: Every name under which identity could be smuggled in as a tool argument: each SessionContext field
#: in snake_case and in the reference camelCase, plus the bundled ``session``.
SESSION_FIELD_NAMES: frozenset[str] = frozenset(
    [*_SESSION_FIELDS, *(_camel(n) for n in _SESSION_FIELDS), "session"]
)


class SessionFieldInSchemaError(ValueError):
    """A tool input schema declares a session field at its top level."""

    def __init__(self, tool_name: str, names: list[str]) -> None:
        self.tool_name = tool_name
        self.names = names
        super().__init__(
            f"tool {tool_name!r} declares session field(s) {', '.join(map(repr, names))} as top-level "
            "input; identity comes from the verified session, never from arguments: rename or nest them"
        )

    def __reduce__(self) -> tuple[type, tuple[str, list[str]]]:
        return (type(self), (self.tool_name, self.names))


def check_tool_input_schema(tool_name: str, schema: Mapping[str, Any]) -> None:
    """Refuse a schema with a session field as a TOP-level property; nested ones are domain fields.

    ``allOf``/``anyOf``/``oneOf`` branches at the root are part of the top level too.
    """
    found: list[str] = []

    def visit_root(node: Mapping[str, Any]) -> None:
        props = node.get("properties")
        if isinstance(props, Mapping):
            found.extend(name for name in props if name in SESSION_FIELD_NAMES)
        for combinator in ("allOf", "anyOf", "oneOf"):
            branches = node.get(combinator)
            if isinstance(branches, list):
                for branch in branches:
                    if isinstance(branch, Mapping):
                        visit_root(branch)

    visit_root(schema)
    if found:
        raise SessionFieldInSchemaError(tool_name, sorted(set(found)))


# -- persistence: a session as a JSON-safe dict ------------------------------------------------------


class SpendRuleDoc(TypedDict):
    amount_usd: float
    period: SpendPeriod


class SpendLimitsDoc(TypedDict):
    project_total: SpendRuleDoc | None
    by_role: dict[str, SpendRuleDoc]
    by_user: dict[str, SpendRuleDoc]
    by_agent: dict[str, SpendRuleDoc]


class AgentOwnershipDoc(TypedDict):
    created_by: str
    assigned_to: list[str]


_COMPOSITE_FIELDS = frozenset({"granted_features", "spend_limits", "agent_ownership", "caller_package_id"})


class SessionDoc(TypedDict, total=False):
    """A session as stored (a stream scope, a pending interaction): snake_case, JSON-safe.

    ``caller_package_id`` is present only for a :class:`CrossPackageSession`. A :class:`SystemSession`
    has no stored form: an envelope for background work is never persisted.
    """

    user_id: str
    project_id: str
    agent_id: str | None
    conversation_id: str | None
    request_id: str | None
    tool_use_id: str | None
    delegate_run_id: str | None
    delegate_mode: DelegateMode | None
    role: str | None
    priority: int | None
    granted_features: list[str] | None
    spend_limits: SpendLimitsDoc | None
    llm_rate_limit_rpm: int | None
    agent_access: AgentAccess | None
    agent_ownership: dict[str, AgentOwnershipDoc] | None
    caller_package_id: str


_DOC_KEYS = frozenset(SessionDoc.__annotations__)
#: Fields stored as they are (strings, ints, literals, None).
_PLAIN_FIELDS = tuple(k for k in SessionDoc.__annotations__ if k not in _COMPOSITE_FIELDS)
_LIMIT_AXES = ("by_role", "by_user", "by_agent")


def _rule_doc(rule: SpendRule) -> SpendRuleDoc:
    return {"amount_usd": rule.amount_usd, "period": rule.period}


def session_to_dict(session: SessionContext) -> SessionDoc:
    """``session`` as a JSON-safe dict that :func:`session_from_dict` turns back into an equal session.

    A :class:`SystemSession` is refused: system envelopes are process-internal and never persisted.
    """
    if isinstance(session, SystemSession):
        raise TypeError("a SystemSession is a process-internal envelope and is never serialised")
    doc: dict[str, Any] = {k: getattr(session, k) for k in _PLAIN_FIELDS}
    granted, limits, owners = session.granted_features, session.spend_limits, session.agent_ownership
    doc["granted_features"] = None if granted is None else list(granted)
    doc["spend_limits"] = None
    if limits is not None:
        total = limits.project_total
        doc["spend_limits"] = {"project_total": None if total is None else _rule_doc(total)} | {
            axis: {k: _rule_doc(v) for k, v in getattr(limits, axis).items()} for axis in _LIMIT_AXES
        }
    doc["agent_ownership"] = (
        None
        if owners is None
        else {k: {"created_by": v.created_by, "assigned_to": list(v.assigned_to)} for k, v in owners.items()}
    )
    if isinstance(session, CrossPackageSession):
        doc["caller_package_id"] = session.caller_package_id
    return cast(SessionDoc, doc)


def _rule(value: Mapping[str, Any]) -> SpendRule:
    return SpendRule(amount_usd=float(value["amount_usd"]), period=value["period"])


def session_from_dict(doc: Mapping[str, Any]) -> SessionContext:
    """The session :func:`session_to_dict` stored; unknown keys (a system envelope's) are refused."""
    unknown = set(doc) - _DOC_KEYS
    if unknown:
        raise ValueError(f"a stored session has unknown field(s) {sorted(unknown)}; it was not written here")
    if not isinstance(doc.get("user_id"), str) or not isinstance(doc.get("project_id"), str):
        raise ValueError("a stored session needs string user_id and project_id")
    values: dict[str, Any] = {k: doc.get(k) for k in _PLAIN_FIELDS}
    granted, limits, owners = doc.get("granted_features"), doc.get("spend_limits"), doc.get("agent_ownership")
    values["granted_features"] = None if granted is None else tuple(granted)
    if limits is not None:
        total = limits.get("project_total")
        values["spend_limits"] = SpendLimits(
            project_total=None if total is None else _rule(total),
            **{axis: {k: _rule(v) for k, v in limits[axis].items()} for axis in _LIMIT_AXES},
        )
    if owners is not None:
        values["agent_ownership"] = {
            k: AgentOwnership(created_by=v["created_by"], assigned_to=tuple(v["assigned_to"]))
            for k, v in owners.items()
        }
    if "caller_package_id" in doc:
        return CrossPackageSession(caller_package_id=doc["caller_package_id"], **values)
    return SessionContext(**values)
