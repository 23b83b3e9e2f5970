"""Many annotators voting at once through the labelling server (``editlens annotate``), on 127.0.0.1.

The server runs as its own process, as a user starts it (``python -m editlens.cli.main annotate ...``);
``--annotators`` clients (threads, one HTTP connection each) read their next item and answer it, over and
over, for ``--duration`` seconds. Then the server is stopped and ``votes.sqlite`` read back:

* lost votes: votes the server confirmed (200) that are not in the store (target 0);
* 5xx answers (target 0); other failed requests (time-outs, refused connections) are counted apart;
* votes per second and the latency of a vote (p50, p95).

    python -m benchmarks.annotate_load [--annotators 20] [--duration 60] [--items 1000] [--kill]

``--kill`` stops the server with SIGKILL instead of SIGTERM: a confirmed vote must survive it. Prints JSON;
exits 1 when a vote was lost or a 5xx was answered.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _client(url: str, name: str, until: float, out: dict, lock: threading.Lock) -> None:
    import httpx

    confirmed: list[int] = []
    lat: list[float] = []
    five = other = 0
    scores = {"overall": 3}
    state_url, vote_url = url.replace("/?", "/api/state?"), url.replace("/?", "/api/vote?")
    with httpx.Client(timeout=30) as c:
        state = None
        while time.time() < until:
            try:
                if state is None:
                    r = c.get(state_url)
                    if r.status_code >= 500:
                        five += 1
                        continue
                    state = r.json()
                item = state["item"]
                if item is None:
                    break  # this annotator's list is done
                t0 = time.perf_counter()
                r = c.post(vote_url, json={"position": item["position"], "scores": scores, "reason": "load"})
                lat.append(time.perf_counter() - t0)
                if r.status_code >= 500:
                    five += 1
                    state = None
                elif r.status_code == 200:
                    confirmed.append(item["position"])
                    state = r.json()
                else:
                    other += 1
                    state = None
            except httpx.HTTPError:
                other += 1
                state = None
    with lock:
        out[name] = {"confirmed": confirmed, "latency": lat, "5xx": five, "other_errors": other}


def run(annotators: int, duration: float, items: int, folder: Path, kill: bool) -> dict:
    import numpy as np

    from editlens.annotate.store import VoteStore
    from editlens.testing.annotate_data import make_edit_set

    sources = max(1, -(-items // 5))
    manifest = make_edit_set(folder / "edits", sources=sources, editors=5, size=16)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "editlens.cli.main", "annotate", str(manifest), "--task", "pointwise", "--preset",
           "likert", "--out", str(folder / "task"), "--annotators", str(annotators), "--overlap", str(annotators)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    links = {}
    try:
        assert proc.stdout is not None
        while len(links) < annotators:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit("the server stopped before printing its links")
            name, _, rest = line.partition(":")
            links[name] = rest.split()[-1]
        import httpx

        first = next(iter(links.values()))
        for _ in range(200):  # the links are printed just before the server listens
            try:
                httpx.get(first, timeout=2)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        out: dict = {}
        lock = threading.Lock()
        until = time.time() + duration
        t0 = time.time()
        threads = [threading.Thread(target=_client, args=(u, n, until, out, lock)) for n, u in links.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.time() - t0
    finally:
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        proc.wait(timeout=30)
    with VoteStore(folder / "task") as store:
        stored = store.votes()
    stored_keys = {(v["annotator"], v["position"]) for v in stored}
    confirmed = {(n, p) for n, r in out.items() for p in r["confirmed"]}
    lat = np.array([x for r in out.values() for x in r["latency"]]) if out else np.zeros(0)
    return {"annotators": annotators, "duration_s": round(elapsed, 2), "stopped_by": "SIGKILL" if kill else "SIGTERM",
            "votes_confirmed": len(confirmed), "votes_stored": len(stored),
            "lost_votes": len(confirmed - stored_keys), "stored_not_confirmed": len(stored_keys - confirmed),
            "http_5xx": sum(r["5xx"] for r in out.values()),
            "other_errors": sum(r["other_errors"] for r in out.values()),
            "votes_per_s": round(len(confirmed) / elapsed, 1) if elapsed else None,
            "vote_latency_ms": {"p50": round(float(np.percentile(lat, 50)) * 1000, 1) if lat.size else None,
                                "p95": round(float(np.percentile(lat, 95)) * 1000, 1) if lat.size else None}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--annotators", type=int, default=20)
    ap.add_argument("--duration", type=float, default=60.0, help="Seconds of voting.")
    ap.add_argument("--items", type=int, default=1000, help="Edits in the task (every annotator sees all of them).")
    ap.add_argument("--kill", action="store_true", help="Stop the server with SIGKILL (default SIGTERM).")
    ap.add_argument("--out", type=Path, default=None, help="Folder to keep the task in (default: a temp folder).")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        res = run(args.annotators, args.duration, args.items, args.out or Path(tmp), args.kill)
    print(json.dumps(res, indent=1))
    return 1 if res["lost_votes"] or res["http_5xx"] else 0


if __name__ == "__main__":
    sys.exit(main())
