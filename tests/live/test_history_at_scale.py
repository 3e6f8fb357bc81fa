"""The finished-job history a large cluster accumulates (two months of sacct: hundreds of
thousands of rows) must not be re-read or re-merged where once is enough: before, every cycle read
the whole table (~3 s at 200,000 rows), and every start merged two months of sacct one row at a time
(0.4 ms a row) before its first cycle. bench/bench_history.py prints the figures."""

from __future__ import annotations

from lucidd.live.config import config_from_dict
from lucidd.live.reconcile import Reconciler
from lucidd.live.store import Store
from orchestrator.live import LucidDecider

from .memslurm import Clock, MemSlurm

NOW = 1_800_000_000


def row(job_id, end, duration=100, name="n"):
    return {"job_id": job_id, "name": name, "user": "u", "partition": "main", "gpus": 1, "submit_time": end - duration,
            "start_time": end - duration, "end_time": end, "duration": duration, "state": "COMPLETED"}


def test_add_history_replaces_a_job_and_keeps_the_last_of_a_batch(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db").create()
    store.add_history([row(k, NOW - k) for k in range(1, 2001)])  # more than one batch of 900
    store.add_history([row(5, NOW, 7, "first"), row(5, NOW, 9, "last"), row(3000, NOW)])
    rows = {r.job_id: r for r in store.history(0)}
    assert len(rows) == 2001
    assert (rows[5].duration, rows[5].name, rows[5].end_time) == (9, "last", NOW)
    assert rows[1999].partition == "main" and rows[1999].start_time == NOW - 1999 - 100


def test_the_fingerprint_changes_with_every_change_of_the_history(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db").create()
    assert store.history_fingerprint() == (0, 0, 0)
    store.add_history([row(1, NOW - 10), row(2, NOW)])
    seen = {store.history_fingerprint()}
    store.add_history([row(1, NOW - 10, duration=150)])  # a job's record corrected: same count, same newest
    seen.add(store.history_fingerprint())
    store.prune_history(NOW - 5)
    seen.add(store.history_fingerprint())
    assert len(seen) == 3 and store.history_fingerprint() == (1, NOW, 100)


class CountingStore:
    def __init__(self, store):
        self.store, self.reads = store, 0

    def history(self, since):
        self.reads += 1
        return self.store.history(since)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_the_decider_reads_the_history_again_only_when_it_changed_or_an_hour_slid_by(tmp_path):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)}, "models": {"min_history_jobs": 10 ** 6}})
    store = CountingStore(Store(cfg.database.url).create())
    store.add_history([row(k, NOW - k) for k in range(1, 50)])
    d = LucidDecider(cfg)
    for t in range(0, 600, 10):  # ten minutes of cycles, nothing new: one read
        d.background(store, NOW + t)
    assert store.reads == 1 and len(d.estimator._history) == 49
    store.add_history([row(100, NOW + 600)])
    d.background(store, NOW + 610)
    assert store.reads == 2 and len(d.estimator._history) == 50
    d.background(store, NOW + 4210)  # the window slid by an hour since the last read: read again
    assert store.reads == 3


def _reconciler(tmp_path, sacct, **daemon):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10, **daemon},
                            "models": {"dir": str(tmp_path / "models"), "history_days": 60}})
    clock = Clock()
    slurm = MemSlurm(clock)
    slurm.finished_jobs = sacct
    store = Store(cfg.database.url).create()

    def lucidd():
        return Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=lambda: clock.t)

    return store, lucidd, int(clock.t)


def test_a_restart_reads_sacct_from_the_newest_job_it_has_not_the_whole_window(tmp_path):
    asked = []
    store, lucidd, now = _reconciler(tmp_path, lambda since, until=None: asked.append((since, until)) or [])
    store.add_history([row(1, now - 7200), row(2, now - 600)])
    lucidd().read_history(now + 60)
    assert asked == [(now - 600 - 3600, None)]


def test_a_backlog_is_read_a_window_per_cycle_widening_while_windows_are_small(tmp_path):
    """Two months of a large cluster's sacct in one call ran past the command's 30 s timeout, and
    the backlog was never tried again."""
    asked = []
    store, lucidd, now = _reconciler(tmp_path, lambda since, until=None: asked.append((since, until)) or [])
    rec = lucidd()
    t = now
    while not asked or asked[-1][1] is not None:
        rec.read_history(t)
        t += 10
        assert len(asked) < 20
    day = 86400
    start = now - 60 * day
    assert asked[0] == (start - 3600, start + day)  # a day first, then 4x wider while windows stay small
    assert asked[1] == (start + day - 3600, start + 5 * day)
    assert asked[2] == (start + 5 * day - 3600, start + 21 * day)
    assert asked[-1][1] is None and len(asked) == 4
    rec.read_history(t)  # caught up: the usual pace again
    assert len(asked) == 4


def test_a_failed_read_is_tried_again_from_where_it_was_and_a_big_window_narrows(tmp_path):
    from lucidd.backends.base import BackendError

    asked, fail = [], [True]

    def sacct(since, until=None):
        asked.append((since, until))
        if fail[0]:
            raise BackendError("sacct: timed out after 30 s")
        return [row(k, since + 3600 + k) for k in range(1, 9001)]  # a busy window: narrower next

    store, lucidd, now = _reconciler(tmp_path, sacct)
    rec = lucidd()
    rec.read_history(now)
    rec.read_history(now + 10)  # failed: not again at every cycle
    assert len(asked) == 1
    fail[0] = False
    rec.read_history(now + 301)
    start = now + 301 - 60 * 86400  # the window's start, which slides with the clock
    assert asked[1] == (start - 3600, start + 86400 // 4)  # the same start, a narrower window
    rec.read_history(now + 311)
    assert asked[2] == (start + 86400 // 4 - 3600, start + 86400 // 4 + 86400 // 8)
    assert store.history_fingerprint()[0] > 0


def test_records_of_runs_that_never_happened_are_not_history(tmp_path):
    """A submission Slurm refused reaches slurmdbd as FAILED with its start equal to its end and no
    nodes; read as history it taught the models a 0 s job (import-sacct had the rule already)."""
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")}})
    clock = Clock()
    slurm = MemSlurm(clock)
    now = int(clock.t)

    def sacct(job_id, start, end, nodes, state="COMPLETED"):
        return {"job_id": job_id, "name": "n", "user": "u", "account": "", "partition": "main", "state": state,
                "gpus": 4, "submit_time": now - 500, "start_time": start, "end_time": end, "nodes": nodes}

    slurm.finished_jobs = lambda since, until=None: [
        sacct(1, now - 100, now - 100, "None assigned", "FAILED"),  # refused at submission
        sacct(2, None, now - 90, "None assigned", "CANCELLED"),  # cancelled while pending
        sacct(3, now - 80, now - 80, "gpu1", "FAILED"),  # failed in its first second on a node: it ran
        sacct(4, now - 300, now - 60, "gpu[1-2]")]
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=lambda: clock.t)
    assert rec.read_history(now) == 2
    assert sorted((r.job_id, r.duration) for r in store.history(0)) == [(3, 0), (4, 240)]


# A review's test (28 November 2026): the cursor is saved, not taken from the newest stored end
DAY = 86400


def _sacct_job(job_id, submit, start, end):
    return {"job_id": job_id, "name": "n", "user": "u", "account": "", "partition": "main", "state": "COMPLETED",
            "gpus": 1, "submit_time": submit, "start_time": start, "end_time": end, "nodes": "gpu1"}


def test_a_restart_mid_backlog_does_not_skip_the_jobs_between_the_window_read_and_the_newest_end(tmp_path):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models"), "history_days": 60}})
    clock = Clock()
    now = int(clock.t)
    start = now - 60 * DAY
    # one 7-day job running across the first backlog window, and 3,000 short jobs that ended after
    # that window but before the long job's end
    jobs = [_sacct_job(1, start + 12 * 3600, start + 12 * 3600, start + 7 * DAY + 12 * 3600)]
    jobs += [_sacct_job(100 + k, start + 2 * DAY + k * 100, start + 2 * DAY + k * 100, start + 2 * DAY + k * 100 + 600)
             for k in range(3000)]

    def sacct(since, until=None):  # Slurm's semantics: eligible before the window's end, ended after its start
        hi = until if until is not None else clock.t
        return [dict(j) for j in jobs if j["submit_time"] < hi and j["end_time"] >= since]

    slurm = MemSlurm(clock)
    slurm.finished_jobs = sacct
    store = Store(cfg.database.url).create()

    def lucidd():
        return Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=lambda: clock.t)

    rec = lucidd()
    rec.read_history(now)  # the first backlog window: one day
    assert rec.history_from == start + DAY
    # lucidd is restarted here (an admin edits its config after the first minutes, say)
    rec = lucidd()
    for k in range(1, 30):
        rec.read_history(now + 10 * k)
    have = {r.job_id for r in store.history(0)}
    missing = [j["job_id"] for j in jobs if j["job_id"] not in have]
    assert not missing, f"{len(missing)} finished job(s) never read into the history after the restart"


def test_a_clock_put_back_after_running_ahead_does_not_stop_the_history_reads(tmp_path):
    """A review (2 December 2026): one read with the clock 8 h ahead (a controller that booted
    before time sync), then the clock put back. The read dated ahead held every later one off until
    the clock caught up with it, and its cursor lay in the future: the 36 jobs that ended in the
    next 6 h never reached the models' history. lucidd's own restart found the cursor there too."""
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models"), "history_days": 60}})
    clock = Clock(NOW)
    slurm = MemSlurm(clock)
    ended = [(k, NOW - DAY + k * 60) for k in range(1, 100)]
    slurm.finished_jobs = lambda since, until=None: [_sacct_job(j, e - 100, e - 100, e) for j, e in ended
                                                     if e >= since and (until is None or e <= until)]
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=lambda: clock.t)
    for t in range(NOW - 600, NOW, 10):  # the backlog, then the ordinary reads
        rec.read_history(t)
    assert store.history_count() == 99
    rec.read_history(NOW + 8 * 3600)  # the clock ahead: nothing new has ended yet
    for k, t in enumerate(range(NOW + 600, NOW + 6 * 3600, 600)):  # put back; jobs end in real time
        ended.append((1000 + k, t - 30))
        rec.read_history(t)
    assert store.history_count() == 99 + len(range(NOW + 600, NOW + 6 * 3600, 600))
    # a restart finds the saved cursor in the future, and reads from the newest job stored
    store.set_meta("history_read_to", str(NOW + 8 * 3600))
    ended.append((2000, NOW + 6 * 3600 - 10))
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=lambda: clock.t)
    rec.read_history(NOW + 6 * 3600)
    assert store.history_count() == 99 + 35 + 1 and rec.history_from == NOW + 6 * 3600
