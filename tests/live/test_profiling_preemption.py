"""A site whose slurm.conf has PreemptType=preempt/partition_prio: a job started in the profiling
partition (PriorityTier 2, above the others, docs/deploy.md) preempts running jobs of lower tiers
on its nodes. Seen on Slurm 22.05 (2 December 2026): a 1-GPU job moved into profiling while every
GPU was taken, and Slurm requeued an 8-GPU job of `main` to start it ("preempted JobId=5 has been
requeued to reclaim resources for JobId=9"); under PreemptMode=CANCEL that job is gone. With
PreemptMode=OFF on main the profiling job waited (Resources) and nothing was preempted.

So lucidd profiles no job while a profiling run could preempt one, and says why."""

from __future__ import annotations

import json
import logging

import pytest

from lucidd.backends.base import BackendError, Partition
from lucidd.backends.slurm import parse_partitions
from lucidd.live.config import config_from_dict
from lucidd.live.reconcile import PREEMPT_TYPE_RECHECK_S, Reconciler
from lucidd.live.slurm_settings import preempted_by_profiling
from lucidd.live.store import Store
from orchestrator.live import LucidDecider

from .memslurm import Clock, MemSlurm

PRIO = "preempt/partition_prio"


def parts(**spec):
    """name=(tier, mode[, nodes]) -> {name: Partition}"""
    return {n: Partition(n, True, s[2] if len(s) > 2 else ("gpu1", "gpu2"), 16, priority_tier=s[0], preempt_mode=s[1])
            for n, s in spec.items()}


def test_which_partitions_a_profiling_run_would_preempt():
    p = parts(inbox=(1, "REQUEUE"), profiling=(2, "REQUEUE"), main=(1, "CANCEL"), research=(1, "OFF"),
              urgent=(3, "REQUEUE"), cpu=(1, "REQUEUE", ("cpu1",)), scavenger=(0, "GANG,SUSPEND"))
    assert preempted_by_profiling(PRIO, p, "profiling") == ["inbox", "main", "scavenger"]
    # no other PreemptType preempts by partition tier (preempt/qos: by the job's QOS, which a move keeps)
    for other in ("preempt/none", "preempt/qos", "", None):
        assert preempted_by_profiling(other, p, "profiling") == []
    # a tier or a mode not read is not judged; nor is a profiling partition Slurm does not list
    assert preempted_by_profiling(PRIO, parts(profiling=(None, "REQUEUE"), main=(1, "REQUEUE")), "profiling") == []
    assert preempted_by_profiling(PRIO, parts(profiling=(2, "OFF"), main=(None, "REQUEUE")), "profiling") == []
    assert preempted_by_profiling(PRIO, parts(profiling=(2, "OFF"), main=(1, "")), "profiling") == []
    assert preempted_by_profiling(PRIO, parts(main=(1, "REQUEUE")), "profiling") == []
    # nodes not known: counted as shared (a run there could reach them)
    assert preempted_by_profiling(PRIO, parts(profiling=(2, "OFF", ()), main=(1, "REQUEUE")), "profiling") == ["main"]


def test_tier_and_mode_are_read_from_scontrol_show_partition():
    line = ("PartitionName=main AllowGroups=ALL Default=NO MaxTime=UNLIMITED Nodes=gpu[1-4] PriorityJobFactor=1 "
            "PriorityTier=1 RootOnly=NO OverTimeLimit=NONE PreemptMode=GANG,SUSPEND State=UP TotalNodes=4")
    (p,) = parse_partitions(line, {}).values()
    assert (p.priority_tier, p.preempt_mode) == (1, "GANG,SUSPEND")
    (p,) = parse_partitions("PartitionName=x State=UP", {}).values()
    assert (p.priority_tier, p.preempt_mode) == (None, "")


@pytest.fixture
def site(tmp_path):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")},
                            # profiled even where nobody waits (MemSlurm starts nothing by itself)
                            "profiler": {"tprof_s": 600, "skip_when_free": False}})
    clock = Clock()
    slurm = MemSlurm(clock)
    slurm.config = {"PreemptType": PRIO, "PreemptMode": "REQUEUE"}
    slurm.tiers = {"inbox": 1, "profiling": 2, "main": 1}
    slurm.preempt_modes = {"inbox": "OFF", "profiling": "REQUEUE", "main": "REQUEUE"}
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=clock)
    return clock, slurm, store, rec


def cycle(rec, clock, n=1):
    for _ in range(n):
        clock.t += 10
        assert rec.cycle().ok


def test_nobody_is_profiled_while_a_run_would_preempt_and_profiling_comes_back_once_it_would_not(site, caplog):
    clock, slurm, store, rec = site
    store.set_meta("slurm_warnings", json.dumps(["bf_window is 1 day, shorter ..."]))  # from lucidd's start
    slurm.submit(1, partition="main", gpus=1)
    with caplog.at_level(logging.WARNING):
        cycle(rec, clock)
    assert slurm.jobs[1].partition == "main"
    row = store.job(1)
    assert row.profile == "skipped" and "would preempt running jobs of main" in row.profile_reason
    # it lands in its partition with its SiteFactor set, as a job the decider releases does
    assert row.site_factor is not None
    calls = [c[0] for c in slurm.job_calls(1)]
    assert calls.index("sitefactor") < calls.index("move"), calls
    (said,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "PreemptMode=OFF" in said and "main (PriorityTier 1, PreemptMode REQUEUE)" in said
    warnings = json.loads(store.get_meta("slurm_warnings"))
    assert warnings[0].startswith("bf_window") and warnings[1] == said.removeprefix("slurm.conf: ")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        cycle(rec, clock, 3)  # said once, not at every cycle
    assert not [r for r in caplog.records if r.levelno == logging.ERROR]
    assert slurm.config_reads == 1  # PreemptType is read again only every PREEMPT_TYPE_RECHECK_S
    # the admin sets PreemptMode=OFF on main (scontrol update, seen at the next cycle's partitions)
    slurm.preempt_modes["main"] = "OFF"
    slurm.submit(2, partition="main", gpus=1)
    with caplog.at_level(logging.WARNING):
        cycle(rec, clock)
    assert slurm.jobs[2].partition == "profiling" and store.job(2).profile == "admitted"
    assert any("profiling is on again" in r.getMessage() for r in caplog.records)
    assert json.loads(store.get_meta("slurm_warnings")) == warnings[:1]


def test_a_job_admitted_and_not_started_goes_back_before_slurm_starts_it_by_preemption(site):
    clock, slurm, store, rec = site
    slurm.config = {"PreemptType": "preempt/none"}
    slurm.submit(1, partition="main", gpus=1)
    slurm.submit(2, partition="main", gpus=1)
    cycle(rec, clock)
    assert slurm.jobs[1].partition == slurm.jobs[2].partition == "profiling"
    slurm.start(1)
    # the site turns preemption on (slurm.conf, `scontrol reconfigure`): the partitions' PreemptMode
    # show it at once (OFF for all under preempt/none), and lucidd asks for PreemptType at that cycle
    slurm.config = {"PreemptType": PRIO}
    slurm.preempt_modes = {p: "OFF" for p in slurm.partitions}
    cycle(rec, clock)
    assert slurm.jobs[2].partition == "profiling" and slurm.config_reads == 2
    slurm.preempt_modes = {p: "REQUEUE" for p in slurm.partitions}
    cycle(rec, clock)
    assert slurm.config_reads == 3
    assert slurm.jobs[2].partition == "main" and "admitted, not started" in store.job(2).profile_reason
    # a run that started preempts nobody any more: left to run, and requeued at its Tprof as always
    assert slurm.jobs[1].partition == "profiling" and store.job(1).profile == "admitted"
    assert [c[0] for c in slurm.job_calls(1)] == ["move"]


def test_a_preempttype_slurm_does_not_give_keeps_the_last_known_and_is_asked_again_a_minute_later(site):
    clock, slurm, store, rec = site
    slurm.config_fails = BackendError("scontrol show config: Socket timed out")
    slurm.submit(1, partition="main", gpus=1)
    cycle(rec, clock)
    assert slurm.jobs[1].partition == "profiling"  # not known: not checked, as lucidd's other checks
    slurm.config_fails = None
    cycle(rec, clock, 5)
    assert slurm.config_reads == 1  # failed at the first cycle, not asked again within the minute
    # ... nor at every cycle after that: PREEMPT_TYPE_RECHECK_S apart, unless the partitions change
    cycle(rec, clock, 2)
    # read now: the job admitted while it was unknown, not started yet, goes back to its partition
    assert slurm.config_reads == 2 and slurm.jobs[1].partition == "main"
    cycle(rec, clock, PREEMPT_TYPE_RECHECK_S // 10 - 2)  # the last read was one cycle ago
    assert slurm.config_reads == 2
    cycle(rec, clock)
    assert slurm.config_reads == 3
    slurm.submit(2, partition="main", gpus=1)
    cycle(rec, clock)
    assert slurm.config_reads == 3 and slurm.jobs[2].partition == "main"


def test_a_finding_a_lucidd_before_stored_is_cleared_at_the_first_cycle(site, caplog):
    clock, slurm, store, rec = site
    slurm.config = {"PreemptType": "preempt/none"}
    store.set_meta("slurm_warnings", json.dumps(["PreemptType=preempt/partition_prio: ... main ...", "bf_window"]))
    with caplog.at_level(logging.WARNING):
        cycle(rec, clock)
    assert json.loads(store.get_meta("slurm_warnings")) == ["bf_window"]
    assert not caplog.records  # nothing to say: there was no finding in this run


@pytest.mark.parametrize("state", ["DOWN", "DRAIN", "INACTIVE", None])
def test_nobody_is_profiled_while_the_profiling_partition_starts_no_run(site, caplog, state):
    """An admin set `profiling` DOWN (or INACTIVE, or removed it): jobs admitted there waited 2 x Tprof,
    then went on told "no node there had its GPUs free" (a review on a test cluster, 3 December 2026)."""
    clock, slurm, store, rec = site
    slurm.config = {"PreemptType": "preempt/none"}
    slurm.submit(1, partition="main", gpus=1)
    cycle(rec, clock)
    assert slurm.jobs[1].partition == "profiling"
    if state is None:
        slurm.partitions.remove("profiling")
    else:
        slurm.states["profiling"] = state
    slurm.submit(2, partition="main", gpus=1)
    with caplog.at_level(logging.WARNING):
        cycle(rec, clock, 3)
    said = "Slurm lists no partition profiling" if state is None else f"partition profiling is {state}"
    assert slurm.jobs[1].partition == "main" and f"admitted, not started; {said}" in store.job(1).profile_reason
    assert slurm.jobs[2].partition == "main" and store.job(2).profile_reason.startswith(f"not profiled: {said}")
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and said in errors[0]  # said once
    if state is not None:
        del slurm.states["profiling"]
        slurm.submit(3, partition="main", gpus=1)
        with caplog.at_level(logging.WARNING):
            cycle(rec, clock)
        assert slurm.jobs[3].partition == "profiling"
        assert any("profiling is on again" in r.getMessage() for r in caplog.records)


def test_an_inbox_an_admin_drained_is_set_down_again(site, caplog):
    """job_submit.lua routes jobs only while the inbox is DOWN: DRAINed, every new job went straight
    to its partition, unprofiled and unordered, and lucidd said nothing (a review)."""
    clock, slurm, store, rec = site
    slurm.config = {"PreemptType": "preempt/none"}
    slurm.states["inbox"] = "DRAIN"
    with caplog.at_level(logging.WARNING):
        cycle(rec, clock)
    assert ("partition", (), "inbox", False) in slurm.calls and "inbox" not in slurm.states
    assert any("inbox" in r.getMessage() and "DRAIN" in r.getMessage() for r in caplog.records
               if r.levelno == logging.ERROR)
    n = len(slurm.calls)
    cycle(rec, clock)
    assert not [c for c in slurm.calls[n:] if c[0] == "partition"]  # DOWN now: left so
