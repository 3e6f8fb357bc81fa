"""Two lucidd on one cluster with two databases (a copy of the config on a second host): the instance
lock cannot see it. Each moved jobs out of the inbox and requeued the other's profiling runs at its
own Tprof, so a job could be requeued twice (a review, 2 December 2026). A lucidd now knows a run it
did not admit, says so, and leaves that run to whoever admitted it; no job is left in profiling."""
from __future__ import annotations

import json

from lucidd.admin_cli import status_data
from lucidd.live.config import config_from_dict
from lucidd.live.reconcile import Reconciler
from lucidd.live.store import Store
from orchestrator.live import LucidDecider
from tests.live.memslurm import Clock, MemSlurm


def _lucidd(tmp_path, name, slurm, clock, interval_s=10, **profiler):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path / name), "interval_s": interval_s},
                            "models": {"dir": str(tmp_path / name / "models")},
                            "profiler": {"tprof_s": 600, "skip_when_free": False, "lend_idle_gpus": False,
                                         "long_tprof_s": 0, **profiler}})
    store = Store(cfg.database.url).create()
    return cfg, store, Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=clock)


def _requeues(slurm, job_id):
    return [c for c in slurm.job_calls(job_id) if c[0] == "requeue"]


def test_two_lucidd_on_two_databases_requeue_each_run_once(tmp_path, caplog):
    clock = Clock()
    slurm = MemSlurm(clock, nodes=4)
    cfg_a, store_a, a = _lucidd(tmp_path, "a", slurm, clock)
    cfg_b, store_b, b = _lucidd(tmp_path, "b", slurm, clock)
    for rec in (a, b):  # both up before the jobs come
        assert rec.cycle().ok
    ids = list(range(100, 108))
    started = set()
    for step in range(400):  # 4,000 s: past Tprof, the requeues and the releases
        clock.t += 5
        if step < len(ids):
            slurm.submit(ids[step], partition="main", gpus=1)
        assert (a if step % 2 else b).cycle().ok  # each every 10 s, 5 s apart
        for jid in ids[:step + 1]:
            j = slurm.jobs[jid]
            if j.partition == "profiling" and j.pending and jid not in started:
                slurm.start(jid)
                started.add(jid)
            elif j.partition == "main" and j.pending:
                slurm.start(jid)
    for jid in ids:
        assert len(_requeues(slurm, jid)) == 1, (jid, slurm.job_calls(jid))
        assert slurm.jobs[jid].partition == "main" and slurm.jobs[jid].restart_count == 1, slurm.jobs[jid]
        mine = [s for s in (store_a, store_b) if any(x.kind == "profile" for x in s.actions_for(jid))]
        assert len(mine) == 1, jid  # one admitted it
        other = store_b if mine[0] is store_a else store_a
        assert not other.actions_for(jid) or all(x.kind not in ("profile", "requeue") for x in other.actions_for(jid))
    # each said so: in its log and for `lucidctl status`
    assert "by something other than this lucidd" in caplog.text
    found = [json.loads(s.get_meta("other_scheduler") or "null") for s in (store_a, store_b)]
    assert all(f and f["jobs_last_hour"] >= 1 for f in found), found
    assert status_data(cfg_a, store_a)["other_scheduler"] == found[0]


def test_a_run_someone_else_admitted_is_released_if_they_do_not(tmp_path):
    """The other scheduler requeued its run and stopped before releasing it: the job would wait in
    profiling (held there) for ever. Past a minute lucidd releases it as its own."""
    clock = Clock()
    slurm = MemSlurm(clock, nodes=2)
    cfg, store, rec = _lucidd(tmp_path, "a", slurm, clock)
    assert rec.cycle().ok
    clock.t += 5
    slurm.submit(7, partition="main", gpus=1)
    clock.t += 5
    slurm.jobs[7].partition = "profiling"  # the other lucidd's admission, before this one looked
    slurm.start(7)
    assert rec.cycle().ok
    r = store.job(7)
    assert (r.phase, r.profile) == ("profiling", "abandoned") and "another scheduler" in r.profile_reason, r
    for _ in range(70):  # past Tprof: this lucidd does not requeue it
        clock.t += 10
        assert rec.cycle().ok
    assert not _requeues(slurm, 7)
    slurm.slurm_requeue(7)  # the other one's requeue: pending in profiling again; then it stopped
    slurm.jobs[7].partition = "profiling"
    for _ in range(3):
        clock.t += 10
        assert rec.cycle().ok
    assert slurm.jobs[7].partition == "profiling", "released while the other scheduler may still do it"
    for _ in range(8):
        clock.t += 10
        assert rec.cycle().ok
    assert slurm.jobs[7].partition == "main" and not _requeues(slurm, 7), slurm.job_calls(7)


def test_own_admission_cut_short_is_not_taken_for_another_scheduler(tmp_path):
    """lucidd writes its admission before it sends it: killed between the two, it is its own."""
    clock = Clock()
    slurm = MemSlurm(clock, nodes=2)
    cfg, store, rec = _lucidd(tmp_path, "a", slurm, clock)
    slurm.submit(9, partition="main", gpus=1)
    slurm.fail[("move", 9)] = ("Socket timed out on send/recv operation", True, True)  # made, then an error
    clock.t += 10
    assert not rec.cycle().ok
    assert slurm.jobs[9].partition == "profiling"
    clock.t += 10
    assert rec.cycle().ok
    r = store.job(9)
    assert r.profile == "admitted" and "another scheduler" not in r.profile_reason, r
    assert store.get_meta("other_scheduler") is None


def test_own_admission_after_a_clock_step_back_is_not_taken_for_another_scheduler(tmp_path):
    """A review: the job was first seen at T; the clock stepped back a minute, and the admission, cut
    short by a transient error after Slurm made the move, was written at T - 60. Looked for only since
    first_seen, it was not found: the run was taken for another scheduler's and never requeued."""
    clock = Clock()
    slurm = MemSlurm(clock, nodes=2)
    cfg, store, rec = _lucidd(tmp_path, "a", slurm, clock, capacity_gpus=1, nprof_gpus=1)
    slurm.submit(8, partition="main", gpus=1)
    clock.t += 10
    assert rec.cycle().ok and slurm.jobs[8].partition == "profiling"
    slurm.start(8)
    slurm.submit(9, partition="main", gpus=1)
    clock.t += 10
    assert rec.cycle().ok and slurm.jobs[9].partition == "inbox"  # waits for profiling room
    slurm.end(8)
    clock.t -= 60  # NTP steps the clock back a minute
    slurm.fail[("move", 9)] = ("Socket timed out on send/recv operation", True, True)
    assert not rec.cycle().ok and slurm.jobs[9].partition == "profiling"
    clock.t += 10
    assert rec.cycle().ok
    r = store.job(9)
    assert r.profile == "admitted" and "another scheduler" not in r.profile_reason, r.profile_reason
