"""Lucid's live decisions (orchestrator/live.py) on hand-built DecisionInput: profiling admission,
skip reasons, Tprof requeue/abandon, SiteFactor order, and record/replay."""

import json
import math
import random

import pytest

from lucidd.backends.base import LiveJob
from lucidd.backends.slurm import SITE_FACTOR_MAX, SITE_FACTOR_MIN
from lucidd.errors import ConfigError
from lucidd.live.config import config_from_dict
from lucidd.live.reconcile import DecisionInput
from lucidd.live.store import JobRow
from orchestrator.live import EPOCH, LucidDecider, live_job, replay_recorded
from orchestrator.policy import LucidPolicy

NOW = EPOCH + 300 * 86400  # a fixed instant in late 2026
TPROF = 200


def make_cfg(tmp_path, **sections):
    raw = {"daemon": {"state_dir": str(tmp_path / "state")}, "models": {"dir": str(tmp_path / "models")},
           # these cases are written for a Tprof of 200 s, one Tprof for every run and the capacity
           # alone (lending and long runs have their own cases)
           "profiler": {"tprof_s": TPROF, "long_tprof_s": 0, "lend_idle_gpus": False}}
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return config_from_dict(raw)


@pytest.fixture
def decider(tmp_path):
    return LucidDecider(make_cfg(tmp_path))


@pytest.fixture
def aged_decider(tmp_path):
    """Aging on (48 h half-life) and the guard at 96 h, so that the aged order is what is tested."""
    return LucidDecider(make_cfg(tmp_path, ordering={"starvation_s": 96 * 3600, "aging_halflife_s": 48 * 3600}))


def lj(job_id, gpus=1, partition="inbox", state="PENDING", **kw):
    return LiveJob(job_id=job_id, name=kw.pop("name", f"job{job_id}"), user=kw.pop("user", "alice"),
                   account=kw.pop("account", "lab"),
                   partition=partition, state=state, gpus=gpus, submit_time=kw.pop("submit_time", NOW - 10), **kw)


def rec(j, estimate=None, first_seen=None, original_submit=None, requested=None, target="main", profile="pending",
        phase="inbox"):
    return JobRow(job_id=j.job_id, first_seen=NOW - 5 if first_seen is None else first_seen,
                  original_submit=j.submit_time if original_submit is None else original_submit,
                  requested_partition=requested, target_partition=target, name=j.name, user=j.user,
                  account=j.account, gpus=j.gpus, phase=phase, profile=profile, profile_reason="",
                  estimate_s=estimate, estimate_source="test" if estimate else "", restarts=j.restart_count)


def inp(inbox=(), profiling=(), waiting=(), records=None, profiling_gpus=32, now=NOW, **rec_kw):
    records = dict(records or {})
    for j in [*inbox, *profiling, *waiting]:
        records.setdefault(j.job_id, rec(j, **rec_kw))
    return DecisionInput(now, list(inbox), list(profiling), list(waiting), records, profiling_gpus)


def ids(pairs):
    return [jid for jid, _ in pairs]


def reasons(pairs):
    return dict(pairs)


# ----- profiling admission ----------------------------------------------------------------------

def test_least_gpus_first_within_capacity(decider):
    # auto capacity: max(nprof 8, 3 % of 32) = 8
    inbox = [lj(1, 4), lj(2, 1), lj(3, 2), lj(4, 8), lj(5, 1)]
    plan = decider.decide(inp(inbox))
    assert ids(plan.profile) == [2, 5, 3, 1]  # 1+1+2+4 = 8 GPUs; ties by submission order (job id)
    assert plan.release == []  # job 4 waits for room, it is not released
    assert "least-GPUs-first" in plan.profile[0][1] and "8/8" in plan.profile[-1][1]


def test_a_job_wider_than_half_the_capacity_is_not_profiled(tmp_path):
    """Admission is strictly least-GPUs-first: a job holding the whole capacity would stop profiling
    for everyone behind it, so with max_job_share 0.5 one wider than half of it goes to its partition."""
    inbox = [lj(1, 8), lj(2, 5), lj(3, 4), lj(4, 1)]
    half = LucidDecider(make_cfg(tmp_path, profiler={"max_job_share": 0.5}))
    plan = half.decide(inp(inbox))  # capacity max(Nprof 8, 3 % of 32) = 8: at most 4 GPUs
    assert ids(plan.profile) == [4, 3]
    assert ids(plan.release) == [1, 2]
    assert reasons(plan.release)[1] == ("not profiled: asks for 8 GPUs > 0.5 x the profiling capacity (8 GPUs): "
                                        "it would hold profiling for every job behind it")
    # the default, 1.0, leaves only Nprof
    plan = LucidDecider(make_cfg(tmp_path)).decide(inp(inbox))
    assert ids(plan.profile) == [4, 3] and plan.release == []  # 1 + 4 held; 5 and 8 wait for room
    # the share is of the configured capacity: 64 (of 32 GPUs: all of them) takes up to 32
    plan = LucidDecider(make_cfg(tmp_path, profiler={"max_job_share": 0.5, "capacity_gpus": 64})).decide(inp(inbox))
    assert ids(plan.profile) == [4, 3, 2, 1]
    # a capacity of 1 GPU still profiles 1-GPU jobs
    tiny = LucidDecider(make_cfg(tmp_path, profiler={"max_job_share": 0.5, "nprof_gpus": 1}))
    assert ids(tiny.decide(inp([lj(5, 1)], profiling_gpus=8)).profile) == [5]


def test_a_job_that_would_start_at_once_skips_profiling(tmp_path):
    """[profiler] skip_when_free: nobody waits in main and a node there has the GPUs free -> released
    to main unprofiled; a queue in main, or no node with room, -> profiled as before."""
    d = LucidDecider(make_cfg(tmp_path))
    x = inp([lj(1, 2), lj(2, 4)])
    x.queued, x.free_gpus = {}, {"main": 3}
    plan = d.decide(x)
    assert ids(plan.release) == [1] and ids(plan.profile) == [2]  # 4 GPUs do not fit on the 3 free
    assert "nobody waits in main and one of its nodes had" in reasons(plan.release)[1]
    assert "it would start at once" in reasons(plan.release)[1]
    x.queued = {"main": 1}  # someone waits: both are profiled
    assert ids(d.decide(x).profile) == [1, 2]
    off = LucidDecider(make_cfg(tmp_path, profiler={"skip_when_free": False}))
    x.queued = {}
    assert ids(off.decide(x).profile) == [1, 2] and off.decide(x).release == []


def test_a_job_asking_for_a_list_of_partitions_skips_profiling_where_one_has_room(tmp_path):
    """skip_when_free with `-p main,research`: Slurm starts it in whichever has room, so it skips
    profiling when nobody waits in either and a node of one has its GPUs free (the daemon counts a
    waiting job with such a list in each partition of it)."""
    d = LucidDecider(make_cfg(tmp_path))
    x = inp([lj(1, 2)], target="main,research")
    x.queued, x.free_gpus = {}, {"main": 0, "research": 4}
    assert ids(d.decide(x).release) == [1]
    x.queued = {"research": 1}  # someone waits in one of them: profiled
    assert ids(d.decide(x).profile) == [1]


def test_jobs_that_fit_on_gpus_nobody_waits_for_are_lent_them(tmp_path):
    """[profiler] lend_idle_gpus: 20 GPUs free on nodes of partitions nobody waits in,
    at most 8 on one node. Least-GPUs-first, a job that fits on one such node is admitted there (lent,
    outside the capacity of 8) while they last; the next one within the capacity."""
    decider = LucidDecider(make_cfg(tmp_path, profiler={"lend_idle_gpus": True}))
    x = inp([lj(1, 4), lj(2, 1), lj(3, 2), lj(4, 8), lj(5, 1), lj(6, 8), lj(7, 8)])
    x.lendable_gpus, x.lendable_node_gpus = 20, 8
    plan = decider.decide(x)
    assert ids(plan.profile) == [2, 5, 3, 1, 4, 6]  # lent 1+1+2+4+8 = 16 of 20; 6 in the capacity; 7 neither
    assert plan.lend == [2, 5, 3, 1, 4]
    assert "GPUs nobody waits for" in reasons(plan.profile)[4] and "16 of the 20 idle GPUs" in reasons(plan.profile)[4]
    assert "least-GPUs-first, 8/8" in reasons(plan.profile)[6]
    # most free on one such node: 2 -> the 1- and 2-GPU jobs are lent; the 4-GPU job fits the capacity,
    # the 8-GPU jobs neither (4 + 8 > 8)
    x.lendable_node_gpus = 2
    plan = decider.decide(x)
    assert ids(plan.profile) == [2, 5, 3, 1] and plan.lend == [2, 5, 3]
    assert "least-GPUs-first, 4/8" in reasons(plan.profile)[1]
    # lent jobs admitted and not yet started claim those GPUs; lent runs hold no capacity
    waiting = lj(30, 8, partition="profiling")
    running = lj(31, 8, partition="profiling", state="RUNNING", start_time=NOW - 10)
    records = {30: rec(waiting, profile="admitted", phase="profiling"),
               31: rec(running, profile="admitted", phase="profiling")}
    records[30].lent = records[31].lent = True
    y = inp([lj(1, 4), lj(2, 1), lj(6, 8)], profiling=[waiting, running], records=records)
    y.lendable_gpus, y.lendable_node_gpus = 10, 8
    plan = decider.decide(y)
    assert plan.lend == [2] and ids(plan.profile) == [2, 1]  # 8 + 1 of 10 lent; 4 within the capacity
    # nothing to lend: the capacity alone, as before
    x.lendable_gpus = x.lendable_node_gpus = 0
    assert ids(decider.decide(x).profile) == [2, 5, 3, 1] and decider.decide(x).lend == []


def test_a_lent_run_is_reclaimed_once_someone_waits_for_its_gpus(tmp_path):
    """reclaim_lent (off by default): a lent run on a node of a partition where a job now waits is
    requeued at once, whatever its time; a lent run elsewhere, or one not lent, is not."""
    d = LucidDecider(make_cfg(tmp_path, profiler={"lend_idle_gpus": True, "reclaim_lent": True}))
    runs = [lj(1, 1, partition="profiling", state="RUNNING", start_time=NOW - 30, node_names=("gpu3",)),
            lj(2, 1, partition="profiling", state="RUNNING", start_time=NOW - 30, node_names=("gpu1",)),
            lj(3, 1, partition="profiling", state="RUNNING", start_time=NOW - 30, node_names=("gpu3",))]
    records = {j.job_id: rec(j, profile="admitted", phase="profiling") for j in runs}
    records[1].lent = records[2].lent = True
    x = inp(profiling=runs, records=records)
    x.busy_nodes = frozenset({"gpu3", "gpu4"})
    plan = d.decide(x)
    assert ids(plan.requeue) == [1] and "reclaimed" in reasons(plan.requeue)[1]
    off = LucidDecider(make_cfg(tmp_path, profiler={"lend_idle_gpus": True, "reclaim_lent": False}))
    assert off.decide(x).requeue == []


def test_a_lent_run_is_kept_past_its_tprof_until_someone_has_waited_as_long(tmp_path):
    """keep_lent_while_idle (off by default): a lent run is requeued only once a job in a partition
    of its node has waited long_tprof_s since submission; until then it runs on past its Tprof, and
    gets no warning before it."""
    d = LucidDecider(make_cfg(tmp_path, profiler={"lend_idle_gpus": True, "keep_lent_while_idle": True,
                                                  "long_tprof_s": 3600, "long_share": 0.0}))
    runs = [lj(1, 1, partition="profiling", state="RUNNING", start_time=NOW - 5000, node_names=("gpu3",)),
            lj(2, 1, partition="profiling", state="RUNNING", start_time=NOW - 5000, node_names=("gpu1",)),
            lj(3, 1, partition="profiling", state="RUNNING", start_time=NOW - 3500, node_names=("gpu3",),
               comment="lucid:signal=B:USR1@120"),
            lj(4, 1, partition="profiling", state="RUNNING", start_time=NOW - TPROF - 30, node_names=("gpu3",))]
    records = {j.job_id: rec(j, profile="admitted", phase="profiling") for j in runs}
    for k in (1, 2, 3):
        records[k].lent = True  # 4: a run within the capacity, requeued at Tprof as ever
    x = inp(profiling=runs, records=records)
    x.away_s = 0.0  # lucidd cycled all along: a run past its Tprof is not one it left to finish
    # nobody waits anywhere: the lent runs go on past their 3,600 s (1, 2); 3, due for its warning
    # 120 s before its Tprof, gets none
    plan = d.decide(x)
    assert ids(plan.requeue) == [4] and plan.signal == [] and plan.abandon == []
    # someone waits on gpu3, for less than long_tprof_s: still kept
    x.busy_nodes, x.node_wait_s = frozenset({"gpu3"}), {"gpu3": 3599}
    assert ids(d.decide(x).requeue) == [4]
    # ... for long_tprof_s: 1, past its Tprof, is reclaimed; 3, before its Tprof, is warned for it as
    # any run is (then requeued there); 2 (gpu1) runs on
    x.node_wait_s = {"gpu3": 3600}
    plan = d.decide(x)
    assert ids(plan.requeue) == [1, 4] and "reclaimed, a job has waited 3600 s" in reasons(plan.requeue)[1]
    assert [s[0] for s in plan.signal] == [3]
    # a record without the waits (node_wait_s None): every busy node counts as waited for
    x.node_wait_s = None
    assert ids(d.decide(x).requeue) == [1, 4]
    # off (the default): lent runs are requeued at long_tprof_s, waited for or not
    off = LucidDecider(make_cfg(tmp_path, profiler={"lend_idle_gpus": True, "long_tprof_s": 3600, "long_share": 0.0}))
    x.busy_nodes, x.node_wait_s = frozenset(), {}
    assert ids(off.decide(x).requeue) == [1, 2, 4]
    # the key on, lending switched off since (runs lent before still going): the daemon reads no waits
    # then, so nobody would ever seem to wait; the lent runs are requeued at their Tprof, not kept for ever
    unlent = LucidDecider(make_cfg(tmp_path, profiler={"lend_idle_gpus": False, "keep_lent_while_idle": True,
                                                       "long_tprof_s": 3600, "long_share": 0.0}))
    assert ids(unlent.decide(x).requeue) == [1, 2, 4]


def test_a_kept_lent_run_its_own_limit_ends_soon_is_left_to_end_not_reclaimed(tmp_path):
    """A review of keep_lent_while_idle: a kept run (--time 3 h) reclaimed 2 minutes before its own
    limit would run those 3 h again in its partition; it is left to end where it is."""
    d = LucidDecider(make_cfg(tmp_path, profiler={"lend_idle_gpus": True, "keep_lent_while_idle": True,
                                                  "long_tprof_s": 3600, "long_share": 0.0}))
    runs = [lj(1, 1, partition="profiling", state="RUNNING", start_time=NOW - 10_780, node_names=("gpu3",),
               time_limit_s=10_800),
            lj(2, 1, partition="profiling", state="RUNNING", start_time=NOW - 10_780, node_names=("gpu3",),
               time_limit_s=20_000)]
    records = {j.job_id: rec(j, profile="admitted", phase="profiling") for j in runs}
    for r in records.values():
        r.lent = True
    x = inp(profiling=runs, records=records)
    x.away_s, x.busy_nodes, x.node_wait_s = 0.0, frozenset({"gpu3"}), {"gpu3": 3600}
    plan = d.decide(x)
    assert ids(plan.requeue) == [2] and "reclaimed" in reasons(plan.requeue)[2]
    assert ids(plan.abandon) == [1] and "its own time limit, 10800 s" in reasons(plan.abandon)[1]


def test_lending_off(tmp_path):
    d = LucidDecider(make_cfg(tmp_path))  # the default
    x = inp([lj(1, 4), lj(2, 8)])
    x.lendable_gpus, x.lendable_node_gpus = 64, 8
    plan = d.decide(x)
    assert ids(plan.profile) == [1] and plan.lend == []


@pytest.mark.parametrize("kw", [{"required_nodes": "gpu1"}, {"excluded_nodes": "gpu2,gpu3"}])
def test_a_job_that_names_its_nodes_is_not_profiled(decider, kw):
    """lucidd sets and clears ExcNodeList on lent runs: a user's own node choice would be lost."""
    plan = decider.decide(inp([lj(1, 1, **kw)]))
    assert ids(plan.release) == [1] and "particular nodes" in reasons(plan.release)[1]


def test_long_runs_lent_ones_and_the_oldest_within_long_share(tmp_path):
    """long_tprof_s 1000 s, long_share 0.25 of 32 GPUs = 8: a lent run is requeued at 1000 s; of the
    others past Tprof, the oldest go on while they hold at most 8 GPUs (the rest are requeued at Tprof),
    and every one at 1000 s."""
    d = LucidDecider(make_cfg(tmp_path, profiler={"long_tprof_s": 1000, "long_share": 0.25}))
    running = {jid: lj(jid, g, partition="profiling", state="RUNNING", start_time=NOW - ran)
               for jid, g, ran in ((1, 4, 900), (2, 4, 500), (3, 2, TPROF + 30), (4, 2, TPROF), (5, 1, 900), (6, 1, 1000))}
    records = {jid: rec(j, profile="admitted", phase="profiling") for jid, j in running.items()}
    records[5].lent = True  # lent: its own Tprof is long_tprof_s
    records[6].lent = True
    plan = d.decide(inp(profiling=list(running.values()), records=records))
    # oldest first past Tprof: 1 (4 GPUs, 900 s) and 2 (4 GPUs) fill the 8; 3 and 4 are requeued at Tprof;
    # lent 5 (900 s) goes on, lent 6 reached 1000 s
    assert sorted(ids(plan.requeue)) == [3, 4, 6]
    assert "Tprof 1000 s" in reasons(plan.requeue)[6] and f"Tprof {TPROF} s" in reasons(plan.requeue)[3]
    # the default (long_tprof_s 0): Tprof for every run (those far past it were left while lucidd was away)
    plain = LucidDecider(make_cfg(tmp_path)).decide(inp(profiling=list(running.values()), records=records))
    assert sorted(ids(plain.requeue)) == [3, 4] and sorted(ids(plain.abandon)) == [1, 2, 5, 6]


def test_strict_order_nothing_bigger_jumps_ahead(decider):
    # 6 of 8 GPUs are in use, 2 are left. Two 3-GPU jobs: neither fits, nothing is admitted. Then 1, 3, 1 GPUs:
    # least-GPUs-first puts both 1-GPU jobs ahead of the 3-GPU one, and they fill the 2 GPUs left.
    running = lj(10, 6, partition="profiling", state="RUNNING", start_time=NOW - 50)
    records = {10: rec(running, profile="admitted", phase="profiling")}
    plan = decider.decide(inp([lj(1, 3), lj(2, 3)], profiling=[running], records=records))
    assert plan.profile == [] and plan.requeue == []
    plan = decider.decide(inp([lj(1, 1), lj(2, 3), lj(3, 1)], profiling=[running], records=records))
    assert ids(plan.profile) == [1, 3]


def test_profiling_jobs_count_against_capacity_until_requeued(decider):
    a = lj(10, 4, partition="profiling", state="RUNNING", start_time=NOW - 10)
    b = lj(11, 4, partition="profiling", state="PENDING", restart_count=1)  # requeued: holds no GPU
    records = {10: rec(a, profile="admitted", phase="profiling"), 11: rec(b, profile="requeued", phase="requeued")}
    plan = decider.decide(inp([lj(1, 2), lj(2, 2), lj(3, 1)], profiling=[a, b], records=records))
    assert ids(plan.profile) == [3, 1]  # 4 + 1 + 2 = 7; the next 2 would make 9 > 8


@pytest.mark.parametrize("profiling_gpus,cap_cfg,expected", [
    (32, {}, 8),  # max(nprof, 3 % of 32 = 1)
    (1000, {}, 30),  # 3 % of 1000
    (4, {}, 4),  # never more than the partition has
    (0, {}, 0),  # no usable GPU: nothing is profiled
    (32, {"capacity_gpus": 3}, 3),
    (32, {"capacity_gpus": 64}, 32),
])
def test_capacity(tmp_path, profiling_gpus, cap_cfg, expected):
    d = LucidDecider(make_cfg(tmp_path, profiler=cap_cfg))
    assert d.capacity(inp(profiling_gpus=profiling_gpus), 0) == expected


def test_burst_capacity_applies_above_burst_queue(tmp_path):
    d = LucidDecider(make_cfg(tmp_path, profiler={"capacity_gpus": 2, "burst_capacity_gpus": 6, "burst_queue": 3}))
    x = inp(profiling_gpus=32)
    assert d.capacity(x, 3) == 2 and d.capacity(x, 4) == 6
    inbox = [lj(i, 1) for i in range(1, 5)]
    assert ids(d.decide(inp(inbox)).profile) == [1, 2, 3, 4]
    assert ids(d.decide(inp(inbox[:3])).profile) == [1, 2]


def test_no_profiling_gpus_means_jobs_go_to_their_partition_at_once(decider):
    """Until 2 December 2026 they waited 2 x Tprof (room_wait_s: 2 h with the shipped long_tprof_s)
    for room that could not come; a review saw every job of an idle, powered-down cluster wait so.
    Powered-down nodes now count as usable (NodeGPUs.usable); a profiling partition with no usable
    GPU at all (its nodes down, drained or reserved) sends jobs on at once."""
    j = lj(1, 1)
    # after a grace of max(60 s, 3 intervals): nodes that miss a cycle or two send no job on
    assert decider.decide(inp([j], profiling_gpus=0)).release == []
    plan = decider.decide(inp([j], profiling_gpus=0, records={1: rec(j, first_seen=NOW - 60)}))
    assert plan.profile == [] and ids(plan.release) == [1] and "no usable GPU" in plan.release[0][1]
    # with GPUs there, a job that finds no room waits for it (room_wait_s), as before
    plan = decider.decide(inp([lj(2, 1)], profiling_gpus=8, profiling=[lj(3, 8, partition="profiling",
                                                                          state="RUNNING")],
                              records={3: rec(lj(3, 8), profile="admitted", phase="profiling")}))
    assert plan.profile == [] and plan.release == []


# ----- skip reasons -----------------------------------------------------------------------------

@pytest.mark.parametrize("job,cfg,record_kw,needle", [
    (dict(gpus=9), {}, {}, "9 GPUs > Nprof 8"),
    (dict(gpus=0), {}, {}, "asks for no GPU"),
    (dict(requeue=False), {}, {}, "--no-requeue"),
    (dict(comment='please "lucid:noprofile" thanks'), {}, {}, "lucid:noprofile"),
    (dict(user="bob"), {"exempt_users": ["bob"]}, {}, "user bob is exempt"),
    (dict(account="ops"), {"exempt_accounts": ["ops"]}, {}, "account ops is exempt"),
    (dict(), {"exempt_partitions": ["research"]}, {"requested": "research"}, "partition research is exempt"),
    (dict(), {"exempt_partitions": ["research"]}, {"requested": "main,research"}, "is exempt"),
    (dict(nodes=2, gpus=4), {}, {}, "spans several nodes"),
    (dict(array_pending=True), {}, {}, "job array"),
    (dict(), {"enabled": False}, {}, "profiling is off"),
])
def test_skip_reasons_release_without_profiling(tmp_path, job, cfg, record_kw, needle):
    d = LucidDecider(make_cfg(tmp_path, profiler=cfg))
    j = lj(1, **job)
    plan = d.decide(inp([j], records={1: rec(j, **record_kw)}))
    assert plan.profile == []
    assert ids(plan.release) == [1]
    assert needle in plan.release[0][1] and plan.release[0][1].startswith("not profiled: ")


def test_not_skipped_when_nothing_applies(tmp_path):
    d = LucidDecider(make_cfg(tmp_path, profiler={"exempt_users": ["bob"], "exempt_accounts": ["ops"],
                                                  "exempt_partitions": ["research"]}))
    j = lj(1, 8, comment="lucid:profile-me", user="bobby", account="opsx")
    plan = d.decide(inp([j], records={1: rec(j, requested="main,researchers")}))
    assert ids(plan.profile) == [1] and plan.release == []


def test_skipped_jobs_do_not_use_capacity_and_are_ordered(decider):
    big = lj(1, 16)
    small = lj(2, 1)
    plan = decider.decide(inp([big, small], estimate=600.0))
    assert ids(plan.profile) == [2] and ids(plan.release) == [1]
    # a job released this cycle lands with its SiteFactor already planned
    assert set(plan.site_factors) == {1}


# ----- Tprof: requeue, or leave a job that ran far past it -------------------------------------

def prof_job(job_id, ran, gpus=1, state="RUNNING"):
    j = lj(job_id, gpus, partition="profiling", state=state, start_time=NOW - ran)
    return j, rec(j, profile="admitted", phase="profiling")


@pytest.mark.parametrize("ran,expect", [
    (TPROF - 1, None), (TPROF, "requeue"), (TPROF + 60, "requeue"), (TPROF + 61, "abandon"), (10 * TPROF, "abandon"),
])
def test_tprof_requeue_and_abandon(decider, ran, expect):
    # grace = max(60, 3 x interval_s 10) = 60 s
    j, r = prof_job(1, ran)
    plan = decider.decide(inp(profiling=[j], records={1: r}))
    got = "requeue" if plan.requeue else "abandon" if plan.abandon else None
    assert got == expect
    assert not (plan.requeue and plan.abandon)
    if expect == "requeue":
        assert f">= Tprof {TPROF} s" in plan.requeue[0][1]
    if expect == "abandon":
        assert "left to finish there" in plan.abandon[0][1]


@pytest.mark.parametrize("away_s,expect", [(None, "abandon"), (10.0, "requeue"), (60.0, "requeue"), (61.0, "abandon")])
def test_only_a_lucidd_that_was_away_leaves_a_run_far_past_tprof(decider, away_s, expect):
    """Far past Tprof by Slurm's clock, but lucidd cycled 10 s ago (by its monotonic clock): the
    wall clock stepped forward (NTP) or an earlier requeue failed. It was left to finish in
    profiling, holding the GPUs, with a false reason ("lucidd was away")."""
    from dataclasses import replace

    j, r = prof_job(1, TPROF + 3600)
    plan = decider.decide(replace(inp(profiling=[j], records={1: r}), away_s=away_s))
    assert ids(getattr(plan, expect)) == [1]
    if expect == "requeue":
        assert "the clock stepped, an earlier requeue failed" in plan.requeue[0][1]


def test_grace_grows_with_the_interval(tmp_path):
    d = LucidDecider(make_cfg(tmp_path, daemon={"interval_s": 100, "failopen_after_s": 300}))  # grace 300 s
    j, r = prof_job(1, TPROF + 300)
    assert ids(d.decide(inp(profiling=[j], records={1: r})).requeue) == [1]
    j, r = prof_job(1, TPROF + 301)
    assert ids(d.decide(inp(profiling=[j], records={1: r})).abandon) == [1]


@pytest.mark.parametrize("profile", ["requeued", "released", "abandoned"])
def test_jobs_already_handled_are_not_requeued_again(decider, profile):
    j, r = prof_job(1, TPROF * 5)
    r.profile = profile
    plan = decider.decide(inp(profiling=[j], records={1: r}))
    assert plan.requeue == [] and plan.abandon == []


def test_pending_or_unstarted_profiling_jobs_are_not_requeued(decider):
    j, r = prof_job(1, TPROF * 2, state="PENDING")
    k = lj(2, 1, partition="profiling", state="RUNNING", start_time=None)
    plan = decider.decide(inp(profiling=[j, k], records={1: r, 2: rec(k, profile="admitted")}))
    assert plan.requeue == [] and plan.abandon == []


def test_abandoned_jobs_still_hold_profiling_capacity(decider):
    j, r = prof_job(1, TPROF * 5, gpus=8)
    r.profile = "abandoned"
    plan = decider.decide(inp([lj(2, 1)], profiling=[j], records={1: r}))
    assert plan.profile == []  # 8 of 8 profiling GPUs are held by the abandoned job


def test_admitted_jobs_that_never_start_in_profiling_go_to_their_partition_after_2_tprof(decider):
    """An admitted job pending in profiling (no node there has its GPUs free) is withdrawn once it
    waited more than 2 x Tprof since lucidd first saw it, as an inbox job would be; it stops holding
    profiling room and is ordered in its partition in the same cycle."""
    old = lj(1, 8, partition="profiling")
    young = lj(2, 1, partition="profiling")
    started = lj(3, 1, partition="profiling")  # ran once (a requeue not yet seen): not this rule's
    records = {1: rec(old, first_seen=NOW - 2 * TPROF - 1, profile="admitted", phase="profiling"),
               2: rec(young, first_seen=NOW - 2 * TPROF, profile="admitted", phase="profiling"),
               3: rec(started, first_seen=NOW - 10 * TPROF, profile="admitted", phase="profiling")}
    records[3].profile_start = NOW - 9 * TPROF
    new = lj(4, 6)
    plan = decider.decide(inp([new], profiling=[old, young, started], records=records, profiling_gpus=16))
    assert ids(plan.release) == [1]
    assert "admitted to profiling" in reasons(plan.release)[1] and "2 x Tprof" in reasons(plan.release)[1]
    assert 1 in plan.site_factors
    # capacity max(Nprof 8, 3 % of 16): 1 + 1 held, the withdrawn job's 8 freed for the new 6
    assert ids(plan.profile) == [4]
    assert plan.requeue == [] and plan.abandon == []


# ----- SiteFactor: Lucid's order ----------------------------------------------------------------

def waiting_job(job_id, gpus, estimate, submitted=NOW - 600, partition="main"):
    j = lj(job_id, gpus, partition=partition, submit_time=submitted)
    return j, rec(j, estimate=estimate, target=partition, profile="skipped", phase="released")


def decide_waiting(decider, specs, now=NOW):
    jobs, records = [], {}
    for spec in specs:
        j, r = waiting_job(*spec)
        jobs.append(j)
        records[j.job_id] = r
    return decider.decide(inp(waiting=jobs, records=records, now=now)), jobs, records


def values(plan):
    return {jid: v for jid, (v, _, _) in plan.site_factors.items()}


def test_shorter_and_fewer_gpus_rank_higher(decider):
    plan, _, _ = decide_waiting(decider, [(1, 1, 100.0), (2, 4, 100.0), (3, 1, 1000.0), (4, 8, 1000.0),
                                          (5, 1, 200.0)])
    v = values(plan)
    assert v[1] > v[5] > v[2] > v[3] > v[4]
    assert v[1] - v[5] == 1000  # points_per_doubling between sizes 100 and 200
    ranks = {jid: rank for jid, (_, rank, _) in plan.site_factors.items()}
    assert [jid for jid, _ in sorted(ranks.items(), key=lambda t: t[1])] == [1, 5, 2, 3, 4]
    assert "rank 1 in main" in plan.site_factors[1][2] and "SiteFactor" in plan.site_factors[1][2]
    assert plan.estimates == {}  # every job had an estimate


def test_points_per_doubling(tmp_path):
    d = LucidDecider(make_cfg(tmp_path, ordering={"points_per_doubling": 10}))
    plan, _, _ = decide_waiting(d, [(1, 1, 100.0), (2, 1, 400.0)])
    v = values(plan)
    assert v[1] - v[2] == 20


def test_values_stay_in_slurm_range(decider):
    specs = [(1, 1, 1.0, NOW), (2, 100000, 1e8, NOW), (3, 1, 1e-9, NOW), (4, 8, 3600.0, 0),
             (5, 8, 3600.0, EPOCH - 10 ** 9), (6, 1, 60.0, NOW + 86400 * 365 * 50)]
    plan, _, _ = decide_waiting(decider, specs)
    for jid, v in values(plan).items():
        assert isinstance(v, int) and SITE_FACTOR_MIN <= v <= SITE_FACTOR_MAX, (jid, v)


def test_a_starving_job_is_above_every_normal_one(tmp_path):
    starve = 96 * 3600
    decider = LucidDecider(make_cfg(tmp_path, ordering={"starvation_s": starve, "starving_halflife_s": 0}))
    specs = [(1, 64, 1e7, NOW - starve - 1),  # huge and long, but waited past the guard
             (2, 1, 1.0, NOW - starve),  # tiny, exactly at the guard: not starving yet
             (3, 1, 10.0, NOW - 5),
             (4, 32, 1e6, NOW - starve - 7200)]  # starving longer: ahead of job 1
    plan, _, _ = decide_waiting(decider, specs)
    v = values(plan)
    assert v[4] > v[1] > max(v[2], v[3])
    assert "starvation guard" in plan.site_factors[1][2]
    assert [jid for jid, (_, rank, _) in sorted(plan.site_factors.items(), key=lambda t: t[1][1])][:2] == [4, 1]


def test_starving_jobs_oldest_first_with_a_bounded_preference_for_small_ones(decider, tmp_path):
    """Past the 12 h guard, a job's submission counts 1 h later per doubling of estimate x GPUs
    ([ordering] starving_halflife_s, default 3600)."""
    guard = 12 * 3600
    specs = [(1, 8, 3600.0 * 1024, NOW - guard - 5 * 3600),  # ~2^24.8 GPU-s, 5 h older: counts 24.8 h later
             (2, 1, 1.0, NOW - guard - 60),  # 1 GPU-s: counts as submitted when it was
             (3, 8, 3600.0 * 1024, NOW - guard - 30 * 3600),  # 30 h older than job 2: still first
             (4, 1, 10.0, NOW - 5)]  # not starving
    plan, _, _ = decide_waiting(decider, specs)
    v = values(plan)
    assert v[3] > v[2] > v[1] > v[4]
    assert all("starvation guard" in plan.site_factors[j][2] for j in (1, 2, 3))
    late = 3600 * math.log2(8 * 3600.0 * 1024)  # job 1 counts ~24.8 h later
    assert abs((v[2] - v[1]) - (late - 5 * 3600 + 60) / 60) <= 1  # in minutes, as SiteFactor counts them
    # no preference at 0: oldest first
    oldest = LucidDecider(make_cfg(tmp_path, ordering={"starving_halflife_s": 0}))
    v0 = values(decide_waiting(oldest, specs)[0])
    assert v0[3] > v0[1] > v0[2] > v0[4]


def test_a_job_of_several_nodes_starves_sooner(decider):
    """[ordering] starvation_node_cap (4): on 8-GPU nodes a job of k nodes starves after 12 h / min(k, 4);
    nodes of unknown size (no node_gpus for the partition) keep 12 h for every job."""
    h = 3600
    specs = [(1, 32, 1e5, NOW - 3 * h - 60),  # 4 nodes: 3 h
             (2, 64, 1e5, NOW - 3 * h - 60),  # 8 nodes, the cap: 3 h
             (3, 16, 1e5, NOW - 5 * h),  # 2 nodes: 6 h, not yet
             (4, 16, 1e5, NOW - 6 * h - 60),
             (5, 8, 1e5, NOW - 11 * h),  # one node: 12 h
             (6, 24, 1e5, NOW - 4 * h - 60)]  # 3 nodes: 4 h
    jobs, records = [], {}
    for spec in specs:
        j, r = waiting_job(*spec)
        jobs.append(j)
        records[j.job_id] = r
    x = inp(waiting=jobs, records=records)
    x.node_gpus = {"main": 8}
    plan = decider.decide(x)
    starving = {jid for jid, (_, _, why) in plan.site_factors.items() if "starvation guard" in why}
    assert starving == {1, 2, 4, 6}
    assert "> 3 h (starvation_s / 4: a job of several nodes)" in plan.site_factors[1][2]
    assert "> 6 h (starvation_s / 2" in plan.site_factors[4][2]
    recorded = decider.record(x, plan)
    assert recorded["node_gpus"] == {"main": 8}
    assert replay_recorded(recorded)["site_factors"] == {str(k): v for k, (v, _, _) in plan.site_factors.items()}
    x.node_gpus = {}  # unknown: 12 h for every job
    assert not any("starvation guard" in why for _, _, why in decider.decide(x).site_factors.values())


def test_a_wide_job_asking_for_a_list_of_partitions_starves_as_soon_as_in_one(decider):
    """`-p main,research`, 32 GPUs on 8-GPU nodes: 3 h, as with `-p main` (a review: the node size
    was looked up under the whole list, found none, and the job waited the single-node 12 h)."""
    j, r = waiting_job(1, 32, 1e5, NOW - 3 * 3600 - 60, partition="main,research")
    x = inp(waiting=[j], records={1: r})
    x.node_gpus = {"main": 8, "research": 8}
    plan = decider.decide(x)
    assert "> 3 h (starvation_s / 4: a job of several nodes)" in plan.site_factors[1][2], plan.site_factors[1]
    recorded = decider.record(x, plan)
    assert replay_recorded(recorded)["site_factors"] == {"1": plan.site_factors[1][0]}


def test_same_job_same_value_on_two_calls_and_later(decider):
    specs = [(i, 2 ** (i % 4), 60.0 * (i + 1), NOW - 100 * i) for i in range(1, 20)]
    first, _, _ = decide_waiting(decider, specs)
    again, _, _ = decide_waiting(decider, specs)
    later, _, _ = decide_waiting(decider, specs, now=NOW + 6 * 3600)  # still not starving
    assert values(first) == values(again) == values(later)


def test_aging_one_halflife_earlier_equals_half_the_size(aged_decider):
    h = 48 * 3600
    plan, _, _ = decide_waiting(aged_decider, [(1, 2, 1000.0, NOW - h - 10), (2, 1, 1000.0, NOW - 10),
                                          (3, 1, 1000.0, NOW - h - 10)])
    v = values(plan)
    assert abs(v[1] - v[2]) <= 1
    assert v[3] - v[2] == 1000  # waited one half-life longer: one doubling ahead


def test_no_aging(tmp_path):
    d = LucidDecider(make_cfg(tmp_path, ordering={"aging_halflife_s": 0, "starvation_s": 96 * 3600}))
    plan, _, _ = decide_waiting(d, [(1, 1, 1024.0, NOW - 10 ** 5), (2, 1, 1024.0, NOW), (3, 1, 2048.0, NOW - 10 ** 5)])
    v = values(plan)
    assert v[1] == v[2] == 1_000_000_000 - 10_000  # 1000 x log2(1024), whenever it was submitted
    assert v[1] - v[3] == 1000


def test_ranks_are_per_partition(decider):
    plan, _, _ = decide_waiting(decider, [(1, 1, 100.0, NOW, "main"), (2, 1, 50.0, NOW, "research"),
                                          (3, 1, 10.0, NOW, "main"), (4, 1, 500.0, NOW, "research")])
    ranks = {jid: rank for jid, (_, rank, _) in plan.site_factors.items()}
    assert ranks == {3: 1, 1: 2, 2: 1, 4: 2}


def test_a_job_of_a_partition_list_takes_a_rank_in_each_of_its_partitions(decider):
    """squeue shows `-p main,research` pending as "main,research": ranked under that string, the list
    job was 1st among list jobs while a main job it was ahead of was told "rank 1 in main" too."""
    plan, _, _ = decide_waiting(decider, [(1, 1, 100.0, NOW, "main"), (2, 1, 50.0, NOW, "main,research"),
                                          (3, 1, 10.0, NOW, "research"), (4, 1, 500.0, NOW, "main")])
    ranks = {jid: rank for jid, (_, rank, _) in plan.site_factors.items()}
    assert ranks == {3: 1, 2: 1, 1: 2, 4: 3}
    assert plan.site_factors[2][2].startswith("rank 1 in main: ")  # its best place (2nd in research)
    assert plan.site_factors[1][2].startswith("rank 2 in main: ")


def test_order_equals_lucid_policy_pending_key(aged_decider):
    decider = aged_decider
    rng = random.Random(7)
    specs = [(i, rng.choice([1, 1, 2, 4, 8, 16]), float(int(math.exp(rng.uniform(math.log(30), math.log(3e5))))),
              NOW - rng.randint(0, 80 * 3600)) for i in range(1, 61)]
    plan, jobs, records = decide_waiting(decider, specs)
    by_value = sorted(plan.site_factors, key=lambda jid: (-plan.site_factors[jid][0], jid))
    policy = LucidPolicy(decider.policy.config)
    sim_jobs = [live_job(j, records[j.job_id]) for j in jobs]
    by_key = [j.job_id for j in sorted(sim_jobs, key=policy.pending_key)]
    assert by_value == by_key
    assert len(set(values(plan).values())) == len(specs)  # no ties here: the order is Slurm's too


def test_jobs_without_estimate_get_the_fallback_and_it_is_reported(decider):
    j = lj(1, 2, partition="main")
    r = rec(j, estimate=None, target="main", profile="skipped", phase="released")
    plan = decider.decide(inp(waiting=[j], records={1: r}))
    est, src = plan.estimates[1]
    assert est == 3600.0 and src  # [ordering] default_estimate_s with no history and no model
    assert 1 in plan.site_factors


def test_ordering_off(tmp_path):
    d = LucidDecider(make_cfg(tmp_path, ordering={"enabled": False}))
    plan, _, _ = decide_waiting(d, [(1, 1, 100.0)])
    assert plan.site_factors == {} and plan.estimates == {}


SATURATION = ("lead bug (config ranges): orchestrator/live.py site_factor computes 1e9 - points_per_doubling x "
              "(log2(size) + (submitted - EPOCH)/aging_halflife_s) and clips to 2; values inside the accepted "
              "ranges ([ordering] points_per_doubling up to 1e6, aging_halflife_s down to 1) push every job "
              "to the clip, so all SiteFactors are equal and Lucid's order is lost without a warning")


@pytest.mark.parametrize("ordering", [{"aging_halflife_s": 3600, "points_per_doubling": 1_000_000},
                                      {"aging_halflife_s": 1}])
def test_configs_that_would_saturate_site_factor_are_refused(tmp_path, ordering):
    """Was a bug (all SiteFactors clipped to 2): such configs are now refused at start, naming the key."""
    with pytest.raises(ConfigError, match=r"\[ordering\] points_per_doubling"):
        make_cfg(tmp_path, ordering=ordering)


@pytest.mark.parametrize("ordering", [{"aging_halflife_s": 3600, "points_per_doubling": 100},
                                      {"aging_halflife_s": 86400, "points_per_doubling": 10000}])
def test_distinct_jobs_keep_distinct_values_for_every_accepted_config(tmp_path, ordering):
    d = LucidDecider(make_cfg(tmp_path, ordering=ordering))
    plan, _, _ = decide_waiting(d, [(1, 1, 100.0, NOW - 60), (2, 8, 10000.0, NOW - 30)])
    v = values(plan)
    assert v[1] > v[2]


# ----- record / replay --------------------------------------------------------------------------

def test_replay_reproduces_site_factors_and_profile_order(decider):
    inbox = [lj(1, 4), lj(2, 1), lj(3, 2), lj(4, 16), lj(5, 1, requeue=False), lj(6, 1)]
    waiting = [waiting_job(10 + i, g, e, s)[0] for i, (g, e, s) in
               enumerate([(1, 100.0, NOW - 50), (8, 5000.0, NOW - 96 * 3600 - 5), (2, 300.0, NOW - 7200)])]
    records = {j.job_id: rec(j, estimate=600.0 * j.gpus) for j in inbox}
    for j, e in zip(waiting, [100.0, 5000.0, 300.0]):
        records[j.job_id] = rec(j, estimate=e, profile="skipped", phase="released")
    records[6].estimate_s = None  # estimated this cycle: the record carries the plan's estimate
    x = inp(inbox, waiting=waiting, records=records)
    plan = decider.decide(x)
    assert ids(plan.profile) == [2, 6, 3, 1]
    assert set(ids(plan.release)) == {4, 5}
    recorded = json.loads(json.dumps(decider.record(x, plan), default=str))  # as stored in the database
    replayed = replay_recorded(recorded)
    assert replayed["profile"] == ids(plan.profile)
    assert replayed["site_factors"] == {str(k): v for k, (v, _, _) in plan.site_factors.items()}
    assert replayed["site_factors"] == recorded["decisions"]["site_factors"]
    assert set(replayed["site_factors"]) == {"4", "5", "10", "11", "12"}


def test_record_is_json_and_carries_the_config(decider):
    j = lj(1, 1, name='a "b"\nc ✓')
    x = inp([j])
    plan = decider.decide(x)
    recorded = decider.record(x, plan)
    text = json.dumps(recorded)
    back = json.loads(text)
    assert back["inbox"][0]["name"] == 'a "b"\nc ✓'
    assert back["config"] == {"tprof_s": TPROF, "nprof_gpus": 8, "skip_when_free": True, "capacity_gpus": 0,
                              "burst_capacity_gpus": 0, "burst_queue": 10, "max_job_share": 1.0,
                              "lend_idle_gpus": False, "reclaim_lent": False, "keep_lent_while_idle": False,
                              "long_tprof_s": 0, "long_share": 0.06,
                              "room_wait_s": 0, "starvation_s": 12 * 3600, "aging_halflife_s": 0,
                              "starving_halflife_s": 3600, "starvation_node_cap": 4, "points_per_doubling": 1000}
    assert back["now"] == NOW and back["profiling_gpus"] == 32 and back["lendable"] == [0, 0]


@pytest.mark.parametrize("kw,why", [({"priority": 0}, "held"), ({"reason": "JobHeldUser"}, "held"),
                                    ({"dependency": "afterok:12(unfulfilled)"}, "waits for other jobs")])
def test_held_and_dependent_jobs_skip_profiling(decider, kw, why):
    """They could not start in profiling anyway and would only hold its room."""
    j = lj(1, 1, **kw)
    plan = decider.decide(inp([j]))
    assert plan.profile == [] and ids(plan.release) == [1] and why in plan.release[0][1]


@pytest.mark.parametrize("kw,why", [({"priority": 0}, "held by its owner"),
                                    ({"dependency": "afterok:12(unfulfilled)"}, "wait for other jobs")])
def test_a_job_held_after_its_admission_leaves_profiling_at_once(decider, kw, why):
    """Held (or given a dependency) while admitted and not started, a job held profiling room for
    2 x Tprof and then went back with "no node there had its GPUs free" (an admin trial): it now
    goes to its partition at once, its room freed in the same cycle."""
    held = lj(1, 8, partition="profiling", **kw)
    records = {1: rec(held, first_seen=NOW - 30, profile="admitted", phase="profiling")}
    new = lj(2, 8)
    plan = decider.decide(inp([new], profiling=[held], records=records, profiling_gpus=16))
    assert ids(plan.release) == [1] and why in reasons(plan.release)[1]
    assert "GPUs free" not in reasons(plan.release)[1]
    assert ids(plan.profile) == [2]  # capacity 8: the held job's room went to the new one


def test_a_long_run_reaching_long_tprof_is_requeued_not_left_to_finish(tmp_path):
    """A run kept past Tprof as one of the oldest within long_share is requeued at long_tprof_s, on
    the cycle that sees it there (up to the grace later), like a lent run; only a run far past it
    (lucidd was away) is left to finish in profiling."""
    d = LucidDecider(make_cfg(tmp_path, profiler={"long_tprof_s": 1000, "long_share": 0.25}))
    running = {jid: lj(jid, 1, partition="profiling", state="RUNNING", start_time=NOW - ran)
               for jid, ran in ((1, 1000), (2, 1030), (3, 2000))}
    records = {jid: rec(j, profile="admitted", phase="profiling") for jid, j in running.items()}
    plan = d.decide(inp(profiling=list(running.values()), records=records))
    assert sorted(ids(plan.requeue)) == [1, 2] and "Tprof 1000 s" in reasons(plan.requeue)[1]
    assert "kept past Tprof 200 s" in reasons(plan.requeue)[1]  # why it ran past the Tprof it was admitted with
    assert ids(plan.abandon) == [3]


def test_a_long_run_requeued_at_long_tprof_leaves_its_share_to_a_younger_run(tmp_path):
    """long_share 0.25 of 32 GPUs = 8: an 8-GPU run requeued at long_tprof_s this cycle holds no GPU
    past it, so a 4-GPU run reaching Tprof in the same cycle goes on as a long run."""
    d = LucidDecider(make_cfg(tmp_path, profiler={"long_tprof_s": 1000, "long_share": 0.25}))
    running = {1: lj(1, 8, partition="profiling", state="RUNNING", start_time=NOW - 1000),
               2: lj(2, 4, partition="profiling", state="RUNNING", start_time=NOW - TPROF)}
    records = {jid: rec(j, profile="admitted", phase="profiling") for jid, j in running.items()}
    plan = d.decide(inp(profiling=list(running.values()), records=records))
    assert ids(plan.requeue) == [1] and "Tprof 1000 s" in reasons(plan.requeue)[1]


def test_an_estimate_above_the_jobs_time_limit_is_capped_at_it(decider):
    """Slurm ends a job at its TimeLimit: a live estimate above it is capped (at use, not in the
    record: a user may lower the limit later), the reason says so, and both replays of the recorded
    cycle give the same SiteFactors."""
    from orchestrator.slurm_mode import replay_cycle

    jobs, records = [], {}
    for jid, est, limit in [(1, 90000.0, 600), (2, 4000.0, None), (3, 4000.0, 86400), (4, 90000.0, None)]:
        j, r = waiting_job(jid, 8, est)
        j.time_limit_s = limit
        jobs.append(j)
        records[jid] = r
    x = inp(waiting=jobs, records=records)
    plan = decider.decide(x)
    v = values(plan)
    assert v[1] > v[2] == v[3] > v[4]  # 600 s (capped) < 4,000 s (a 1-day limit changes nothing) < 90,000 s
    assert "estimate 600 s, capped at the job's time limit" in plan.site_factors[1][2]
    assert "capped" not in plan.site_factors[2][2] and "capped" not in plan.site_factors[3][2]
    assert records[1].estimate_s == 90000.0  # the record keeps the model's figure
    recorded = json.loads(json.dumps(decider.record(x, plan), default=str))
    assert [d["time_limit_s"] for d in recorded["waiting"]] == [600, None, 86400, None]
    assert replay_recorded(recorded)["site_factors"] == recorded["decisions"]["site_factors"]
    assert replay_cycle(recorded)["site_factors"] == recorded["decisions"]["site_factors"]
    # the user lowers job 4's limit: its value follows at the next cycle
    jobs[3].time_limit_s = 300
    assert values(decider.decide(inp(waiting=jobs, records=records)))[4] > v[1]


def test_an_estimate_made_before_the_history_is_read_is_made_again(decider):
    """The first cycle after a start orders jobs before lucidd has read its history: such an
    estimate is marked "default" and made again at the next cycle, where before it was kept for good
    (identical jobs 7,041 SiteFactor points apart after every restart: the admin trial)."""
    from types import SimpleNamespace

    j, r = waiting_job(1, 1, None)
    plan = decider.decide(inp(waiting=[j], records={1: r}))
    est, src = plan.estimates[1]
    assert src == "default"
    r.estimate_s, r.estimate_source = est, src
    hist = [SimpleNamespace(job_id=100 + k, submit_time=NOW - 5000, duration=40, gpus=1, user="alice",
                            partition="main", name="x") for k in range(5)]
    decider.estimator.set_history(hist)
    plan = decider.decide(inp(waiting=[j], records={1: r}))
    est2, src2 = plan.estimates[1]
    assert src2.startswith("fallback:") and est2 == 40.0
