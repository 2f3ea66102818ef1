"""A tiny W3C WebDriver client (urllib only) for Debian's chromedriver driving headless Chromium: what
the page's tests need (open a URL, run a script, take a screenshot), nothing downloaded, no selenium.

    with Browser(tmp_dir) as b:
        b.get(url); b.wait_for("return document.title", "the title")

`missing()` says why a browser cannot run here (None: it can)."""
from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

DRIVER = "/usr/bin/chromedriver"
# Debian's /usr/bin/chromium is a shell wrapper; the binary beside the driver is what it runs.
CHROMIUMS = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1800",
        "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking"]


def chromium() -> str | None:
    return next((c for c in CHROMIUMS if os.access(c, os.X_OK)), None)


def driver() -> str | None:
    return DRIVER if os.access(DRIVER, os.X_OK) else shutil.which("chromedriver")


def missing() -> str | None:
    if driver() is None:
        return "chromedriver is not installed (apt-get install chromium-driver)"
    if chromium() is None:
        return "chromium is not installed (apt-get install chromium)"
    return None


class WebDriverError(Exception):
    pass


class Browser:
    """One chromedriver process (ours, stopped by pid) and one session of headless Chromium."""

    def __init__(self, work: Path, start_s: float = 60):
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = open(self.work / "chromedriver.log", "w")
        self.proc = subprocess.Popen([driver(), f"--port={self.port}"], stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        self.session = None
        try:
            deadline = time.monotonic() + start_s
            while True:
                try:
                    if self._call("GET", "/status").get("ready"):
                        break
                except (OSError, WebDriverError):
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise WebDriverError(f"chromedriver did not come up (see {self.work / 'chromedriver.log'})")
                time.sleep(0.1)
            options = {"binary": chromium(), "args": ARGS + [f"--user-data-dir={self.work / 'profile'}"]}
            got = self._call("POST", "/session", {"capabilities": {"alwaysMatch": {
                "browserName": "chrome", "goog:chromeOptions": options, "goog:loggingPrefs": {"browser": "ALL"}}}})
            self.session = got["sessionId"]
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, path: str, body: dict | None = None, timeout: float = 60):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                answer = json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                value = json.loads(e.read()).get("value", {})
            except ValueError:
                value = {}
            raise WebDriverError(f"{method} {path}: {value.get('error', e.code)}: {value.get('message', '')[:500]}") from None
        return answer.get("value")

    def _s(self, path: str) -> str:
        return f"/session/{self.session}{path}"

    def get(self, url: str) -> None:
        self._call("POST", self._s("/url"), {"url": url})

    def run(self, script: str, *args):
        """A script's return value (`return ...` in its body)."""
        return self._call("POST", self._s("/execute/sync"), {"script": script, "args": list(args)})

    def wait_for(self, script: str, what: str, timeout: float = 60, every: float = 0.2):
        """The first truthy value `script` returns; WebDriverError naming `what` after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.run(script)
            if got:
                return got
            if time.monotonic() > deadline:
                raise WebDriverError(f"waited {timeout:g} s for {what}; the page's text: "
                                     f"{str(self.run('return document.body.innerText'))[:1500]}")
            time.sleep(every)

    def screenshot(self, path: Path) -> Path:
        png = base64.b64decode(self._call("GET", self._s("/screenshot")))
        Path(path).write_bytes(png)
        return Path(path)

    def console(self) -> list[dict]:
        """The browser console's entries since the last call (chromedriver's log endpoint)."""
        try:
            return self._call("POST", self._s("/se/log"), {"type": "browser"})
        except WebDriverError:
            return []

    def close(self) -> None:
        if self.session is not None:
            try:
                self._call("DELETE", self._s(""), timeout=30)
            except (OSError, WebDriverError):
                pass
            self.session = None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
