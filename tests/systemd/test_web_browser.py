"""The page in a real headless Chromium (tests/browser.py drives Debian's chromedriver): first against
a fake view shaped like docs/watching.md's (every section drawn, text as text, live pushes), then
against a real `res serve` with a real job: `res web` prints the URL, the page shows the job among the
owners and draws the memory chart. Screenshots go to the test's tmp dir, and to RES_TEST_ARTIFACTS
when it is set. Skipped, with the reason, where chromium or chromedriver is not installed."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import urllib.request
from pathlib import Path

import pytest

import browser
from clihelp import res, wait_for  # noqa: F401
from webfake import Served, a_view, policy

pytestmark = pytest.mark.systemd

BLOCK = "until [ -e \"$0\" ]; do sleep 0.05; done"  # a job that ends when the test creates its file


@pytest.fixture
def served(tmp_path):
    """The page's server with a fake view (tests/files/test_web_server.py), no loop."""
    from reconciler.config.paths import Paths

    s = Served(Paths(tmp_path / "state"), policy())
    yield s
    s.close()


@pytest.fixture
def chromium_ok():
    why = browser.missing()
    if why:  # CI installs them (.ci/run): there, missing is a failure, not a skip
        (pytest.fail if os.environ.get("CI") else pytest.skip)(why)


def keep(shot: Path) -> Path:
    """The screenshot, also in RES_TEST_ARTIFACTS when set (CI keeps that directory)."""
    assert shot.stat().st_size > 10_000, "the screenshot is nearly empty"
    where = os.environ.get("RES_TEST_ARTIFACTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, Path(where) / shot.name)
    return shot


def severe(b: browser.Browser) -> list[dict]:
    """The console's errors, but the one a stopped loop causes (EventSource reconnecting)."""
    return [e for e in b.console() if e.get("level") == "SEVERE" and "/events" not in e.get("message", "")]


# ---------------------------------------------------------------- the page in a real browser


def test_the_page_draws_the_fake_view_in_headless_chromium(served, chromium_ok, tmp_path):
    """The page against the contract's view, without a loop: every section filled, text as text
    (a title holding markup shows as typed), the chart's areas drawn from the history."""
    with browser.Browser(tmp_path / "chromium") as b:
        b.get(served.url)
        b.wait_for("return document.querySelector('#owners tr[data-key=\"job:r-4\"]') !== null", "the job's row")
        assert b.run("return location.search") == ""  # the token left the address bar
        text = b.run("return document.body.innerText")
        assert "claude pid 4121" in text and "waits for r-4 (lock e2e)" in text and "e2e@proj-a" in text
        assert '<script>alert(1)</script>' in b.run("return document.querySelector('#queue').innerText")
        b.wait_for("return document.querySelectorAll('#memchart svg path.area').length >= 4", "the memory chart's areas")
        # an OOM kill and res's own stop, each its own mark, in its own colour
        assert b.run("return document.querySelectorAll('#memchart svg line.mark').length") == 2
        colours = b.run("return [...document.querySelectorAll('#memchart svg line.mark')].map(l => l.getAttribute('stroke'))")
        assert sorted(colours) == ["var(--evicted)", "var(--oom)"], colours
        # a job booked below its cap says both, and where the book came from; the ladder's rung is named
        owners = b.run("return document.querySelector('#owners').innerText")
        assert "6.0 GB booked · 8.0 GB cap (5 runs of dotnet test)" in owners, owners
        assert "amber" in b.run("return document.querySelector('#ladder').innerText")
        assert "stopped by res above its book" in b.run("return document.querySelector('#memlegend').innerText")
        assert b.run("return document.querySelectorAll('#timeline svg g.job').length") == 2
        assert "r-2 \"claude fix bug\"" in b.run("return document.querySelector('#spend').innerText")
        # live: a pushed view shows without a reload
        pushed = a_view("pushed")
        pushed["owners"][0] = dict(pushed["owners"][0], key="job:r-9", label='r-9 "pushed"')
        served.soon(served.watchers.push, pushed)
        b.wait_for("return document.querySelector('#owners tr[data-key=\"job:r-9\"]') !== null", "the pushed view")
        keep(b.screenshot(tmp_path / "page-fake-view.png"))
        assert not severe(b)


# ---------------------------------------------------------------- a real loop, a real job


def test_res_web_serves_the_page_of_a_real_loop_showing_a_real_job(res, chromium_ok, tmp_path):
    r = res("web")
    assert r.code == 1 and r.out == "", str(r)
    assert re.fullmatch(r"res: no reconciler loop runs for \S+; the page is served by it: start one with "
                        r"`res serve` \(or `res service install`\), then run res web again", r.one_line("err"))

    serve = res.spawn("serve")
    wait_for(lambda: (res.state / "serve.sock").exists() or serve.poll() is not None, "saw the serve socket")
    assert serve.poll() is None, serve.communicate()
    go = res.tmp / "go"
    job = res.started("sh", "-c", BLOCK, str(go))

    url = res.ok("web").one_line()
    m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]{43})", url)
    assert m, url
    assert res.ok("web").one_line() == url  # started once: the same listener, the same token
    assert (res.state / "web.port").read_text().strip() == m.group(1)
    assert oct((res.state / "web.token").stat().st_mode & 0o777) == "0o600"
    with urllib.request.urlopen(url.replace("/?", "/view?"), timeout=30) as answer:
        view = json.loads(answer.read())
    assert view["v"] == 1 and view["actions"] is False

    with browser.Browser(tmp_path / "chromium") as b:
        b.get(url)
        b.wait_for(f"return [...document.querySelectorAll('#owners tbody td.label')]"
                   f".some(td => /(^|\\W){job}(\\W|$)/.test(td.innerText))", f"{job} among the owners")
        b.wait_for("return document.querySelectorAll('#memchart svg path.area').length > 0", "the memory chart's areas")
        b.wait_for(f"return document.querySelector('#timeline svg g.job[data-id=\"{job}\"]') !== null", f"{job} in the timeline")
        assert "live" in b.run("return document.getElementById('live').innerText")
        keep(b.screenshot(tmp_path / "page-real-loop.png"))
        assert not severe(b)

        go.touch()
        w = res("wait", job, "--timeout", "1m")
        assert w.code == 0, str(w)
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(30) == 0
        b.wait_for("return document.getElementById('live').className === 'off'", "the page saying the loop went")
