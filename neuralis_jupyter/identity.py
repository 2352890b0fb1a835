"""Who a local process acts for. Standard library only: the kernel asks at start, before anything heavy.

:func:`local_user_id` lives here, not beside the projects in :mod:`neuralis_jupyter.store.projects`
(which re-exports it), because importing the store imports SQLAlchemy: the Neuralis kernel fixes its
user when it starts and must start about as fast as plain ipykernel.
"""

from __future__ import annotations

import getpass
import os
import re

__all__ = ["local_user_id"]


def local_user_id() -> str:
    """The user a local (non-hub) process acts for: $NEURALIS_USER, $JUPYTERHUB_USER, else the OS user."""
    raw = os.environ.get("NEURALIS_USER") or os.environ.get("JUPYTERHUB_USER") or getpass.getuser()
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", raw).lstrip("._-") or "user"
    return cleaned[:128]
