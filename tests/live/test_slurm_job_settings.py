"""Slurm settings that change what a profiling run is, found by a review on a private test cluster
(2 December 2026, Slurm 22.05):

* OverSubscribe=EXCLUSIVE / ExclusiveUser=YES on the job's partition: there each job gets whole
  nodes; its profiling run got what it asked for (1 CPU) on a shared node, `srun -n 8` failed in
  it, and the job, ended in profiling, never ran in its partition;
* OverTimeLimit: a run whose own limit "ends it within the grace" was left to end in profiling; with
  OverTimeLimit=UNLIMITED a `-t 1` job ran on there past its limit;
* a Prolog longer than Tprof (PrologFlags=Alloc: RUNNING, reason Prolog): the run was requeued in
  its Prolog and restarted in its partition without it;
* RequeueExitHold: a job requeued and held (SPECIAL_EXIT) was recorded as finished;
* JobFileAppend=0 and a Prolog without PrologFlags=Alloc were not warned of."""

from __future__ import annotations

import pytest

from lucidd.backends.base import LiveJob
from lucidd.backends.slurm import parse_partitions
from lucidd.live.config import config_from_dict
from lucidd.live.reconcile import Reconciler
from lucidd.live.slurm_settings import over_time_limit_s, slurm_settings_warnings
from lucidd.live.store import JobRow, Store
from orchestrator.live import LucidDecider, plan_profiling

from .memslurm import Clock, MemSlurm

NOW = 1_800_000_000


def test_whole_node_partitions_are_read_from_scontrol():
    base = "PartitionName={} State=UP MaxTime=UNLIMITED PriorityTier=1 PreemptMode=OFF"
    text = "\n".join([base.format("a") + " OverSubscribe=EXCLUSIVE ExclusiveUser=NO",
                      base.format("b") + " OverSubscribe=NO ExclusiveUser=YES",
                      base.format("c") + " OverSubscribe=YES:4 ExclusiveUser=NO",
                      base.format("d") + " OverSubscribe=FORCE:4"])
    got = {n: p.whole_nodes for n, p in parse_partitions(text, {}).items()}
    assert got == {"a": "OverSubscribe=EXCLUSIVE", "b": "ExclusiveUser=YES", "c": "", "d": ""}


@pytest.fixture
def site(tmp_path):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")},
                            "profiler": {"tprof_s": 600, "skip_when_free": False, "long_tprof_s": 0}})
    clock = Clock(NOW)
    slurm = MemSlurm(clock, partitions=("inbox", "profiling", "main", "research"))
    store = Store(cfg.database.url).create()
    return cfg, clock, slurm, store, Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=clock)


def cycle(rec, clock, n=1):
    for _ in range(n):
        clock.t += 10
        assert rec.cycle().ok


def test_a_job_whose_partition_gives_whole_nodes_is_not_profiled(site):
    cfg, clock, slurm, store, rec = site
    slurm.whole_nodes = {"research": "ExclusiveUser=YES"}
    slurm.submit(1, partition="research", gpus=1)
    slurm.submit(2, partition="main,research", gpus=1)
    slurm.submit(3, partition="main", gpus=1)
    cycle(rec, clock)
    assert slurm.jobs[1].partition == "research" and slurm.jobs[2].partition == "main,research"
    assert "research (ExclusiveUser=YES) gives each job whole nodes" in store.job(1).profile_reason
    assert store.job(1).site_factor is not None
    assert slurm.jobs[3].partition == "profiling"


def _run(time_limit_s, ran, reason=""):
    return LiveJob(1, partition="profiling", state="RUNNING", gpus=1, submit_time=NOW - ran - 5,
                   start_time=NOW - ran, time_limit_s=time_limit_s, reason=reason)


def _decide(job, over_time_s=0, tprof=600):
    cfg = config_from_dict({"profiler": {"tprof_s": tprof, "long_tprof_s": 0}})
    r = JobRow(job_id=1, first_seen=NOW - 700, original_submit=NOW - 700, target_partition="main", gpus=1,
               phase="profiling", profile="admitted", profile_reason="", restarts=0)
    return plan_profiling(cfg.profiler, 10, NOW, [], [job], {1: r}, 32, away_s=0.0, over_time_s=over_time_s)


def test_over_time_limit_decides_whether_a_runs_own_limit_ends_it():
    assert [a for a, _ in _decide(_run(620, 610)).abandon] == [1]  # Slurm ends it within the grace
    assert [a for a, _ in _decide(_run(620, 610), over_time_s=300).requeue] == [1]
    plan = _decide(_run(620, 610), over_time_s=None)  # UNLIMITED: it would run on in profiling
    assert [a for a, _ in plan.requeue] == [1] and not plan.abandon
    assert over_time_limit_s("0 min") == 0 and over_time_limit_s("5 min") == 300
    assert over_time_limit_s("UNLIMITED") is None and over_time_limit_s(None) == 0


def test_a_run_in_its_prolog_is_not_requeued():
    assert not _decide(_run(None, 700, reason="Prolog")).requeue
    assert [a for a, _ in _decide(_run(None, 700)).requeue] == [1]


def _profile_of_a_run_past_tprof_with_a_620_s_limit(site, over_time: str, profiling_over_time: str = "") -> str:
    cfg, clock, slurm, store, rec = site
    slurm.config = {"PreemptType": "preempt/none", "OverTimeLimit": over_time}
    slurm.over_times = {"profiling": profiling_over_time} if profiling_over_time else {}
    slurm.submit(1, partition="main", gpus=1)
    cycle(rec, clock)
    slurm.jobs[1].time_limit_s = 620
    slurm.start(1)
    clock.t += 600
    cycle(rec, clock)
    return store.job(1).profile


def test_the_daemon_reads_over_time_limit_with_preempt_type(site):
    # not left to run on past its limit in profiling
    assert _profile_of_a_run_past_tprof_with_a_620_s_limit(site, "UNLIMITED") == "requeued"


def test_a_job_requeued_and_held_by_requeue_exit_hold_is_not_taken_for_ended(site):
    cfg, clock, slurm, store, rec = site
    slurm.submit(1, partition="main", gpus=1)
    cycle(rec, clock)
    slurm.start(1)
    cycle(rec, clock)
    j = slurm.jobs[1]  # exit 43 with RequeueExitHold=43: requeued and held, in profiling
    j.state, j.reason, j.restart_count, j.start_time = "SPECIAL_EXIT", "JobHeldUser", 1, None
    cycle(rec, clock, 2)
    row = store.job(1)
    assert not row.final_state and j.partition == "main"  # released to its partition, held there


def test_job_file_append_and_a_prolog_without_alloc_are_warned_of():
    good = {"PriorityType": "priority/multifactor", "JobFileAppend": "1", "Prolog": "(null)", "PrologFlags": "(null)"}
    assert slurm_settings_warnings(good, {}, set(), True) == []
    (w,) = slurm_settings_warnings(good | {"JobFileAppend": "0"}, {}, set(), True)
    assert w.startswith("JobFileAppend=0") and "output is lost" in w
    (w,) = slurm_settings_warnings(good | {"Prolog": "/etc/slurm/prolog.sh"}, {}, set(), True)
    assert "without PrologFlags=Alloc" in w
    assert slurm_settings_warnings(good | {"Prolog": "/p.sh", "PrologFlags": "Alloc,Contain"}, {}, set(), True) == []


def test_the_profiling_partitions_own_over_time_limit_is_the_one_that_applies(site):
    # with the cluster's 0 min alone it would be left to end there
    assert _profile_of_a_run_past_tprof_with_a_620_s_limit(site, "0 min", "UNLIMITED") == "requeued"


def test_with_no_over_time_limit_a_run_its_limit_ends_soon_is_left_to_end(site):
    assert _profile_of_a_run_past_tprof_with_a_620_s_limit(site, "0 min", "NONE") == "abandoned"


def test_a_job_sent_to_a_partition_lucidd_does_not_order_gets_no_site_factor(tmp_path):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")},
                            "slurm": {"managed_partitions": ["main"]}, "profiler": {"skip_when_free": False}})
    clock = Clock(NOW)
    slurm = MemSlurm(clock, partitions=("inbox", "profiling", "main", "research"))
    slurm.whole_nodes = {"research": "ExclusiveUser=YES", "main": "ExclusiveUser=YES"}
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=clock)
    slurm.submit(1, partition="research", gpus=1)
    slurm.submit(2, partition="main", gpus=1)
    cycle(rec, clock)
    assert slurm.jobs[1].partition == "research" and store.job(1).site_factor is None
    assert "sitefactor" not in [c[0] for c in slurm.job_calls(1)]
    assert slurm.jobs[2].partition == "main" and store.job(2).site_factor is not None


def test_priority_weights_far_above_lucidds_points_per_doubling_are_said():
    """PriorityWeightAge=100000000 drowned lucidd's order on a test cluster with nothing said (a
    review): Slurm's other factors add to SiteFactor, up to the sum of their weights."""
    base = {"PriorityType": "priority/multifactor", "PriorityWeightAge": "1000", "PriorityWeightTRES": "(null)"}
    assert slurm_settings_warnings(base, {}, set(), True, None, 1000) == []  # the test cluster's: fine
    heavy = base | {"PriorityWeightFairShare": "10000", "PriorityWeightTRES": "CPU=1000,GRES/gpu=2000"}
    (w,) = slurm_settings_warnings(heavy, {}, set(), True, None, 1000)
    assert w.startswith("PriorityWeight* add up to 14,000 points, 14 doublings") and "not lucidd" in w
    assert slurm_settings_warnings(heavy, {}, set(), True, None, 10000) == []  # a raised points_per_doubling
    assert slurm_settings_warnings(heavy, {}, set(), False, None, 1000) == []  # ordering off: not lucidd's
    assert slurm_settings_warnings(heavy, {}, set(), True) == []  # not asked
