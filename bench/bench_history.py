"""lucidd's finished-job history at a large cluster's size: what a start and a cycle cost.

    .venv/bin/python bench/bench_history.py [--rows 20000,200000] [--url URL]

A cluster of thousands of GPUs finishes 100,000s of jobs in `history_days` (60): Helios' Saturn,
one of four clusters, ran ~1.7 million in six months. Per size, on SQLite (and on `--url`, e.g.
the test cluster's PostgreSQL, `scripts/testcluster.sh env` prints LUCIDD_TEST_PG_URL, used when set):
  add_history   the first sacct read after a start on an empty database (every row new)
  re-add 10 %   a later read: the last interval's jobs, many of them already stored
  history       the whole window read into the estimator's frame
  cycle         LucidDecider.background with nothing new: what every reconcile cycle pays
  estimate      one new job's duration estimate against that history (the rule of means: no
                model is fitted here; an EBM's estimate costs about the same, its features dominate)
Figures, not a test (docs/deploy.md, "Cost on the controller", quotes them).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NOW = 1_800_000_000


def rows(n, seed=1):
    rnd = random.Random(seed)
    out = []
    for k in range(n):
        dur = int(rnd.lognormvariate(6, 2)) + 1
        end = NOW - rnd.randint(0, 59 * 86400)
        out.append({"job_id": k + 1, "name": f"train-{k % 997}", "user": f"u{k % 211}", "partition": f"vc{k % 13}",
                    "gpus": rnd.choice([1, 1, 2, 4, 8, 16]), "submit_time": end - dur - rnd.randint(0, 7200),
                    "start_time": end - dur, "end_time": end, "duration": dur, "state": "COMPLETED"})
    return out


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def one(url, n):
    from sqlalchemy import delete

    from lucidd.live.config import config_from_dict
    from lucidd.live.store import HistoryRow, Store
    from lucidd.backends.base import LiveJob
    from orchestrator.live import LucidDecider, live_job

    store = Store(url).create()
    with store.session() as s:
        s.execute(delete(HistoryRow))
    data = rows(n)
    add = timed(lambda: store.add_history(data))
    readd = timed(lambda: store.add_history(data[-n // 10:]))
    cfg = config_from_dict({"daemon": {"state_dir": tempfile.mkdtemp(prefix="lucidd-bench-")},
                            "models": {"min_history_jobs": 10 ** 7}})  # no refit: the read alone
    d = LucidDecider(cfg)
    first = timed(lambda: d.background(store, NOW))
    steady = min(timed(lambda: d.background(store, NOW + 10 * k)) for k in range(1, 6))
    job = live_job(LiveJob(10 ** 8, user="u7", gpus=2, submit_time=NOW, partition="vc1", name="train-7"), None)
    est = min(timed(lambda: d.estimator.estimate([job])) for _ in range(3))
    dialect = store.url.split(":")[0].split("+")[0]
    print(f"{dialect:<11} {n:>8} {add:>12.2f} {readd:>11.2f} {first:>9.2f} {steady:>9.3f} {est:>9.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="20000,200000")
    ap.add_argument("--url", default=os.environ.get("LUCIDD_TEST_PG_URL"))
    args = ap.parse_args()
    urls = [f"sqlite:///{tempfile.mkdtemp(prefix='lucidd-bench-')}/h.db"] + ([args.url] if args.url else [])
    print(f"{'database':<11} {'rows':>8} {'add_history':>12} {'re-add 10%':>11} {'history':>9} {'cycle':>9} {'estimate':>9}  (seconds)", flush=True)
    for url in urls:
        for n in [int(x) for x in args.rows.split(",")]:
            one(url, n)


if __name__ == "__main__":
    main()
