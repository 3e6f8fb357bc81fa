"""Node states and pending reasons lucidd reads as "no GPU for a job here" or "not waiting for
GPUs" (a review on a private test cluster, 2 December 2026, Slurm 22.05):

* power saving (SuspendTime): sinfo gave an idle node `state_flags` POWERED_DOWN, which lucidd read
  as down: an idle cluster had no free GPU and no profiling room, and every new job waited in the
  inbox for room_wait_s (2 h by default) before Slurm woke a node for it;
* a job at its user's QOS limit (QOSMaxGRESPerUser), admitted to profiling, held profiling's room
  for room_wait_s, and, pending in main, made main look busy, so another user's job on an idle
  cluster was neither sent on at once nor lent idle GPUs;
* a run lent GPUs on nodes under a MAINT reservation waited there, ReqNodeNotAvail, for room_wait_s;
* per-job QOS limits and MaxMemPerLimit were not flagged as "may never start"."""

from __future__ import annotations

import pytest

from lucidd.backends.base import NodeGPUs, waits_for_other_than_gpus
from lucidd.live.config import config_from_dict
from lucidd.live.reconcile import MAY_NEVER_START, Reconciler, _cannot_run_there
from lucidd.live.store import Store
from orchestrator.live import LucidDecider

from .memslurm import Clock, MemSlurm


@pytest.mark.parametrize("state,usable,asleep", [
    ("IDLE", True, False), ("MIXED", True, False), ("ALLOCATED", True, False),
    ("IDLE+POWERED_DOWN", True, True), ("IDLE+POWERING_UP", True, True), ("IDLE+POWER_DOWN", True, True),
    ("IDLE+POWERING_DOWN", True, True), ("idle~", True, True), ("MIXED+COMPLETING", True, False),
    ("DOWN", False, False), ("DOWN+POWERED_DOWN", False, True), ("IDLE+DRAIN", False, False),
    ("IDLE+DRAIN+POWERED_DOWN", False, True), ("MIXED+DRAINING", False, False), ("DOWN+NOT_RESPONDING", False, False),
    ("IDLE+NOT_RESPONDING", False, False), ("IDLE+FAIL", False, False), ("FUTURE", False, False),
    ("UNKNOWN", False, False), ("IDLE+RESERVED", False, False), ("IDLE+MAINTENANCE+RESERVED", False, False),
    ("down*", False, False), ("drained", False, False),
])
def test_which_nodes_can_take_a_job(state, usable, asleep):
    n = NodeGPUs("gpu1", 8, 0, state)
    assert (n.usable, n.asleep) == (usable, asleep)


def test_which_pending_reasons_are_not_a_wait_for_gpus():
    for reason in ("QOSMaxGRESPerUser", "QOSGrpGRES", "AssocGrpGRES", "AssocMaxJobsLimit", "Reservation",
                   "ReqNodeNotAvail, May be reserved for other job", "Licenses", "JobArrayTaskLimit",
                   "MaxMemPerLimit", "PartitionConfig", "QOSMaxGRESPerJob"):
        assert waits_for_other_than_gpus(reason), reason
    for reason in ("", "None", "Resources", "Priority", "BeginTime", "Dependency", None):
        assert not waits_for_other_than_gpus(reason), reason
    assert _cannot_run_there("QOSMaxGRESPerJob") and _cannot_run_there("AssocMaxCpuPerJobLimit")
    assert _cannot_run_there("MaxMemPerLimit") and _cannot_run_there("PartitionTimeLimit")
    assert not _cannot_run_there("QOSMaxGRESPerUser") and not _cannot_run_there("QOSGrpGRES")


@pytest.fixture
def site(tmp_path):
    def build(**profiler):
        cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                                "models": {"dir": str(tmp_path / "models")},
                                "profiler": {"tprof_s": 600, **profiler}})
        clock = Clock()
        slurm = MemSlurm(clock, nodes=4)
        store = Store(cfg.database.url).create()
        rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=clock)
        return clock, slurm, store, rec

    return build


def cycle(rec, clock, n=1):
    for _ in range(n):
        clock.t += 10
        assert rec.cycle().ok


def one_job_with_nodes(site, states: dict, **profiler):
    """A 1-GPU job for main submitted, one cycle run, with the nodes in these states."""
    clock, slurm, store, rec = site(**profiler)
    for name, state in states.items():
        slurm.nodes[name].state = state
    slurm.submit(1, partition="main", gpus=1)
    cycle(rec, clock)
    return slurm.jobs[1], store.job(1)


def test_on_an_idle_powered_down_cluster_a_job_goes_to_its_partition_at_once(site):
    # shipped defaults: skip_when_free on
    job, row = one_job_with_nodes(site, {f"gpu{i}": "IDLE+POWERED_DOWN" for i in range(1, 5)})
    assert job.partition == "main" and "would start at once" in row.profile_reason


def test_a_powered_down_node_is_not_woken_for_a_lent_profiling_run(site):
    job, _ = one_job_with_nodes(site, {f"gpu{i}": "IDLE+POWERED_DOWN" for i in range(1, 4)}, skip_when_free=False)
    assert job.partition == "profiling"
    assert job.excluded_nodes == "gpu1,gpu2,gpu3"  # lent the awake node's GPUs only


def test_a_profiling_partition_with_no_usable_gpu_sends_jobs_on_after_a_minute(site):
    clock, slurm, store, rec = site(skip_when_free=False)
    for n in slurm.nodes.values():
        n.state = "IDLE+DRAIN"
    slurm.submit(1, partition="main", gpus=1)
    cycle(rec, clock, 6)
    assert slurm.jobs[1].partition == "inbox"  # a node or two missing a cycle send nobody on
    cycle(rec, clock)
    # (every node drained: main cannot start it either, which the reason says first)
    assert slurm.jobs[1].partition == "main" and ("no usable GPU" in store.job(1).profile_reason
                                                  or "main cannot start a job now" in store.job(1).profile_reason)
    assert store.job(1).site_factor is not None  # it lands there with its SiteFactor set


def test_a_job_at_its_qos_limit_holds_no_profiling_room_and_no_claim_on_idle_gpus(site):
    clock, slurm, store, rec = site()
    slurm.submit(1, partition="main", gpus=2)  # the user's running job, at the limit (2 GPUs)
    cycle(rec, clock)
    slurm.start(1)
    slurm.nodes["gpu1"].used = 2
    # the same user's next job, released to main, pends there at the limit
    slurm.submit(2, partition="main", gpus=1, user="nobody")
    cycle(rec, clock)
    j2 = slurm.jobs[2]
    assert j2.partition == "main"  # nobody waits in main, GPUs free: sent on at once
    j2.reason = "QOSMaxGRESPerUser"
    # another user's job on the idle cluster is sent on at once too: job 2 waits for no GPU
    slurm.submit(3, partition="main", gpus=1, user="alice")
    cycle(rec, clock)
    assert slurm.jobs[3].partition == "main" and "would start at once" in store.job(3).profile_reason
    slurm.start(3)
    # admitted to profiling, then pending there at its QOS limit: withdrawn at the next cycle
    rec.cfg.profiler.skip_when_free = False
    slurm.submit(4, partition="main", gpus=1, user="nobody")
    cycle(rec, clock)
    # lent GPUs nobody waits for: job 2, at its QOS limit, waits for none
    assert slurm.jobs[4].partition == "profiling" and store.job(4).lent
    slurm.jobs[4].reason = "QOSMaxGRESPerUser"
    cycle(rec, clock)
    assert slurm.jobs[4].partition == "main"
    assert "pending in profiling for QOSMaxGRESPerUser" in store.job(4).profile_reason


def test_a_per_job_qos_limit_is_flagged_as_never_starting(site):
    clock, slurm, store, rec = site()
    slurm.submit(1, partition="main", gpus=4)
    cycle(rec, clock)
    assert slurm.jobs[1].partition == "main"
    slurm.jobs[1].reason = "QOSMaxGRESPerJob"
    cycle(rec, clock)
    assert MAY_NEVER_START in store.job(1).profile_reason and "QOSMaxGRESPerJob" in store.job(1).profile_reason


def test_a_backlog_waiting_for_profiling_room_is_not_sent_on_when_the_nodes_miss_a_cycle(site):
    """A review: the grace was counted from each job's first sight, so a job that had waited for
    room 5 minutes went on unprofiled at the first cycle the nodes did not answer."""
    clock, slurm, store, rec = site(skip_when_free=False, capacity_gpus=1, lend_idle_gpus=False)
    slurm.submit(1, partition="main", gpus=1)
    cycle(rec, clock)
    slurm.start(1)
    slurm.submit(2, partition="main", gpus=1)
    cycle(rec, clock, 30)  # 5 minutes waiting for room
    assert slurm.jobs[2].partition == "inbox"
    for n in slurm.nodes.values():
        n.state = "IDLE+NOT_RESPONDING"
    cycle(rec, clock, 2)
    assert slurm.jobs[2].partition == "inbox"  # a blip: it waits on
    for n in slurm.nodes.values():
        n.state = "IDLE"
    cycle(rec, clock)
    for n in slurm.nodes.values():
        n.state = "IDLE+DRAIN"  # for good this time: on after the grace, counted from now
    cycle(rec, clock, 5)
    assert slurm.jobs[2].partition == "inbox"
    cycle(rec, clock, 2)
    assert slurm.jobs[2].partition == "main" and ("no usable GPU for 60 s" in store.job(2).profile_reason
                                                  or "main cannot start a job now" in store.job(2).profile_reason)


def _drained_partition_cluster(tmp_path):
    """gpu1 in profiling only, gpu2 main's only node: a run in profiling on gpu1 while main is drained."""
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")},
                            "profiler": {"tprof_s": 600, "skip_when_free": False, "lend_idle_gpus": False,
                                         "long_tprof_s": 0}})
    clock = Clock()
    slurm = MemSlurm(clock)
    slurm.nodes = {"gpu1": NodeGPUs("gpu1", 8, 0, "IDLE", ("inbox", "profiling")),
                   "gpu2": NodeGPUs("gpu2", 8, 0, "IDLE", ("inbox", "main"))}
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=clock)
    slurm.submit(5, partition="main", gpus=1)
    clock.t += 10
    assert rec.cycle().ok and slurm.jobs[5].partition == "profiling"
    slurm.start(5)
    slurm.nodes["gpu1"] = NodeGPUs("gpu1", 8, 1, "MIXED", ("inbox", "profiling"))
    slurm.nodes["gpu2"] = NodeGPUs("gpu2", 8, 0, "IDLE+DRAIN", ("inbox", "main"))  # an admin's drain
    return clock, slurm, store, rec


def _cycles(rec, clock, seconds):
    for _ in range(seconds // 10):
        clock.t += 10
        assert rec.cycle().ok


def test_a_run_whose_partition_is_drained_is_not_requeued_at_tprof(tmp_path):
    """A review on a test cluster: requeued at Tprof while every node of its partition was drained,
    the run was ended and the job waited (ReqNodeNotAvail) until the drain was over; plain Slurm had
    let it run to its end (a drain stops no running job)."""
    clock, slurm, store, rec = _drained_partition_cluster(tmp_path)
    _cycles(rec, clock, 900)  # past Tprof, main still drained
    assert not [c for c in slurm.job_calls(5) if c[0] == "requeue"], slurm.job_calls(5)
    slurm.nodes["gpu2"] = NodeGPUs("gpu2", 8, 0, "IDLE", ("inbox", "main"))  # the drain is over
    _cycles(rec, clock, 30)
    assert [c for c in slurm.job_calls(5) if c[0] == "requeue"], "requeued once main can run it again"


def test_a_run_whose_partition_stays_drained_is_left_to_finish(tmp_path):
    clock, slurm, store, rec = _drained_partition_cluster(tmp_path)
    _cycles(rec, clock, 1300)  # past Tprof + Tprof
    r = store.job(5)
    assert r.profile == "abandoned" and "could not start it (the partition, or every node of it, down, drained or reserved" in r.profile_reason, \
        r.profile_reason
    slurm.nodes["gpu2"] = NodeGPUs("gpu2", 8, 0, "IDLE", ("inbox", "main"))
    _cycles(rec, clock, 60)
    assert not [c for c in slurm.job_calls(5) if c[0] == "requeue"]  # its run goes on to its end
    slurm.end(5)
    _cycles(rec, clock, 20)
    assert store.job(5).final_state == "COMPLETED"


def test_a_job_in_a_reservation_is_not_profiled(tmp_path):
    """A review on a test cluster: a `--reservation` job was profiled, its reservation ended before
    the requeue, and in main it was held (RESV_DEL_HOLD, priority 0) for good; plain Slurm ran it
    inside the reservation. The reservation is read from squeue's `resv_name`."""
    from lucidd.backends.slurm import parse_squeue

    (j,) = parse_squeue({"jobs": [{"job_id": 17, "job_state": "PENDING", "partition": "inbox", "resv_name": "short2",
                                   "tres_per_node": "gres:gpu:1", "submit_time": 1, "user_name": "alice"}]})
    assert j.reservation == "short2"
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")}, "profiler": {"skip_when_free": False}})
    clock = Clock()
    slurm = MemSlurm(clock)
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=clock)
    slurm.submit(17, partition="main", gpus=1, reservation="short2")
    clock.t += 10
    assert rec.cycle().ok
    assert slurm.jobs[17].partition == "main"
    assert "runs in reservation short2" in store.job(17).profile_reason, store.job(17).profile_reason


def test_a_job_for_a_drained_partition_is_not_profiled(tmp_path):
    """A review: a job for a partition whose every node was drained was admitted to profiling and,
    left to finish there, ran to its end on another partition's node, ahead of every queue; plain
    Slurm keeps it pending until the drain is over."""
    clock, slurm, store, rec = _drained_partition_cluster(tmp_path)
    _cycles(rec, clock, 70)  # drained for over a minute: not a node that missed a cycle or two
    slurm.submit(6, partition="main", gpus=1)
    _cycles(rec, clock, 10)
    assert slurm.jobs[6].partition == "main"
    assert "main cannot start a job now" in store.job(6).profile_reason, store.job(6).profile_reason


def test_a_run_whose_partition_is_set_down_is_not_requeued_at_tprof(tmp_path):
    """A review: `scontrol update partitionname=research state=down` under a profiling run: requeued
    at Tprof, it waited (PartitionDown) where plain Slurm had let it finish."""
    clock, slurm, store, rec = _drained_partition_cluster(tmp_path)
    slurm.nodes["gpu2"] = NodeGPUs("gpu2", 8, 0, "IDLE", ("inbox", "main"))  # nodes fine, the partition DOWN
    slurm.states["main"] = "DOWN"
    _cycles(rec, clock, 900)
    assert not [c for c in slurm.job_calls(5) if c[0] == "requeue"], slurm.job_calls(5)
    del slurm.states["main"]
    _cycles(rec, clock, 30)
    assert [c for c in slurm.job_calls(5) if c[0] == "requeue"]
