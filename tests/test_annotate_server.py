"""The labelling server: tokens and Host (403), answers checked (400 / 409, never 500), votes that survive a
SIGKILL of the server, and two annotators labelling by keyboard in Chromium at phone and desktop widths."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from editlens.annotate.server import COOKIE, AnnotateServer
from editlens.annotate.task import Task
from editlens.testing.annotate_data import make_edit_set
from editlens.testing.browser import chromium_page

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def edits(tmp_path_factory):
    # 2 sources x 5 editors = 20 pairs
    return make_edit_set(tmp_path_factory.mktemp("edits"), sources=2, editors=5, size=48)


def test_token_and_host_are_checked(edits, tmp_path):
    Task.create(tmp_path / "t", edits, "pairwise", annotators=["alice", "bob"], overlap=2, seed=0).close()
    server = AnnotateServer(tmp_path / "t").start()
    try:
        links = server.links()
        good = links["alice"]
        assert httpx.get(good).status_code == 200
        for url in (server.base, server.base + "?token=wrong", server.base + "api/state", server.base + "img/0"):
            r = httpx.get(url)
            assert r.status_code == 403 and "token" in r.json()["error"]
        # the right token under a name a web page chose (DNS rebinding): refused
        r = httpx.get(good, headers={"Host": f"evil.example:{server.port}"})
        assert r.status_code == 403 and "Host" in r.json()["error"]
        # the cookie the page set carries the token: the API answers, as this annotator
        with httpx.Client() as c:
            c.get(good)
            state = c.get(server.base + "api/state").json()
            assert state["annotator"] == "alice" and state["progress"] == {"done": 0, "total": 20}
            pos = state["item"]["position"]
            assert c.post(server.base + "api/vote", json={"position": pos, "choice": "sideways"}).status_code == 400
            assert c.post(server.base + "api/vote", content=b"not json").status_code == 400
            assert c.post(server.base + "api/vote", json={"position": True, "choice": "left"}).status_code == 400
            assert c.post(server.base + "api/vote", json={"position": pos, "choice": "left",
                                                          "reason": "x" * 70_000}).status_code == 413
            assert c.post(server.base + "api/vote", json={"position": 999, "choice": "left"}).status_code == 400
            nxt = c.post(server.base + "api/vote", json={"position": pos, "choice": "left", "reason": "sharper"})
            assert nxt.status_code == 200 and nxt.json()["progress"]["done"] == 1
            again = c.post(server.base + "api/vote", json={"position": pos, "choice": "right"})
            assert again.status_code == 409  # the first answer is kept
            assert httpx.get(server.base + "img/0", headers={"X-Editlens-Token": links["bob"].split("=")[1]}
                             ).headers["content-type"] == "image/png"
            assert c.get(server.base + "img/9999").status_code == 404
        vote = server.task.store.votes()[0]
        assert vote["annotator"] == "alice" and vote["reason"] == "sharper" and vote["answer"]["screen"] == "left"
        it = server.task.items[vote["item"]]
        assert vote["answer"]["choice"] == ("A" if vote["left"] == it["a"]["id"] else "B")
    finally:
        server.close()


def test_votes_survive_sigkill(edits, tmp_path):
    """The server process is killed (SIGKILL) right after answering votes: every confirmed vote is in
    votes.sqlite when the task is served again, and the annotator resumes where they were."""
    out = tmp_path / "t"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "editlens.cli.main", "annotate", str(edits), "--task", "pairwise", "--out", str(out),
           "--annotators", "alice"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        url = line.split()[-1]
        time.sleep(0.3)
        confirmed = []
        with httpx.Client(timeout=10) as c:
            for _ in range(30):
                try:
                    state = c.get(url.replace("/?", "/api/state?")).json()
                    break
                except httpx.HTTPError:
                    time.sleep(0.2)
            for k in range(7):
                pos = state["item"]["position"]
                r = c.post(url.replace("/?", "/api/vote?"), json={"position": pos, "choice": ["left", "right", "tie", "both_bad"][k % 4]})
                assert r.status_code == 200
                confirmed.append(pos)
                state = r.json()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    t = Task(out)
    try:
        assert sorted(v["position"] for v in t.store.votes()) == sorted(confirmed)
        assert t.current("alice")["position"] not in confirmed
        assert t.progress("alice") == {"done": 7, "total": 20}
    finally:
        t.close()


def _label_all(page, base, keys, expect):
    """Label every item of the page's annotator with the keyboard only; returns the positions answered."""
    seen = []
    page.goto(base)
    page.wait_for_selector("body[data-ready]", state="attached")
    while page.get_attribute("body", "data-done") is None:
        pos = page.get_attribute("body", "data-position")
        seen.append(int(pos))
        for k in keys(len(seen)):
            page.keyboard.press(k)
        page.keyboard.press("Enter")
        page.wait_for_selector(f"body[data-ready]:not([data-position='{pos}']), body[data-done]", state="attached")
    assert len(seen) == expect
    assert "done" in page.inner_text("#count") and page.is_visible("#done")
    return seen


@pytest.mark.parametrize("width", [390, 1400])
def test_two_annotators_label_by_keyboard(edits, tmp_path, width):
    Task.create(tmp_path / "pairs", edits, "pairwise", annotators=["alice", "bob"], overlap=2, seed=1).close()
    server = AnnotateServer(tmp_path / "pairs").start()
    try:
        links = server.links()
        pair_keys = lambda n: [["1", "2", "3", "4", "ArrowLeft", "ArrowRight"][n % 6]]  # noqa: E731
        for name in ("alice", "bob"):
            with chromium_page(width=width, height=900, allow=(server.base,)) as (page, errors):
                page.goto(links[name])
                page.wait_for_selector("body[data-ready]", state="attached")
                assert page.inner_text("#who") == name
                # a reason typed with the keyboard: R, text, Enter saves
                page.keyboard.press("2")
                page.keyboard.press("r")
                page.keyboard.type("left one smudged")
                pos = page.get_attribute("body", "data-position")
                page.keyboard.press("Enter")
                page.wait_for_selector(f"body[data-ready]:not([data-position='{pos}'])", state="attached")
                # the page fits the screen: no sideways scrolling
                assert page.evaluate("document.documentElement.scrollWidth") <= width
                _label_all(page, links[name], pair_keys, 19)
                assert errors == [], errors
        votes = server.task.store.votes()
        assert len(votes) == 40 and {v["annotator"] for v in votes} == {"alice", "bob"}
        assert all(len([v for v in votes if v["item"] == i]) == 2 for i in server.task.items)
        first = [v for v in votes if v["reason"]]
        assert len(first) == 2 and first[0]["answer"]["screen"] == "right"
    finally:
        server.close()
    # point-wise (GEdit's 0-10: keys 0-9 and t for 10), resumed after a restart of the server
    Task.create(tmp_path / "points", edits, "pointwise", annotators=["alice", "bob"], overlap=2, seed=1,
                preset="gedit").close()
    server = AnnotateServer(tmp_path / "points").start()
    links = server.links()
    point_keys = lambda n: ["t" if n % 3 == 0 else str(n % 10), str((n * 7) % 10)]  # noqa: E731
    try:
        with chromium_page(width=width, height=900, allow=(server.base,)) as (page, errors):
            page.goto(links["alice"])
            page.wait_for_selector("body[data-ready]", state="attached")
            for k in range(4):  # four answers, then the server goes away
                pos = page.get_attribute("body", "data-position")
                for key in point_keys(k + 1):
                    page.keyboard.press(key)
                page.keyboard.press("Enter")
                page.wait_for_selector(f"body[data-ready]:not([data-position='{pos}'])", state="attached")
            assert errors == [], errors
    finally:
        server.close()
    server = AnnotateServer(tmp_path / "points", port=0).start()
    links = server.links()
    try:
        assert len(server.task.store.votes("alice")) == 4
        for name, left in (("alice", 6), ("bob", 10)):  # 10 edits, each seen by both
            with chromium_page(width=width, height=900, allow=(server.base,)) as (page, errors):
                _label_all(page, links[name], point_keys, left)
                assert errors == [], errors
        votes = server.task.store.votes()
        assert len(votes) == 20
        v = next(v for v in votes if v["annotator"] == "bob")
        assert set(v["answer"]["scores"]) == {"SC", "PQ"}
        assert 10.0 in {s["answer"]["scores"]["SC"] for s in votes}  # the 't' key gave 10
    finally:
        server.close()


def test_load_script_runs_briefly(tmp_path, capsys):
    """benchmarks/annotate_load.py for a few seconds (the full minute is a benchmark): no vote the server
    confirmed is missing after a SIGKILL, no 5xx."""
    import json

    from benchmarks.annotate_load import main

    assert main(["--annotators", "20", "--duration", "3", "--items", "60", "--kill", "--out", str(tmp_path)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["votes_confirmed"] > 0 and res["lost_votes"] == 0 and res["http_5xx"] == 0
    assert res["votes_stored"] == res["votes_confirmed"] + res["stored_not_confirmed"]


def test_two_links_in_one_browser_keep_their_annotators(edits, tmp_path):
    """Alice's page stays Alice's when Bob's link is opened later in the same browser (the cookie is Bob's)."""
    Task.create(tmp_path / "t", edits, "pairwise", annotators=["alice", "bob"], overlap=2, seed=0).close()
    server = AnnotateServer(tmp_path / "t").start()
    try:
        links = server.links()
        with chromium_page(width=1000, height=800, allow=(server.base,)) as (page, errors):
            page.goto(links["alice"])
            page.wait_for_selector("body[data-ready]", state="attached")
            # Bob's link opened in another tab of this browser: his token is in the cookie now
            page.context.add_cookies([{"name": COOKIE, "value": links["bob"].split("token=")[1], "url": server.base}])
            pos = page.get_attribute("body", "data-position")
            page.keyboard.press("3")
            page.keyboard.press("Enter")
            page.wait_for_selector(f"body[data-ready]:not([data-position='{pos}'])", state="attached")
            for _ in range(50):
                if server.task.store.votes():
                    break
                time.sleep(0.1)
            assert errors == [], errors
        assert [v["annotator"] for v in server.task.store.votes()] == ["alice"]
    finally:
        server.close()


def test_a_session_is_shown_turn_by_turn(tmp_path):
    m = make_edit_set(tmp_path / "e", sources=1, editors=2, turns=3, size=32)
    Task.create(tmp_path / "t", m, "pairwise", annotators=["ann"], seed=0).close()
    server = AnnotateServer(tmp_path / "t").start()
    try:
        turns_seen = {}
        with chromium_page(width=390, height=900, allow=(server.base,)) as (page, errors):
            page.goto(server.links()["ann"])
            page.wait_for_selector("body[data-ready]", state="attached")
            while page.get_attribute("body", "data-done") is None:
                pos = page.get_attribute("body", "data-position")
                label = page.inner_text("#turnlabel")
                turns_seen[label] = (page.locator(".hist").count(), page.locator(".hist img").count(),
                                     page.locator("#imgs img").count())
                page.keyboard.press("3")
                page.keyboard.press("Enter")
                page.wait_for_selector(f"body[data-ready]:not([data-position='{pos}']), body[data-done]",
                                       state="attached")
            assert errors == [], errors
        # turn t: the t-1 earlier turns above it, both editors' outputs each; then source, left, right
        assert turns_seen == {"Turn 1 · ": (0, 0, 3), "Turn 2 · ": (1, 2, 3), "Turn 3 · ": (2, 4, 3)}
    finally:
        server.close()
