"""The errors of a background sub-agent run's inbox (:mod:`.inbox`), each with the ``code`` the server
maps to HTTP in one place::

    NeuralisRuntimeError
    ├── BackgroundLimitReached        ``max_background`` runs already work (429)
    └── InboxError
        ├── InboxDeliveryInvalid      an unknown delivery (400)
        ├── InboxDeliveryUnsupported  ``immediate`` to a background run (400)
        ├── InboxMessageInvalid       an empty or over-long message (400)
        ├── InboxToSelf               a run messaging its own inbox (400)
        ├── InboxForbidden            the caller may not write the parent conversation (403)
        ├── InboxHopsExceeded         an agent's own code sending as the user (a kernel's %inbox) (403)
        ├── InboxRunNotResumable      a run this process no longer holds (restarted, forgot it) (409)
        ├── InboxFull                 ``inbox_limit`` messages already wait (429)
        └── InboxRateLimited          ``rate_limit`` messages from the sender in the last minute (429)
"""

from __future__ import annotations

from .errors import NeuralisRuntimeError

__all__ = [
    "BackgroundLimitReached",
    "InboxDeliveryInvalid",
    "InboxDeliveryUnsupported",
    "InboxError",
    "InboxForbidden",
    "InboxFull",
    "InboxHopsExceeded",
    "InboxMessageInvalid",
    "InboxRateLimited",
    "InboxRunNotResumable",
    "InboxToSelf",
]


class InboxError(NeuralisRuntimeError):
    code = "inbox_error"

    def __init__(self, run_id: str, message: str) -> None:
        self.run_id = run_id
        super().__init__(message)

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.run_id, str(self)))


class InboxDeliveryInvalid(InboxError, ValueError):
    code = "inbox_delivery_invalid"


class InboxDeliveryUnsupported(InboxError, ValueError):
    code = "inbox_delivery_unsupported"


class InboxMessageInvalid(InboxError, ValueError):
    code = "inbox_message_invalid"


class InboxToSelf(InboxError, ValueError):
    code = "inbox_to_self"


class InboxForbidden(InboxError, PermissionError):
    code = "inbox_forbidden"


class InboxHopsExceeded(InboxError, PermissionError):
    """An agent messaging sub-agents: only users send (seed 003 bounds such chains; here there are none)."""

    code = "inbox_hops_exceeded"


class InboxRunNotResumable(InboxError):
    code = "inbox_run_not_resumable"


class InboxFull(InboxError):
    code = "inbox_full"


class InboxRateLimited(InboxError):
    code = "inbox_rate_limited"


class BackgroundLimitReached(NeuralisRuntimeError, RuntimeError):
    code = "background_limit_reached"
