"""`res web`: the address of the page the loop serves (docs/watching.md), with its token; `--open`
hands it to the desktop's browser. The loop starts listening at the first ask (loop/web.py)."""
from __future__ import annotations

import shutil
import subprocess
import sys

from reconciler.commands.base import Fail
from reconciler.config.paths import Paths

ASK_S = 10.0  # starting the listener is a token file and a bind: well under a second


def cmd_web(a, paths: Paths) -> int:
    from reconciler.loop.client import NoDaemon, ask
    from reconciler.loop.protocol import Web

    try:
        answer = ask(paths.socket, Web(), timeout=ASK_S)
    except NoDaemon:
        raise Fail(f"res: no reconciler loop runs for {paths.root}; the page is served by it: start one with "
                   "`res serve` (or `res service install`), then run res web again") from None
    except TimeoutError:
        raise Fail(f"res: the reconciler loop did not answer in {ASK_S:g} s; try again") from None
    if answer.get("code") == 2:  # a loop from before `res web`
        raise Fail("res: the running reconciler loop is older than res web; restart it (res service install, "
                   "or stop and start res serve)") from None
    url = answer.get("url")
    if answer.get("code") != 0 or not isinstance(url, str):
        raise Fail(answer.get("line") or "res: the reconciler loop did not start the page's server")
    print(url)
    if a.open:
        opener = shutil.which("xdg-open")
        if opener is None:
            print("res: xdg-open is not installed; open the address above in a browser", file=sys.stderr)
            return 0
        subprocess.Popen([opener, url], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    return 0
