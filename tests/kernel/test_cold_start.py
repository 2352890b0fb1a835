"""A Neuralis kernel starts as light as plain ipykernel: the store, SQLAlchemy and the runtime wait for
the first chat cell (``benchmarks/kernel_bench.py`` times the start; this checks what it imports)."""

from __future__ import annotations

import pytest

from .harness import KernelHarness

pytestmark = pytest.mark.slow

HEAVY = ("sqlalchemy", "neuralis_jupyter.store", "neuralis_jupyter.workbench", "neuralis_jupyter.runtime")


def test_a_fresh_kernel_has_not_imported_the_store_or_the_runtime(kernel: KernelHarness) -> None:
    # The module's kernel is fresh: this is its first cell. The magics and the chat controller (which
    # fixes the user id) were built when it started.
    out = kernel.run(
        f"%%python\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules), "
        "hasattr(get_ipython(), '_neuralis_chat'))"
    )
    assert out.text().strip() == "[] True"
