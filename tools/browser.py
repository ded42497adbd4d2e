"""Open an HTML file in headless Chromium over the DevTools protocol and report what happened.

Used by the report test (and usable by hand: ``python -m tools.browser results/report.html
shot.png``). Chromium is driven directly over its DevTools WebSocket (``websockets``), no
Playwright/Puppeteer: one process we start and stop ourselves, a fresh empty profile, no network.
Besides the page's own error hook, the protocol reports every uncaught exception, console error,
log entry and network request, so a broken bundle or a CDN link cannot hide (ADR 0034).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--mute-audio",
]
REPORT_READY = "document.body && document.body.getAttribute('data-render-done') === '1'"
# A vega-embed page of its own (results/figures/*.html): ready once a chart is in the DOM.
EMBED_READY = "document.querySelector('.vega-embed svg, .vega-embed canvas') !== null"
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:", "chrome:", "devtools:")


class BrowserError(RuntimeError):
    pass


@dataclass
class PageResult:
    url: str
    render_done: bool
    charts_drawn: int
    charts_expected: int
    svg_charts: int  # chart containers holding rendered marks (<svg class=marks> or <canvas class=marks>)
    page_errors: list[str]  # what the page's own hook recorded (data-js-errors)
    exceptions: list[str] = field(default_factory=list)  # Runtime.exceptionThrown
    console_errors: list[str] = field(default_factory=list)  # console.error / console.assert
    log_errors: list[str] = field(default_factory=list)  # Log.entryAdded at level error (e.g. failed loads)
    external_requests: list[str] = field(default_factory=list)  # anything not file:/data:/about:
    chart_boxes: list[dict] = field(default_factory=list)  # page-coordinate boxes of drawn charts
    not_drawn: list[str] = field(default_factory=list)  # figures replaced by their one-line reason
    screenshot: bytes = b""
    elapsed_s: float = 0.0

    @property
    def all_errors(self) -> list[str]:
        return [*self.page_errors, *self.exceptions, *self.console_errors, *self.log_errors]


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise BrowserError(
        "no chromium on PATH: run `sudo bash scripts/install_system_deps.sh` (Debian package `chromium`)"
    )


class _Cdp:
    """A minimal DevTools client: one browser-level socket, flattened page sessions."""

    def __init__(self, ws_url: str):
        from websockets.sync.client import connect

        self._ws = connect(ws_url, max_size=None, open_timeout=30).__enter__()
        self._ids = itertools.count(1)
        self.events: list[dict] = []

    def call(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60) -> dict:
        msg_id = next(self._ids)
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self._ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"DevTools call {method} timed out after {timeout:g} s")
            reply = json.loads(self._ws.recv(timeout=left))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def close(self) -> None:
        try:
            self._ws.close()
        except Exception:  # closing a socket the browser already dropped is not an error here
            pass


class Chromium:
    """``with Chromium() as b: b.open(path)`` — a headless browser we start and always stop."""

    def __init__(self, binary: str | None = None, *, width: int = 1280, height: int = 900, start_timeout: float = 60):
        self.binary = binary or find_chromium()
        self.width, self.height, self.start_timeout = width, height, start_timeout
        self._proc: subprocess.Popen | None = None
        self._profile: str | None = None
        self._cdp: _Cdp | None = None
        self.stderr_path: str | None = None

    def __enter__(self) -> Chromium:
        self._profile = tempfile.mkdtemp(prefix="specjoule-chromium-")
        self.stderr_path = os.path.join(self._profile, "stderr.log")
        args = [
            self.binary,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={self._profile}",
            "--remote-debugging-port=0",
            f"--window-size={self.width},{self.height}",
            "about:blank",
        ]
        with open(self.stderr_path, "wb") as err:
            # Own process group: teardown reaches Chromium's helpers and nothing else.
            self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.start_timeout
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if self._proc.poll() is not None:
                raise BrowserError(f"chromium exited with {self._proc.returncode}: {self._tail()}")
            if time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise BrowserError(f"chromium did not open DevTools within {self.start_timeout:g} s: {self._tail()}")
            time.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        self._cdp = _Cdp(f"ws://127.0.0.1:{port}{path}")
        return self

    def _tail(self) -> str:
        try:
            return Path(self.stderr_path).read_text(errors="replace")[-2000:] if self.stderr_path else ""
        except OSError:
            return ""

    def __exit__(self, *exc: Any) -> None:
        if self._cdp is not None:
            try:
                self._cdp.call("Browser.close", timeout=5)
            except Exception:  # the browser may already be gone; the process is stopped below either way
                pass
            self._cdp.close()
            self._cdp = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGTERM)
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(self._proc.pid, signal.SIGKILL)
                    self._proc.wait(timeout=5)
            self._proc = None
        if self._profile:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = None

    def open(
        self,
        target: str | Path,
        *,
        timeout: float = 90,
        screenshot: bool = True,
        max_screenshot_height: int = 16000,
        ready: str = REPORT_READY,
    ) -> PageResult:
        """Load a page, wait until the JavaScript expression ``ready`` is true (the report sets
        ``<body data-render-done="1">``) or ``timeout``, then collect errors, chart counts and a
        full-page screenshot."""
        if self._cdp is None:
            raise BrowserError("use Chromium as a context manager")
        cdp = self._cdp
        url = (
            Path(target).resolve().as_uri()
            if not str(target).startswith(("file:", "http:", "https:", "data:"))
            else str(target)
        )
        t0 = time.monotonic()
        target_id = cdp.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = cdp.call("Target.attachToTarget", {"targetId": target_id, "flatten": True})["sessionId"]
        for method in ("Runtime.enable", "Page.enable", "Log.enable", "Network.enable"):
            cdp.call(method, session=session)
        cdp.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        cdp.events.clear()
        cdp.call("Page.navigate", {"url": url}, session=session)

        def evaluate(expr: str) -> Any:
            res = cdp.call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=session)
            return res.get("result", {}).get("value")

        done = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if evaluate(f"Boolean({ready})"):
                done = True
                break
            time.sleep(0.1)
        state = (
            evaluate("""(() => {
            const b = document.body;
            const boxes = Array.from(document.querySelectorAll('[data-figure], .vega-embed')).map(el => {
                const r = el.getBoundingClientRect();
                return {name: el.getAttribute('data-figure') || el.id || '', x: r.left + window.scrollX, y: r.top + window.scrollY,
                        width: r.width, height: r.height, svg: !!el.querySelector('svg.marks, canvas.marks')};
            });
            return {drawn: b.getAttribute('data-charts-drawn'), expected: b.getAttribute('data-charts-expected'),
                    errors: b.getAttribute('data-js-errors'), boxes: boxes,
                    notDrawn: Array.from(document.querySelectorAll('[data-not-drawn]')).map(e => e.getAttribute('data-not-drawn'))};
        })()""")
            or {}
        )
        shot = b""
        if screenshot:
            # Let the last paint land before capturing.
            evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            metrics = cdp.call("Page.getLayoutMetrics", session=session)
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            clip = {
                "x": 0,
                "y": 0,
                "width": max(1, int(size["width"])),
                "height": max(1, min(int(size["height"]), max_screenshot_height)),
                "scale": 1,
            }
            data = cdp.call(
                "Page.captureScreenshot",
                {"format": "png", "captureBeyondViewport": True, "clip": clip},
                session=session,
                timeout=120,
            )["data"]
            shot = base64.b64decode(data)
        events = list(cdp.events)
        cdp.call("Target.closeTarget", {"targetId": target_id})
        return PageResult(
            url=url,
            render_done=done,
            charts_drawn=int(state.get("drawn") or 0),
            charts_expected=int(state.get("expected") or 0),
            svg_charts=sum(1 for b in state.get("boxes", []) if b["svg"]),
            page_errors=json.loads(state.get("errors") or "[]"),
            exceptions=[_exception_text(e) for e in events if e.get("method") == "Runtime.exceptionThrown"],
            console_errors=[
                _console_text(e)
                for e in events
                if e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") in ("error", "assert")
            ],
            log_errors=[
                e["params"]["entry"].get("text", "") + " " + e["params"]["entry"].get("url", "")
                for e in events
                if e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") == "error"
            ],
            external_requests=[
                e["params"]["request"]["url"]
                for e in events
                if e.get("method") == "Network.requestWillBeSent"
                and not e["params"]["request"]["url"].startswith(LOCAL_SCHEMES)
            ],
            chart_boxes=[b for b in state.get("boxes", []) if b["svg"]],
            not_drawn=state.get("notDrawn", []),
            screenshot=shot,
            elapsed_s=time.monotonic() - t0,
        )


def _exception_text(event: dict) -> str:
    d = event["params"].get("exceptionDetails", {})
    return (d.get("exception", {}) or {}).get("description") or d.get("text", "exception")


def _console_text(event: dict) -> str:
    return " ".join(str(a.get("value", a.get("description", ""))) for a in event["params"].get("args", []))


def blankness(png: bytes, box: dict | None = None) -> dict:
    """How much of a screenshot (or of one box in it) is not background: the fraction of pixels
    differing from white and the number of distinct colours (a blank page has ≈ 0 and 1)."""
    import io

    import numpy as np
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    if box is not None:
        x0, y0 = max(0, int(box["x"])), max(0, int(box["y"]))
        x1, y1 = min(img.width, int(box["x"] + box["width"])), min(img.height, int(box["y"] + box["height"]))
        if x1 <= x0 or y1 <= y0:
            return {"non_white": 0.0, "colors": 0, "size": (0, 0)}
        img = img.crop((x0, y0, x1, y1))
    small = img.copy()
    small.thumbnail((400, 4000))
    px = np.asarray(small).reshape(-1, 3)
    non_white = float((px.min(axis=1) < 245).mean()) if px.size else 0.0
    colors = len(np.unique(px, axis=0)) if px.size else 0
    return {"non_white": non_white, "colors": colors, "size": img.size}


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m tools.browser REPORT.html [SCREENSHOT.png]")
    with Chromium() as browser:
        result = browser.open(sys.argv[1])
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_bytes(result.screenshot)
    print(
        json.dumps(
            {
                "render_done": result.render_done,
                "charts_drawn": result.charts_drawn,
                "charts_expected": result.charts_expected,
                "errors": result.all_errors,
                "external_requests": result.external_requests,
                "not_drawn": result.not_drawn,
                "elapsed_s": round(result.elapsed_s, 2),
            },
            indent=1,
        )
    )
    sys.exit(0 if result.render_done and not result.all_errors and result.charts_drawn == result.charts_expected else 1)
