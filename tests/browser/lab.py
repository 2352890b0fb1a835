"""JupyterLab on loopback, driven by Debian's chromium through Playwright's sync API.

:class:`LabServer` runs ``python -m jupyterlab`` as a subprocess on a free loopback port, with a random
token, its own root, config, data, runtime, settings and workspace directories, and its output in a log
file. The configuration follows JupyterLab's galata test config (``jupyterlab.galata``) minus what a
test here does not want: no empty token, no temporary directories left behind.

:class:`LabPage` wraps a Playwright page: open a notebook and wait for its kernel, run cells, find and
click a widget button, wait for the notebook to finish, read a cell's output, save the notebook, take a
screenshot. Every
wait has a timeout. Commands are started with ``() => { ...; }`` so that ``page.evaluate`` does not
wait for the promise the command returns (``notebook:run-all-cells`` resolves only when every cell has
finished, long after the button had to be clicked).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO, Any, Literal

from playwright.sync_api import ConsoleMessage, Error, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

__all__ = ["LabPage", "LabServer", "free_port"]

_STARTUP_TIMEOUT = 45.0
_SHUTDOWN_TIMEOUT = 15.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _config(*, port: int, token: str, root: Path, workspaces: Path, settings: Path) -> str:
    return "\n".join(
        [
            "# written by tests/browser/lab.py; see jupyterlab/galata/__init__.py for the original",
            "c.ServerApp.ip = '127.0.0.1'",
            f"c.ServerApp.port = {port}",
            "c.ServerApp.port_retries = 0",
            "c.ServerApp.open_browser = False",
            "c.ServerApp.allow_root = True",
            f"c.ServerApp.root_dir = {str(root)!r}",
            f"c.IdentityProvider.token = {token!r}",
            "c.LabApp.expose_app_in_browser = True",
            f"c.LabApp.workspaces_dir = {str(workspaces)!r}",
            f"c.LabApp.user_settings_dir = {str(settings)!r}",
            # no request leaves the machine: no news feed, no update check
            "c.LabApp.news_url = None",
            "c.LabApp.check_for_updates_class = 'jupyterlab.handlers.announcements.NeverCheckForUpdate'",
            "c.LabApp.extension_manager = 'readonly'",
            "",
        ]
    )


# JupyterLab user settings: no toasts asking about news or updates over the notebook.
_USER_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "checkForUpdates": False,
        "fetchNews": "false",
    },
}


class LabServer:
    """``python -m jupyterlab`` on ``127.0.0.1:<free port>``; everything it writes stays under ``workdir``.

    ``env`` is the environment of the server and therefore of its kernels. The server's stdout and
    stderr (and the kernels' stderr, which they inherit) go to :attr:`log_path`.
    """

    def __init__(self, workdir: Path, *, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.root = workdir / "root"
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "server.log"
        self.env = env
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> LabServer:
        jupyter = self.workdir / "jupyter"
        dirs = {name: jupyter / name for name in ("config", "data", "runtime", "settings", "workspaces")}
        for path in [self.root, *dirs.values()]:
            path.mkdir(parents=True, exist_ok=True)
        for name, values in _USER_SETTINGS.items():
            target = dirs["settings"] / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(values), encoding="utf-8")
        config = self.workdir / "jupyter_lab_test_config.py"
        config.write_text(
            _config(
                port=self.port,
                token=self.token,
                root=self.root,
                workspaces=dirs["workspaces"],
                settings=dirs["settings"],
            ),
            encoding="utf-8",
        )
        env = {
            **self.env,
            "JUPYTER_CONFIG_DIR": str(dirs["config"]),
            "JUPYTER_DATA_DIR": str(dirs["data"]),
            "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
            "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
            "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
        }
        # The installation's own config (sys.prefix/etc/jupyter: which server extensions are on) is read,
        # as in a user's JupyterLab; nothing from the user's home is.
        env.pop("JUPYTER_NO_CONFIG", None)
        self._log = self.log_path.open("wb")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", f"--config={config}", "--no-browser"],
            cwd=self.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its kernels too can be ended as one group if it will not stop
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _request(self, path: str, *, method: str = "GET", timeout: float = 5.0) -> int:
        req = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
            data=b"" if method == "POST" else None,
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"jupyterlab exited with {self._proc.returncode} before it was ready; see {self.log_path}"
                )
            with contextlib.suppress(OSError):
                if self._request("/api/status", timeout=2.0) == 200:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"jupyterlab did not answer /api/status within {_STARTUP_TIMEOUT:.0f}s")

    def stop(self) -> None:
        """Shut the server down (it shuts its kernels down first); end its process group if it hangs."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    self._request("/api/shutdown", method="POST")
                try:
                    proc.wait(_SHUTDOWN_TIMEOUT)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(_SHUTDOWN_TIMEOUT)
            # a kernel that outlived a server which did stop cleanly
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None

    def notebook_url(self, path: str) -> str:
        return f"{self.url}/lab/tree/{path}?token={self.token}"


# -- the page ------------------------------------------------------------------------------------------

# The notebook panel showing ``path`` (window.jupyterapp exists because expose_app_in_browser is on).
_PANEL = """(path) => Array.from(window.jupyterapp.shell.widgets('main'))
    .find((w) => w.context && w.context.path === path && w.content && w.sessionContext)"""

_KERNEL = f"""(path) => {{
    const panel = ({_PANEL})(path);
    const kernel = panel && panel.sessionContext.session && panel.sessionContext.session.kernel;
    return kernel ? {{name: kernel.name, status: kernel.status}} : null;
}}"""

# 'button' while a widget button labelled ``label`` is enabled and not clicked yet; 'done' once the
# kernel is idle and every code cell has an execution count (JupyterLab clears it when it sends a cell).
_STATE = f"""([path, label]) => {{
    const panel = ({_PANEL})(path);
    const session = panel.sessionContext.session;
    const kernel = session && session.kernel;
    const cells = panel.content.widgets.filter((c) => c.model.type === 'code');
    const done = cells.every((c) => c.model.executionCount !== null);
    const approve = Array.from(document.querySelectorAll('button.widget-button'))
        .filter((b) => b.textContent.trim() === label && !b.disabled && !b.dataset.testClicked);
    if (approve.length) return 'button';
    if (kernel && kernel.status === 'idle' && done) return 'done';
    return false;
}}"""

_CELL_OF = f"""([element, path]) => ({_PANEL})(path).content.widgets
    .findIndex((c) => c.node.contains(element))"""

_OUTPUTS = f"""(path) => ({_PANEL})(path).content.widgets.map((c) => ({{
    type: c.model.type,
    source: c.model.sharedModel.getSource(),
    execution_count: c.model.type === 'code' ? c.model.executionCount : null,
    outputs: c.model.type === 'code' ? c.model.outputs.toJSON() : [],
    text: c.node.querySelector('.jp-OutputArea') ? c.node.querySelector('.jp-OutputArea').innerText : '',
}}))"""


class LabPage:
    """A JupyterLab page with a console log; see the module docstring."""

    def __init__(self, page: Page, server: LabServer) -> None:
        self.page = page
        self.server = server
        self.console: list[str] = []
        page.on("console", self._on_console)
        page.on("pageerror", lambda exc: self.console.append(f"pageerror: {exc}"))
        self.path: str | None = None

    def _on_console(self, msg: ConsoleMessage) -> None:
        # only plain attributes here: a sync Playwright call in a handler deadlocks
        self.console.append(f"{msg.type}: {msg.text}")

    def open(self, path: str, *, kernel: str, timeout: float = 30.0) -> None:
        """Open the notebook at ``path`` (relative to the server root); wait until ``kernel`` is idle."""
        ms = timeout * 1000
        self.page.goto(self.server.notebook_url(path), timeout=ms)
        self.page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=ms)
        self.page.wait_for_function("() => typeof window.jupyterapp === 'object'", timeout=ms)
        self.page.wait_for_function(f"(path) => !!({_PANEL})(path)", arg=path, timeout=ms)
        self.path = path
        self.page.evaluate("() => { window.jupyterapp.shell.collapseLeft(); }")
        try:
            handle = self.page.wait_for_function(
                f"""([path, name]) => {{
                    const k = ({_KERNEL})(path);
                    return k && k.name === name && k.status === 'idle' ? k : null;
                }}""",
                arg=[path, kernel],
                timeout=ms,
            )
        except PlaywrightTimeoutError:
            raise TimeoutError(
                f"{path} opened, but after {timeout:.0f}s its kernel is {self.kernel()}, "
                f"not an idle {kernel!r}"
            ) from None
        handle.dispose()

    def kernel(self) -> dict[str, str] | None:
        return self.page.evaluate(_KERNEL, self.path)

    def command(self, name: str) -> None:
        """Start a JupyterLab command; do not wait for it to finish."""
        self.page.evaluate("(name) => { window.jupyterapp.commands.execute(name); }", name)

    def run_all(self) -> None:
        self.command("notebook:clear-all-cell-outputs")
        self.page.wait_for_function(
            f"""(path) => ({_PANEL})(path).content.widgets
                .every((c) => c.model.type !== 'code' || c.model.executionCount === null)""",
            arg=self.path,
            timeout=10_000,
        )
        self.command("notebook:run-all-cells")

    def run_clicking(self, button: str, *, timeout: float) -> list[int]:
        """Wait for the notebook to finish, clicking every enabled widget button labelled ``button`` on
        the way; return the indices of the cells whose button was clicked, in order."""
        deadline = time.monotonic() + timeout
        clicked: list[int] = []
        while True:
            remaining_ms = max((deadline - time.monotonic()) * 1000, 1)
            try:
                handle = self.page.wait_for_function(
                    _STATE, arg=[self.path, button], timeout=remaining_ms, polling=100
                )
            except PlaywrightTimeoutError:
                unfinished = [
                    i
                    for i, c in enumerate(self.cells())
                    if c["type"] == "code" and c["execution_count"] is None
                ]
                raise TimeoutError(
                    f"the notebook did not finish within {timeout:.0f}s: cells {unfinished} are running or "
                    f"queued, kernel {self.kernel()}; {button!r} was clicked in cells {clicked}"
                ) from None
            what: Literal["button", "done"] = handle.json_value()
            handle.dispose()
            if what == "done":
                return clicked
            button_el = (
                self.page.locator("button.widget-button:not([disabled]):not([data-test-clicked])")
                .filter(has_text=re.compile(rf"^\s*{re.escape(button)}\s*$"))
                .first.element_handle(timeout=5_000)
            )
            try:
                cell = self.page.evaluate(_CELL_OF, [button_el, self.path])
                button_el.click(timeout=5_000)
                # the card may keep the button (disabled, or replaced): never click the same one twice
                with contextlib.suppress(Error):
                    button_el.evaluate("(b) => { b.dataset.testClicked = '1'; }")
            finally:
                button_el.dispose()
            clicked.append(cell)

    def save(self, *, timeout: float = 15.0) -> None:
        """Save the notebook, as Ctrl-S does, and wait until the file holds what the page shows."""
        self.command("docmanager:save")
        self.page.wait_for_function(
            f"(path) => !({_PANEL})(path).context.model.dirty", arg=self.path, timeout=timeout * 1000
        )

    def cells(self) -> list[dict[str, Any]]:
        """Every cell: type, source, execution count, outputs (nbformat JSON) and rendered output text."""
        return self.page.evaluate(_OUTPUTS, self.path)

    def screenshot(self, path: Path, *, cell: int | None = None) -> Path:
        if cell is not None:
            self.page.evaluate(
                f"([path, i]) => {{ ({_PANEL})(path).content.widgets[i].node.scrollIntoView(); }}",
                [self.path, cell],
            )
        self.page.screenshot(path=str(path), timeout=10_000)
        return path
