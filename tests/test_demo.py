"""scripts/demo.sh (`make demo`) over real processes: without a terminal it stops the
cluster at once (CI); in a terminal it keeps the cluster up, with the master UI, the finished
application in the history server and the driver's log page reachable, until Enter."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request

import pytest

from tests.cluster import ROOT, _env, free_port
from tests.helpers.terminal import Terminal

pytestmark = pytest.mark.timeout(300)


def demo_env(tmp_path) -> dict[str, str]:
    """The demo on free ports, run by this interpreter with this tree's Ember."""
    ember = tmp_path / "ember"
    ember.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ember.cli "$@"\n')
    ember.chmod(0o755)
    return {"EMBER": str(ember), "PYTHON": sys.executable, "TMPDIR": str(tmp_path),
            "EMBER_DEMO_PORT": str(free_port()), "EMBER_DEMO_UI_PORT": str(free_port()),
            "EMBER_DEMO_HISTORY_PORT": str(free_port()),
            "EMBER_DEMO_REST_PORT": str(free_port()), "SPARK_WORKER_WEBUI_PORT": str(free_port())}


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200, url
        return r.read().decode()


def is_down(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5)
    except OSError:
        return True
    return False


def test_without_a_terminal_it_stops_at_once(tmp_path):
    env = demo_env(tmp_path)
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "demo.sh")], cwd=ROOT,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240,
                       env=_env(env))
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"State of driver-\S+ is FINISHED", r.stdout)
    assert '  "driverState" : "FINISHED",' in r.stdout
    assert "no terminal: the cluster stops now" in r.stdout
    assert "press Enter" not in r.stdout
    assert is_down(f"http://127.0.0.1:{env['EMBER_DEMO_UI_PORT']}/json")
    assert not [p for p in os.listdir(tmp_path) if p.startswith("ember-demo.")]


def test_in_a_terminal_it_keeps_the_cluster_up_until_enter(tmp_path):
    env = demo_env(tmp_path)
    term = Terminal(["bash", os.path.join(ROOT, "scripts", "demo.sh")], env=env)
    try:
        term.read_until(r"press Enter to stop the cluster", timeout=180)
        urls = dict(re.findall(r"^ +(master UI|finished application|history server|"
                               r"driver's log): +(\S+)", term.screen, re.M))
        assert len(urls) == 4, term.screen
        assert urls["master UI"] == f"http://127.0.0.1:{env['EMBER_DEMO_UI_PORT']}"
        app_id = re.search(r"/history/(app-[0-9-]+)/jobs/", urls["finished application"])[1]
        assert app_id in get(urls["master UI"] + "/json")
        assert "wordcount" in get(urls["finished application"])
        assert app_id in get(urls["history server"])
        assert "happy: 1" in get(urls["driver's log"])      # the wordcount's own output
        term.type("")
        term.read_until(r"stopping the cluster")
        assert term.close() == 0
        assert is_down(urls["master UI"]) and is_down(urls["history server"])
    finally:
        if term.proc.poll() is None:
            term.close(5)
