"""One real Neuralis kernel per test module, with its own data root (see :mod:`.harness`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from jupyter_client.manager import start_new_kernel

from .harness import KernelHarness, kernel_env


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelHarness]:
    """One real Neuralis kernel for the module, with its own data root."""
    home = tmp_path_factory.mktemp("kernel-home")
    km, kc = start_new_kernel(kernel_name="neuralis", env=kernel_env(home), cwd=str(home))
    harness = KernelHarness(km, kc, home)
    try:
        yield harness
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
