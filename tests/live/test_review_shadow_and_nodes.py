"""A review of the day's live changes (27 November 2026, a helper): the shadow's virtual runs
disagreed with the live daemon (a --begin job profiled, abandoned runs holding room for ever, every
old run abandoned after a restart), a powering-down node held requeues back, and a run first seen
ending lost its start. Each case failed before its fix."""
from __future__ import annotations

from lucidd.daemon import Daemon
from lucidd.live.config import config_from_dict
from lucidd.live.reconcile import Reconciler, _not_answering
from orchestrator.live import LucidDecider
from lucidd.live.store import Store
from lucidd.backends.base import LiveJob, NodeGPUs

from .memslurm import Clock, MemSlurm


def _setup(tmp_path, state: str, **prof):
    """One capacity GPU, Tprof 600 s, every eligible job profiled, no lending."""
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path / state), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")},
                            "profiler": {"tprof_s": 600, "capacity_gpus": 1, "skip_when_free": False,
                                         "lend_idle_gpus": False, **prof}})
    clock = Clock()
    return cfg, clock, MemSlurm(clock)


def _shadow(tmp_path, **prof):
    cfg, clock, slurm = _setup(tmp_path, "state", **prof)
    slurm.inbox_up = True
    shadow = Daemon(cfg, dry_run=True, backend=slurm, clock=clock)
    shadow.start()
    return cfg, clock, slurm, shadow


def _live(tmp_path, **prof):
    cfg, clock, slurm = _setup(tmp_path, "live", **prof)
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=lambda: clock.t)
    return cfg, clock, slurm, store, rec


def test_a_shadow_skips_a_begin_job_as_the_live_daemon_does(tmp_path):
    """Live: a --begin job (reason BeginTime) is never profiled. The shadow blanked the reason of a
    job it held 'in the inbox', so the skip rule never fired there."""
    # live
    cfg, clock, slurm, store, rec = _live(tmp_path)
    slurm.submit(1, partition="main", gpus=1, reason="BeginTime")
    clock.t += 10
    assert rec.cycle().ok
    assert store.job(1).profile == "skipped", store.job(1).profile
    # shadow
    cfg, clock, slurm, shadow = _shadow(tmp_path)
    slurm.jobs[1] = LiveJob(1, partition="main", gpus=1, submit_time=int(clock()), reason="BeginTime")
    clock.t += 10
    assert shadow.run_once()
    assert shadow.store.job(1).profile == "skipped", (shadow.store.job(1).phase, shadow.store.job(1).profile)


def test_a_shadows_run_left_to_its_own_limit_frees_profiling_room_there(tmp_path):
    """A virtual run left to end because its own limit (610 s) ends it inside Tprof + grace: live, it
    ends by ~610 s and frees the room. The shadow kept it 'running' in profiling until Slurm's real
    job (pending in main behind a busy queue) ended, so nothing else was profiled."""
    cfg, clock, slurm, shadow = _shadow(tmp_path)
    slurm.jobs[1] = LiveJob(1, partition="main", gpus=1, submit_time=int(clock()), time_limit_s=610,
                            reason="Priority")
    clock.t += 10
    assert shadow.run_once()
    assert shadow.store.job(1).profile == "admitted"
    clock.t += 600
    assert shadow.run_once()
    assert shadow.store.job(1).profile == "abandoned"
    slurm.jobs[2] = LiveJob(2, partition="main", gpus=1, submit_time=int(clock()), reason="Priority")
    for _ in range(60):  # ten minutes later, job 1 would long have ended (TIMEOUT) in profiling live
        clock.t += 10
        assert shadow.run_once()
    assert shadow.store.job(2).profile == "admitted", (shadow.store.job(2).phase, shadow.store.job(2).profile,
                                                       shadow.store.job(2).profile_reason)


def test_a_shadow_restart_does_not_abandon_its_old_virtual_runs(tmp_path):
    """A shadow restarted 3 min after its previous cycle: away_s is None on the first cycle, so a
    virtual run past Tprof + grace was 'abandoned (lucidd was away)' and then held room until the
    real job ended. A run that never was cannot go on: it is requeued."""
    cfg, clock, slurm, shadow = _shadow(tmp_path)
    slurm.jobs[1] = LiveJob(1, partition="main", gpus=1, submit_time=int(clock()), reason="Priority")
    clock.t += 10
    assert shadow.run_once()
    assert shadow.store.job(1).profile == "admitted"
    shadow.stop("restart")
    clock.t += 700
    shadow2 = Daemon(cfg, dry_run=True, backend=slurm, clock=clock)
    shadow2.start()
    assert shadow2.run_once()
    assert shadow2.store.job(1).profile != "abandoned", shadow2.store.job(1).profile_reason


def test_a_powering_down_node_answers_and_does_not_hold_a_requeue_back():
    """sinfo --json state_flags POWER_DOWN / POWERING_DOWN (an admin's power_down_asap on a node
    whose jobs finish first) contain 'down': the run was never requeued at Tprof."""
    n = NodeGPUs("gpu1", 8, 1, "MIXED+DRAIN+POWER_DOWN", ("profiling", "main"))
    assert not _not_answering(n)
    n = NodeGPUs("gpu1", 8, 1, "ALLOCATED+POWERING_DOWN", ("profiling", "main"))
    assert not _not_answering(n)
    assert _not_answering(NodeGPUs("gpu1", 8, 1, "MIXED+NOT_RESPONDING", ()))
    assert _not_answering(NodeGPUs("gpu1", 8, 1, "DOWN+NOT_RESPONDING", ()))
    assert _not_answering(NodeGPUs("gpu1", 8, 1, "DOWN*", ()))


def test_a_profiling_job_seen_only_completing_keeps_its_profile_start(tmp_path):
    cfg, clock, slurm, store, rec = _live(tmp_path)
    slurm.submit(1, partition="main", gpus=1)
    clock.t += 10
    assert rec.cycle().ok
    assert slurm.jobs[1].partition == "profiling"
    slurm.start(1)
    clock.t += 5
    slurm.jobs[1].state = "COMPLETING"  # a 5 s job, seen only while its epilog runs
    clock.t += 5
    assert rec.cycle().ok
    slurm.end(1)
    clock.t += 10
    assert rec.cycle().ok
    r = store.job(1)
    assert r.profile == "finished"
    assert r.profile_start is not None, r.profile_reason
