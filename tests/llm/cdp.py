"""Headless Chromium (Debian's `chromium`) driven over the Chrome DevTools protocol, for the chat page test:
start it on a free port with a throwaway profile, talk to its page target over a websocket (websocket-client),
and stop it within a bounded time. Nothing is downloaded: the browser is the system's."""
from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


class Chromium:
    def __init__(self, profile: Path, timeout: float = 30.0, size: tuple[int, int] = (1000, 900)):
        import websocket  # websocket-client
        exe = find_chromium()
        if exe is None:
            raise FileNotFoundError(f"no Chromium found (looked for {', '.join(BROWSERS)}): "
                                    "scripts/install-test-tools.sh installs Debian's chromium")
        self.timeout = timeout
        profile.mkdir(parents=True, exist_ok=True)
        port_file = profile / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)  # a reused profile's file names the port of a browser long gone
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--no-proxy-server", "--disable-extensions", "--remote-debugging-port=0", "--remote-allow-origins=*",
             f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            end = time.monotonic() + timeout
            while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
                if self.proc.poll() is not None or time.monotonic() > end:
                    raise RuntimeError(f"chromium did not start its DevTools server (exit code {self.proc.poll()})")
                time.sleep(0.05)
            port = int(port_file.read_text().split("\n")[0])
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as r:
                pages = [t for t in json.loads(r.read()) if t["type"] == "page"]
            self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=timeout,
                                                  suppress_origin=True)
        except BaseException:
            self.close()
            raise
        self._ids = itertools.count(1)
        self.call("Page.enable")
        self.call("Runtime.enable")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events that arrive meanwhile are dropped)."""
        i = next(self._ids)
        self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def evaluate(self, expression: str, await_promise: bool = False) -> Any:
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=await_promise)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression!r} raised: {r['exceptionDetails'].get('exception', r['exceptionDetails'])}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float | None = None) -> Any:
        """Poll until the expression is truthy; its value."""
        end = time.monotonic() + (timeout or self.timeout)
        while True:
            v = self.evaluate(expression)
            if v:
                return v
            if time.monotonic() > end:
                raise TimeoutError(f"{expression!r} still {v!r} after {timeout or self.timeout} s")
            time.sleep(0.05)

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href.startsWith('http')")

    def type(self, text: str) -> None:
        self.call("Input.insertText", text=text)

    def press_enter(self, shift: bool = False) -> None:
        """A real Enter key press (trusted events: the default action, a newline, happens unless prevented)."""
        key = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13,
               "modifiers": 8 if shift else 0}
        self.call("Input.dispatchKeyEvent", type="keyDown", text="\r", **key)
        self.call("Input.dispatchKeyEvent", type="keyUp", **key)

    def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(data)
        return data

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            try:
                ws.close()
            except Exception:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

