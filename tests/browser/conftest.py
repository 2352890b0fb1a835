"""Browser tests: a JupyterLab server of their own on loopback, and Debian's chromium under Playwright.

Chromium is ``$NEURALIS_CHROMIUM``, else ``chromium`` on PATH (``.ci/run`` installs Debian's); Playwright
drives it through ``executable_path`` and never downloads a browser. Without one the tests skip, unless
``NEURALIS_BROWSER_REQUIRED=1`` (set by ``.ci/run``), where a missing browser fails them.

Artifacts (the screenshots a test keeps; on failure a screenshot, the page's console log, the server
log and the notebook's cells) go to ``$NEURALIS_TEST_ARTIFACTS``, else ``tests/browser/artifacts/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from .lab import LabPage, LabServer

_LAB_PAGE = pytest.StashKey[LabPage]()

#: What the kernels must not inherit from the environment the tests run in.
_KERNEL_ENV_DROP = (
    "NEURALIS_HEADLESS",
    "NEURALIS_CASSETTE",
    "NEURALIS_CASSETTE_MODE",
    "NEURALIS_MODEL",
    "NEURALIS_DEMO_SCRIPT",
    "NEURALIS_STORE_URL",
)


def _artifacts() -> Path:
    path = Path(os.environ.get("NEURALIS_TEST_ARTIFACTS") or Path(__file__).parent / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where a test keeps what it wants looked at after the run."""
    return _artifacts()


@pytest.fixture(scope="session")
def chromium() -> str:
    path = os.environ.get("NEURALIS_CHROMIUM") or shutil.which("chromium")
    if not path or not Path(path).is_file():
        message = "no chromium: install Debian's chromium (apt-get install chromium) or set NEURALIS_CHROMIUM"
        if os.environ.get("NEURALIS_BROWSER_REQUIRED") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def browser(chromium: str) -> Iterator[Browser]:
    args = ["--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking"]
    if os.geteuid() == 0:
        args.append("--no-sandbox")  # chromium refuses to run its sandbox as root
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=args)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def lab_server(tmp_path: Path, neuralis_home: Path) -> Iterator[LabServer]:
    """An unstarted server: put notebooks into ``.root``, adjust ``.env`` (the kernels' too), ``start()``."""
    env = {k: v for k, v in os.environ.items() if k not in _KERNEL_ENV_DROP}
    env["NEURALIS_HOME"] = str(neuralis_home)
    server = LabServer(tmp_path / "lab", env=env)
    server.root.mkdir(parents=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def lab_page(request: pytest.FixtureRequest, browser: Browser, lab_server: LabServer) -> Iterator[LabPage]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        lab = LabPage(page, lab_server)
        request.node.stash[_LAB_PAGE] = lab
        yield lab
    finally:
        context.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """When a browser test fails, keep what shows why (while its page and server still live)."""
    report: pytest.TestReport = yield
    lab = item.stash.get(_LAB_PAGE, None)
    if lab is not None and report.when == "call" and report.failed:
        saved = _save_failure(lab, item)
        report.sections.append(("browser artifacts", "\n".join(saved)))
    return report


def _save_failure(lab: LabPage, item: pytest.Item) -> list[str]:
    artifacts = _artifacts()
    stem = re.sub(r"[^\w.-]+", "_", item.name)
    saved: list[str] = []

    def keep(name: str, write: Callable[[Path], object]) -> None:
        path = artifacts / f"{stem}-{name}"
        try:
            write(path)
            saved.append(str(path))
        except Exception as exc:  # the browser may be what failed: keep going
            saved.append(f"{path}: not saved ({type(exc).__name__}: {exc})")

    keep("failure.png", lambda p: lab.page.screenshot(path=str(p), timeout=10_000))
    keep("console.log", lambda p: p.write_text("\n".join(lab.console) + "\n", encoding="utf-8"))
    keep("cells.json", lambda p: p.write_text(json.dumps(lab.cells(), indent=1), encoding="utf-8"))
    keep("server.log", lambda p: shutil.copyfile(lab.server.log_path, p))
    return saved
