"""Lucid as lucidd runs it on Slurm (orchestrator/slurm_mode.py): hand-made scenarios pin the timing of
lucidd's cycle (inbox wait, profiling cap, Tprof requeue, restart from zero after a gap, short jobs ending
in profiling, starvation re-key) and Slurm's side (SiteFactor order with backfill); a recorded live cycle
gives the same decisions in the simulator."""

import json
import math

import pandas as pd
import pytest

from lucidd.backends.base import LiveJob
from lucidd.cluster import ClusterSpec, VCSpec
from lucidd.live.config import config_from_dict
from lucidd.live.reconcile import DecisionInput
from lucidd.live.store import JobRow
from lucidd.policies.slurm_backfill import SlurmBackfill, SlurmConfig, parse_limit_rule
from lucidd.simulator import jobs_from_frame
from orchestrator.live import EPOCH, LucidDecider, replay_recorded
from orchestrator.slurm_mode import LIVE_OPTIONS, LucidOnSlurm, live_config, options_from_config, replay_cycle

H = 3600


def replay(rows, nodes=1, gpn=8, vcs=None, rule="exact", **opts):
    """rows: (job_id, gpus, submit, duration, estimate[, vc]); returns the jobs frame by job_id and stats."""
    df = pd.DataFrame([r[:4] for r in rows], columns=["job_id", "gpu_num", "submit_time", "duration"])
    df["vc"] = [r[5] if len(r) > 5 else "a" for r in rows]
    df["seq"] = range(len(df))
    jobs = jobs_from_frame(df)
    est = {r[0]: r[4] for r in rows}
    for j in jobs:
        j.estimate = float(est[j.job_id])
    spec = ClusterSpec({v: VCSpec(v, n, gpn) for v, n in (vcs or {"a": nodes}).items()})
    gate = bool(opts.pop("prof_gate", False))
    opts.setdefault("tprof", 200)  # these cases are written for a Tprof of 200 s
    opts.setdefault("prof_lend", 0)  # ... and for the capacity alone, one Tprof for every run (lending and
    opts.setdefault("prof_long_tprof", 0)  # long runs have their own cases)
    live = live_config(opts)

    def make(priority):
        return SlurmBackfill(SlurmConfig(limit_rule=parse_limit_rule(rule)), priority=priority)

    sim = LucidOnSlurm(jobs, spec, live, make, prof_gate=gate)
    stats = sim.run()
    frame = pd.DataFrame({"job_id": [j.job_id for j in jobs], "start": [j.start_time for j in jobs],
                          "end": [j.end_time for j in jobs], "queue": [j.queue for j in jobs],
                          "submit": [j.submit_time for j in jobs]}).set_index("job_id")
    for key in ("profiled", "profiler_finished", "profiler_start", "profiler_end", "site_factor", "decision",
                "profile_reason", "profiler_node"):
        frame[key] = [j.attrs.get(key) for j in jobs]
    frame["main_start"] = [j.attrs.get("_main_start") for j in jobs]
    return frame, stats


# ----- Slurm's side: SiteFactor order, backfill by time limits --------------------------------------

def test_site_factor_order_with_backfill():
    # The blocker runs from the first cycle (10) on 6 of 8 GPUs until 1010. Seen at 20 (profiling off, so
    # only the order acts): big (8 GPUs, estimate 100 s: 800 GPU-s) ranks first, then short (2 GPUs,
    # estimate 1000 s: 2,000 GPU-s), then long (2 GPUs, 5,000 s). big cannot start and holds a reservation
    # at 1010; short ends by its limit (300 s) before it: backfilled at 20. long fits the 2 free GPUs but
    # would hold them past 1010: it waits, and never starts ahead of big.
    rows = [("blocker", 6, 1, 1000, 1000), ("big", 8, 11, 100, 100), ("short", 2, 12, 300, 1000),
            ("long", 2, 13, 5000, 5000)]
    r, _ = replay(rows, profiling=False)
    assert r.loc["blocker", "start"] == 10  # lucidd's first cycle after the submission
    assert r.loc["short", "start"] == 20 and "backfilled" in r.loc["short", "decision"]
    assert r.loc["big", "start"] == 1010
    assert r.loc["long", "start"] == 1110  # after big
    assert r.loc["big", "site_factor"] > r.loc["short", "site_factor"] > r.loc["long", "site_factor"]
    assert "priority order" in r.loc["big", "decision"] and "queue rank 1" in r.loc["big", "decision"]
    assert r.loc["big", "queue"] == 1010 - 11


def test_same_order_as_the_slurm_baseline_when_site_factors_follow_age():
    # With equal estimate x GPUs and no aging, SiteFactor ties and Slurm breaks ties by submission: jobs
    # submitted on the cycle grid then start exactly where the slurm baseline starts them (j2 holds a
    # reservation from 800; j4 ends by then and is backfilled at 500, j3 would not be).
    rows = [(f"j{i}", g, t, d, 800 / g) for i, (g, t, d) in enumerate([(8, 0, 500), (4, 10, 300), (8, 20, 50),
                                                                        (4, 30, 900), (4, 40, 100)])]
    r, _ = replay(rows, profiling=False, aging_halflife_s=0)
    assert list(r["start"]) == [0, 500, 800, 850, 500]
    from lucidd.simulator import simulate

    df = pd.DataFrame([r[:4] for r in rows], columns=["job_id", "gpu_num", "submit_time", "duration"])
    df["vc"], df["seq"] = "a", range(len(df))
    base = simulate(jobs_from_frame(df), ClusterSpec({"a": VCSpec("a", 1, 8)}),
                    lambda vc: SlurmBackfill(SlurmConfig(limit_rule=parse_limit_rule("exact")))).jobs
    assert list(base["start_time"]) == list(r["start"])


# ----- lucidd's side: inbox, profiling cap, requeue, restart gap --------------------------------------

def test_requeue_restarts_from_zero_after_the_gap():
    # Seen at the cycle at 10, profiled from 10, requeued at 210 (ran Tprof), moved to its partition at the
    # next cycle (220) and running 1 s later: it restarts from zero and ends at 221 + 1000.
    r, stats = replay([("a", 1, 3, 1000, 500)])
    row = r.loc["a"]
    assert row["profiled"] and not row["profiler_finished"]
    assert (row["profiler_start"], row["profiler_end"]) == (10, 210)
    assert row["main_start"] == 221 and row["end"] == 1221
    assert row["queue"] == (10 - 3) + (221 - 210)  # inbox wait + the gap; the lost 200 s count as JCT
    assert stats.requeued == 1 and stats.lost_gpu_s == 200


def test_a_run_that_starts_at_the_traces_time_zero_is_requeued_at_tprof_too():
    # A trace with no wall-clock origin replays on clock 0: a job submitted at 0 starts profiling at
    # the cycle at 0, and its start, 0, once read as "not started", kept it in profiling to its end.
    r, stats = replay([("a", 1, 0, 5000, 5000)])
    row = r.loc["a"]
    assert (row["profiler_start"], row["profiler_end"]) == (0, 200) and not row["profiler_finished"]
    assert row["main_start"] == 211 and stats.requeued == 1


def test_short_jobs_finish_in_profiling():
    r, stats = replay([("s", 2, 3, 150, 900), ("edge", 1, 5, 200, 900)])
    assert r.loc["s", "profiler_finished"] and r.loc["s", "end"] == 160 and r.loc["s", "queue"] == 7
    assert r.loc["s", "decision"].startswith("finished inside the profiler")
    # ends at 210, the cycle that would requeue it: the end comes first
    assert r.loc["edge", "profiler_finished"] and r.loc["edge", "end"] == 210
    assert stats.finished_in_profiler == 2 and stats.requeued == 0


def test_profiling_capacity_least_gpus_first_and_the_2x_tprof_rule():
    # capacity 2 GPUs: at 10, the two 1-GPU jobs (least GPUs first) are admitted; the 2-GPU job waits.
    # Both are requeued at 210; the cycle at 220 no longer counts them: the 2-GPU job is admitted then.
    rows = [("two", 2, 1, 5000, 100), ("one_a", 1, 2, 5000, 100), ("one_b", 1, 3, 5000, 100)]
    r, _ = replay(rows, nodes=2, prof_capacity_gpus=2)
    assert r.loc["one_a", "profiler_start"] == 10 and r.loc["one_b", "profiler_start"] == 10
    assert r.loc["two", "profiler_start"] == 220
    # with Tprof 300 the room frees at 320 (> 2 x Tprof is 600 s: still profiled) ...
    r, _ = replay(rows, nodes=2, prof_capacity_gpus=2, tprof=300)
    assert r.loc["two", "profiler_start"] == 320
    # ... and an admitted job that cannot start (the cluster is full) holds the room: the next job waits
    # past 2 x Tprof (first seen at 20, released at 430, the first cycle with a wait > 400 s) and goes to
    # its partition unprofiled. The admitted job, pending in profiling as long, is withdrawn to its
    # partition in the same cycle (it would otherwise wait there until 5010, holding the room); both
    # start in their partition when the cluster frees.
    rows = [("fill", 8, 1, 5000, 5000), ("hog", 2, 11, 5000, 100), ("two", 2, 12, 5000, 100)]
    r, stats = replay(rows, nodes=1, prof_capacity_gpus=2, nprof=2)
    assert not r.loc["fill", "profiled"] and not r.loc["hog", "profiled"] and not r.loc["two", "profiled"]
    assert r.loc["two", "profile_reason"] == "not profiled: waited 410 s for profiling room (> 2 x Tprof)"
    assert r.loc["hog", "profile_reason"] == ("not profiled: waited 410 s, admitted to profiling but no node "
                                              "there had its GPUs free (> 2 x Tprof)")
    assert stats.released_after_wait == 1 and stats.withdrawn_from_profiling == 1 and stats.profiled == 1
    assert r.loc["hog", "profiler_start"] is None and r.loc["hog", "main_start"] == 5010
    assert r.loc["two", "main_start"] == 5010
    assert stats.max_profiling_wait_s == 0  # nothing started in profiling


def test_profiling_runs_anywhere_and_first():
    # The profiling partition spans every node (PriorityTier=2): a job of VC a, full, is profiled on VC b's
    # node, and it takes that GPU before b's own queued job can.
    rows = [("fill", 8, 0, 10_000, 10_000, "a"), ("p", 1, 15, 5000, 100, "a"), ("bjob", 8, 15, 300, 300, "b")]
    r, _ = replay(rows, vcs={"a": 1, "b": 1}, nprof=1)
    assert r.loc["p", "profiler_start"] == 20 and r.loc["p", "profiled"]
    assert r.loc["bjob", "main_start"] == 220  # b's only node had 7 free GPUs until p was requeued
    assert r.loc["p", "main_start"] == 10_000  # back in a, which fill holds from 0 to 10,000


def test_profiling_off_is_cprof_zero_and_nprof_skips_big_jobs():
    rows = [("big", 16, 0, 500, 500), ("small", 1, 0, 500, 500)]
    r, _ = replay(rows, nodes=2)
    assert not r.loc["big", "profiled"] and "Nprof 8" in r.loc["big", "profile_reason"]
    assert r.loc["small", "profiled"]
    r, stats = replay(rows, nodes=2, cprof=0)
    assert not r["profiled"].any() and stats.profiled == 0
    assert r.loc["small", "profile_reason"] == "not profiled: profiling is off ([profiler] enabled = false)"


# ----- starvation: the SiteFactor's one later change -------------------------------------------------

def test_starvation_rekey_puts_the_starving_job_first():
    # big (8 GPUs, long estimate) ranks below a stream of 4-GPU jobs that keeps one of the two halves busy
    # at any time; starvation_s = 1000. Submitted at 15, it starves when its wait passes 1000 s: the cycle
    # at 1020 writes its starving SiteFactor, and from then on Slurm holds GPUs for it (backfill by time
    # limits) instead of starting the small jobs: it starts once the two running ones end.
    rows = [("big", 8, 15, 100, 10_000)] + [(f"s{i}", 4, 5 + 200 * i, 400, 10) for i in range(30)]
    r, stats = replay(rows, profiling=False, starvation_s=1000, aging_halflife_s=0)
    assert stats.rekeys == 1
    assert r.loc["big", "decision"].startswith("starvation guard")
    assert r.loc["big", "site_factor"] > 2 * 10 ** 9 - 10 ** 8
    assert 1020 <= r.loc["big", "main_start"] <= 1020 + 400
    r2, _ = replay(rows, profiling=False, starvation_s=10 ** 8, aging_halflife_s=0)
    assert r2.loc["big", "main_start"] > r.loc["big", "main_start"] + 1000  # without the guard it waits on


def test_a_job_of_two_nodes_starves_after_half_the_wait():
    # [ordering] starvation_node_cap: wide needs both 8-GPU nodes, so with starvation_s = 2000 and a
    # cap of 2 it starves after 1000 s (the cycle at 1020 writes it), as `big` above does after 1000;
    # with the cap at 1 it waits the whole 2000 s first.
    rows = [("wide", 16, 15, 100, 10_000)] + [(f"s{i}", 4, 5 + 200 * i, 400, 10) for i in range(30)]
    r, stats = replay(rows, nodes=2, profiling=False, starvation_s=2000, aging_halflife_s=0, starvation_node_cap=2)
    assert stats.rekeys == 1 and r.loc["wide", "decision"].startswith("starvation guard")
    assert 1020 <= r.loc["wide", "main_start"] <= 1020 + 400
    r1, _ = replay(rows, nodes=2, profiling=False, starvation_s=2000, aging_halflife_s=0, starvation_node_cap=1)
    assert 2020 <= r1.loc["wide", "main_start"] <= 2020 + 400
    # a job of one node keeps the whole wait, whatever the cap (on one node, as `big` above)
    one = [("big", 8, 15, 100, 10_000)] + [(f"s{i}", 4, 5 + 200 * i, 400, 10) for i in range(30)]
    r8, _ = replay(one, nodes=1, profiling=False, starvation_s=2000, aging_halflife_s=0, starvation_node_cap=4)
    assert 2020 <= r8.loc["big", "main_start"] <= 2020 + 400


# ----- one decision path with the daemon --------------------------------------------------------------

NOW = EPOCH + 300 * 86400


def _lj(job_id, gpus=1, partition="inbox", state="PENDING", **kw):
    return LiveJob(job_id=job_id, name=f"job{job_id}", user="alice", account="lab", partition=partition,
                   state=state, gpus=gpus, submit_time=kw.pop("submit_time", NOW - 10), **kw)


def _rec(j, estimate, target="main", profile="pending", phase="inbox", first_seen=NOW - 5):
    return JobRow(job_id=j.job_id, first_seen=first_seen, original_submit=j.submit_time, requested_partition=None,
                  target_partition=target, name=j.name, user=j.user, account=j.account, gpus=j.gpus, phase=phase,
                  profile=profile, profile_reason="", estimate_s=estimate, estimate_source="test",
                  restarts=j.restart_count)


def test_lent_profiling_runs_on_gpus_nobody_waits_for():
    # a (1 node) holds fill (6 GPUs) and big waits there (8 GPUs > Nprof 4: never profiled); b (1 node)
    # is idle. p (a, 1 GPU) is profiled: lent, it runs on b's node; with the capacity alone (anywhere,
    # best fit) it takes one of a's 2 free GPUs.
    rows = [("fill", 6, 0, 10_000, 10_000, "a"), ("big", 8, 15, 100, 100, "a"), ("p", 1, 25, 150, 150, "a")]
    r, _ = replay(rows, vcs={"a": 1, "b": 1}, nprof=4, prof_lend=1)
    assert r.loc["p", "profiled"] and r.loc["p", "profiler_finished"]
    assert r.loc["p", "profiler_node"] == "b:0"
    r0, _ = replay(rows, vcs={"a": 1, "b": 1}, nprof=4, prof_lend=0)
    assert r0.loc["p", "profiler_finished"] and r0.loc["p", "profiler_node"] == "a:0"


def test_gpus_become_lendable_when_a_partitions_last_waiting_job_starts():
    # Live, lucidd sees every 10 s whether a partition still has a queue; the replay must cycle when
    # one empties. q fills the capacity (1 GPU) on b's last GPU while bwait waits in b; p waits in
    # the inbox. At 1000 bfill ends, Slurm starts bwait, b has nobody waiting: p is lent b's free
    # GPUs at the next cycle (1010), not at the next cycle some other event would cause.
    rows = [("afill", 8, 0, 100_000, 100_000, "a"), ("bfill", 7, 0, 1000, 1000, "b"),
            ("bwait", 4, 1, 500, 500, "b"), ("abig", 8, 1, 100, 100, "a"), ("q", 1, 15, 50_000, 50_000, "a"),
            ("p", 1, 25, 150, 150, "a")]
    r, _ = replay(rows, vcs={"a": 1, "b": 1}, nprof=1, tprof=5000, prof_lend=1)
    assert r.loc["q", "profiler_start"] == 20 and r.loc["q", "profiler_node"] == "b:0"  # within the capacity
    assert r.loc["bwait", "main_start"] == 1000
    assert r.loc["p", "profiler_start"] == 1010 and r.loc["p", "profiler_node"] == "b:0"
    assert r.loc["p", "profiler_finished"]


def test_a_lent_run_is_reclaimed_when_its_partition_gets_a_queue():
    # [profiler] reclaim_lent (off by default)
    # p (a, 1 GPU, 5,000 s) is lent b's node at 30; at 95 bjob (b, 8 GPUs) arrives: seen at 100, it
    # goes to b and waits (p holds a GPU there). b now has a queue: lucidd requeues p at 110, bjob starts.
    rows = [("fill", 6, 0, 10_000, 10_000, "a"), ("big", 8, 15, 100, 100, "a"), ("p", 1, 25, 5000, 5000, "a"),
            ("bjob", 8, 95, 300, 300, "b")]
    r, _ = replay(rows, vcs={"a": 1, "b": 1}, nprof=4, prof_lend=1, prof_reclaim=1)
    assert r.loc["p", "profiler_node"] == "b:0" and r.loc["p", "profiler_end"] == 110
    assert r.loc["bjob", "main_start"] == 110  # the requeue frees the GPU; Slurm starts bjob at once
    r0, _ = replay(rows, vcs={"a": 1, "b": 1}, nprof=4, prof_lend=1, prof_reclaim=0)
    assert r0.loc["p", "profiler_end"] == 230  # Tprof


def test_a_lent_run_is_kept_until_a_job_of_its_partition_has_waited_long_tprof_s():
    # [profiler] keep_lent_while_idle (off by default), long_tprof_s 1000: p (a, 1 GPU, 5,000 s) is
    # lent b's node at 30; at 1030 it reaches its Tprof with nobody waiting in b and runs on. bjob (b,
    # 8 GPUs) arrives at 2995, goes to b at the cycle of 3000 and waits; once it has waited 1000 s since
    # its submission (3995) lucidd reclaims p at its next cycle (4000), and bjob starts.
    rows = [("fill", 6, 0, 10_000, 10_000, "a"), ("big", 8, 15, 100, 100, "a"), ("p", 1, 25, 5000, 5000, "a"),
            ("bjob", 8, 2995, 300, 300, "b")]
    r, _ = replay(rows, vcs={"a": 1, "b": 1}, nprof=4, prof_lend=1, prof_long_tprof=1000, prof_keep_lent=1)
    assert r.loc["p", "profiler_node"] == "b:0" and r.loc["p", "profiler_end"] == 4000
    assert not r.loc["p", "profiler_finished"] and r.loc["bjob", "main_start"] == 4000
    # nobody comes to b: p ends where it is, in profiling, after its whole 5,000 s
    r1, _ = replay(rows[:3], vcs={"a": 1, "b": 1}, nprof=4, prof_lend=1, prof_long_tprof=1000, prof_keep_lent=1)
    assert r1.loc["p", "profiler_finished"] and r1.loc["p", "profiler_end"] == r1.loc["p", "profiler_start"] + 5000
    # off: requeued at its Tprof (1030)
    r0, _ = replay(rows, vcs={"a": 1, "b": 1}, nprof=4, prof_lend=1, prof_long_tprof=1000)
    assert r0.loc["p", "profiler_end"] == 1030


def test_long_runs_in_the_replay():
    # long_tprof_s 1000: a lent run of 800 s ends in profiling; with the default it is requeued at Tprof
    rows = [("fill", 6, 0, 10_000, 10_000, "a"), ("big", 8, 15, 100, 100, "a"), ("p", 1, 25, 800, 800, "a")]
    r, _ = replay(rows, vcs={"a": 1, "b": 1}, nprof=4, prof_lend=1, prof_long_tprof=1000)
    assert r.loc["p", "profiler_finished"] and r.loc["p", "end"] == 30 + 800
    r, _ = replay(rows, vcs={"a": 1, "b": 1}, nprof=4, prof_lend=1)
    assert not r.loc["p", "profiler_finished"] and r.loc["p", "profiler_end"] == 30 + 200


def test_a_recorded_live_cycle_gives_the_same_decisions_in_the_simulator(tmp_path):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)},
                            "profiler": {"tprof_s": 200, "capacity_gpus": 6, "max_job_share": 0.5,
                                         "long_tprof_s": 0}})
    decider = LucidDecider(cfg)
    inbox = [_lj(1, 4), _lj(2, 1), _lj(3, 2), _lj(4, 16), _lj(5, 1, requeue=False), _lj(6, 1), _lj(7, 2)]
    running = _lj(20, 1, partition="profiling", state="RUNNING", start_time=NOW - 250)
    waiting = [_lj(10, 1, partition="main", submit_time=NOW - 50),
               _lj(11, 8, partition="main", submit_time=NOW - 96 * H - 5),
               _lj(12, 2, partition="research", submit_time=NOW - 7200)]
    records = {j.job_id: _rec(j, 600.0 * j.gpus) for j in inbox}
    records[7] = _rec(inbox[6], 600.0, first_seen=NOW - 2 * 200 - 1)  # waited past 2 x Tprof
    records[20] = _rec(running, 900.0, profile="admitted", phase="profiling")
    for j, e in zip(waiting, (100.0, 5000.0, 300.0)):
        records[j.job_id] = _rec(j, e, target=j.partition, profile="skipped", phase="released")
    idle = _lj(8, 1)  # its partition has nobody waiting and a node with 8 free GPUs: it would start at once
    inbox.append(idle)
    records[8] = _rec(idle, 600.0, target="idle")
    # admitted, pending in profiling past 2 x Tprof: withdrawn (30); the same, but it ran there once
    # (its requeue not yet seen): kept (31)
    stuck, ran = _lj(30, 1, partition="profiling"), _lj(31, 1, partition="profiling")
    records[30] = _rec(stuck, 600.0, first_seen=NOW - 2 * 200 - 1, profile="admitted", phase="profiling")
    records[31] = _rec(ran, 600.0, first_seen=NOW - 2 * 200 - 1, profile="admitted", phase="profiling")
    records[31].profile_start = NOW - 300
    x = DecisionInput(NOW, inbox, [running, stuck, ran], waiting, records, 32, {"main": 2, "research": 1},
                      {"main": 1, "research": 8, "idle": 8})
    plan = decider.decide(x)
    recorded = json.loads(json.dumps(decider.record(x, plan), default=str))  # as the database keeps it

    sim = replay_cycle(recorded)
    # 1 (31, still holding its GPU) + 1 + 1 + 1 + 2 = 6 of 6 GPUs
    assert sim["profile"] == [jid for jid, _ in plan.profile] == [2, 6, 3]
    # 1 (4 GPUs) is wider than half the capacity of 6 ([profiler] max_job_share 0.5), as the replay
    # knows from the recorded capacity and share
    assert sim["release"] == sorted(jid for jid, _ in plan.release) == [1, 4, 5, 7, 8, 30]
    assert sim["requeue"] == [jid for jid, _ in plan.requeue] == [20]
    assert sim["site_factors"] == {str(k): v for k, (v, _, _) in plan.site_factors.items()}
    assert sim["site_factors"] == recorded["decisions"]["site_factors"]
    assert sim["site_factors"] == replay_recorded(recorded)["site_factors"]
    assert sim["site_factors"]["11"] > 2 * 10 ** 9 - 10 ** 8  # starving: in front


def test_every_replay_option_is_a_config_key_and_round_trips(tmp_path):
    """LIVE_OPTIONS is the one map between replay options and lucidd's config: a config with every
    such key off its default gives back the same config through the options, and a compression
    scales exactly the durations."""
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 2.0},
                            "profiler": {"tprof_s": 300, "nprof_gpus": 4, "capacity_gpus": 12, "burst_capacity_gpus": 20,
                                         "burst_queue": 7, "max_job_share": 0.5, "skip_when_free": False,
                                         "lend_idle_gpus": False, "long_tprof_s": 900, "long_share": 0.1,
                                         "reclaim_lent": True, "keep_lent_while_idle": True, "room_wait_s": 1000},
                            "ordering": {"starvation_s": 7200, "aging_halflife_s": 3600, "starving_halflife_s": 600,
                                         "starvation_node_cap": 2,
                                         "points_per_doubling": 9}})
    default = config_from_dict({"daemon": {"state_dir": str(tmp_path)}})
    for opt, (section, key, _, _) in LIVE_OPTIONS.items():
        assert getattr(getattr(cfg, section), key) != getattr(getattr(default, section), key), opt
    # every other key of the two sections is one a replay has no use for: exemptions name users,
    # accounts and partitions a trace does not have; profiling off is the option `profiling`; the
    # simulator's estimates come from its own duration model, with ordering always on
    have = {(section, key) for section, key, _, _ in LIVE_OPTIONS.values()}
    rest = {(sec, k) for sec in ("profiler", "ordering") for k in vars(getattr(default, sec)) if not k.startswith("_")}
    assert rest - have == {("profiler", "enabled"), ("profiler", "exempt_users"), ("profiler", "exempt_accounts"),
                           ("profiler", "exempt_partitions"), ("ordering", "enabled"),
                           ("ordering", "default_estimate_s")}
    back = live_config(options_from_config(cfg))
    for opt, (section, key, _, _) in LIVE_OPTIONS.items():
        assert getattr(getattr(back, section), key) == getattr(getattr(cfg, section), key), opt
    assert back.daemon.interval_s == 2.0
    scaled = options_from_config(cfg, 60)
    for opt, (section, key, _, duration) in LIVE_OPTIONS.items():
        v = getattr(getattr(cfg, section), key)
        assert scaled[opt] == (v * 60 if duration else v), opt
    assert scaled["interval_s"] == 120.0


def test_a_recorded_cycle_with_lending_and_long_runs_replays_the_same(tmp_path):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)},
                            "profiler": {"tprof_s": 200, "long_tprof_s": 1000, "long_share": 0.25,
                                         "lend_idle_gpus": True, "room_wait_s": 500}})
    decider = LucidDecider(cfg)
    inbox = [_lj(1, 4), _lj(2, 1), _lj(3, 8), _lj(4, 2), _lj(5, 1)]
    running = [_lj(20, 4, partition="profiling", state="RUNNING", start_time=NOW - 900),
               _lj(21, 8, partition="profiling", state="RUNNING", start_time=NOW - 230),
               _lj(22, 1, partition="profiling", state="RUNNING", start_time=NOW - 600)]
    records = {j.job_id: _rec(j, 600.0 * j.gpus) for j in inbox}
    for j in running:
        records[j.job_id] = _rec(j, 900.0, profile="admitted", phase="profiling")
    records[22].lent = True
    records[5].first_seen = NOW - 600  # waited past room_wait_s (500 s; the default would be 2,000 s)
    # 16 GPUs on nodes nobody waits for, at most 4 free on one
    x = DecisionInput(NOW, inbox, running, [], records, 32, {"main": 3}, {"main": 0}, 16, 4)
    plan = decider.decide(x)
    recorded = json.loads(json.dumps(decider.record(x, plan), default=str))
    sim = replay_cycle(recorded)
    # long runs: 20 (4 GPUs, oldest) fits the 8 of long_share; 21 (8 GPUs) does not: requeued; 22 is lent
    assert sim["requeue"] == sorted(jid for jid, _ in plan.requeue) == [21]
    # held: 4 + 8 + 1 = 13 > capacity 8: only lent admissions, those that fit on 4 GPUs, up to 8 + 16
    assert sim["profile"] == [jid for jid, _ in plan.profile] == [2, 4, 1]
    assert sim["lend"] == plan.lend == [2, 4, 1]
    assert 5 in sim["release"] and 5 in [jid for jid, _ in plan.release]


def test_a_recorded_cycle_that_withdraws_jobs_for_their_reason_replays_the_same(tmp_path):
    """A review (2 December 2026): the record lacked a job's pending reason, priority and
    dependency, so a replay kept the room of a job the daemon withdrew (at its QOS limit, held) and
    admitted nobody in its place."""
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)},
                            "profiler": {"capacity_gpus": 2, "skip_when_free": False, "lend_idle_gpus": False}})
    decider = LucidDecider(cfg)
    limited = _lj(1, 1, partition="profiling", reason="QOSMaxGRESPerUser")
    held = _lj(2, 1, partition="profiling", priority=0, reason="JobHeldUser")
    inbox = [_lj(3, 1), _lj(4, 1)]
    records = {j.job_id: _rec(j, 600.0) for j in inbox}
    for j in (limited, held):
        records[j.job_id] = _rec(j, 600.0, profile="admitted", phase="profiling")
    x = DecisionInput(NOW, inbox, [limited, held], [], records, 32)
    plan = decider.decide(x)
    assert sorted(jid for jid, _ in plan.release) == [1, 2] and [jid for jid, _ in plan.profile] == [3, 4]
    recorded = json.loads(json.dumps(decider.record(x, plan), default=str))
    sim = replay_cycle(recorded)
    assert sim["release"] == [1, 2] and sim["profile"] == [3, 4]


# ----- through the experiment path ---------------------------------------------------------------------

def test_policy_names_and_variants_on_the_sample():
    from lucidd.experiment import known_policies, make_experiment
    from lucidd.metrics import summarize
    from lucidd.traces import load_trace, sample_trace_path, sample_vc_config_path

    names = known_policies()
    for n in ("lucid", "lucid-noprofiler", "lucid-nopacking", "lucid-oracle", "lucid-standalone",
              "lucid-standalone-noprofiler", "lucid-standalone-nopacking", "lucid-standalone-oracle"):
        assert n in names
    exp = make_experiment(load_trace(sample_trace_path(), end=2 * 86400), vc_config=sample_vc_config_path())
    runs = {p: exp.run(p) for p in ("lucid", "lucid-nopacking", "lucid-noprofiler")}
    lucid = runs["lucid"].jobs
    pd.testing.assert_frame_equal(lucid, runs["lucid-nopacking"].jobs)  # no packing live: the same run
    assert not lucid["shared"].any() and lucid["end_time"].notna().all()
    assert (lucid["jct_s"] >= lucid["duration"]).all() and (lucid["queue_s"] >= 0).all()
    assert lucid["profiled"].any() and lucid["profiler_finished"].any()
    assert not runs["lucid-noprofiler"].jobs["profiled"].any()
    s = summarize("lucid", lucid, runs["lucid"].series, runs["lucid"].total_gpus)
    assert 0 < s["gpu_util"] <= 1
    exp.options["cprof"] = 0  # the tuner's "no profiler" reaches this mode too
    pd.testing.assert_frame_equal(exp.run("lucid-noprofiler").jobs.drop(columns="profile_reason"),
                                  exp.run("lucid").jobs.drop(columns="profile_reason"))


def test_jobs_csv_keeps_the_lucid_columns(tmp_path):
    from lucidd.cli import main

    out = tmp_path / "o"
    assert main(["simulate", "--policies", "lucid", "--end", str(86400), "--out", str(out), "--no-progress",
                 "--no-plots"]) == 0
    cols = set(pd.read_csv(out / "jobs_lucid.csv").columns)
    assert {"job_id", "vc", "user", "gpu_num", "submit_time", "duration", "start_time", "end_time", "queue_s",
            "preemptions", "shared", "shared_s", "estimate_s", "jct_s", "decision", "packed_with", "profiled",
            "profiler_finished", "profiler_start", "profiler_end", "share_score", "site_factor"} <= cols
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.columns[:12]) == ["policy", "jobs", "avg_jct_s", "avg_queue_s", "p999_queue_s",
                                          "p50_jct_s", "p99_jct_s", "makespan_s", "preemptions",
                                          "profiler_finished", "packed_jobs", "gpu_util"]


def test_queue_gate_profiles_only_where_someone_waits():
    # prof_gate (off unless asked, in the daemon too): a job whose partition has nobody pending is not profiled
    # (it would start at once); once jobs wait there, profiling resumes.
    rows = [("first", 1, 1, 500, 500), ("fill", 8, 2, 5000, 5000), ("later", 1, 15, 500, 500)]
    r, stats = replay(rows, nodes=1, nprof=1, prof_gate=True)
    assert not r.loc["first", "profiled"] and "nobody waits in a" in r.loc["first", "profile_reason"]
    assert r.loc["first", "main_start"] == 10
    # at 20 'fill' (8 GPUs, never profiled: Nprof 1) waits for the node 'first' holds: 'later' is profiled,
    # ahead of it (PriorityTier=2), on the 7 free GPUs
    assert r.loc["later", "profiled"] and r.loc["later", "profiler_start"] == 20
    r, _ = replay(rows, nodes=1, nprof=1)
    assert r.loc["first", "profiled"]  # without the gate every eligible job is profiled


@pytest.mark.parametrize("seed", range(5))
def test_without_profiling_and_order_it_is_the_slurm_baseline(seed):
    # Profiling off and [ordering] off (every SiteFactor 0, ties by submission): on jobs submitted on the
    # reconcile grid (no inbox wait) the replay must start every job where the slurm baseline does.
    import random

    from lucidd.simulator import simulate

    rng = random.Random(seed)
    vcs = {"a": rng.choice([1, 2, 3]), "b": rng.choice([1, 2])}
    rows = []
    for i in range(150):
        vc = rng.choice("ab")
        g = rng.choice([g for g in (1, 2, 4, 8, 16) if g <= vcs[vc] * 8])
        rows.append((f"j{i}", g, 10 * rng.randrange(0, 600), rng.choice([0, rng.randrange(1, 400), rng.randrange(400, 9000)]),
                     100, vc))
    df = pd.DataFrame([r[:4] for r in rows], columns=["job_id", "gpu_num", "submit_time", "duration"])
    df["vc"] = [r[5] for r in rows]
    df["seq"] = range(len(df))
    spec = ClusterSpec({v: VCSpec(v, n, 8) for v, n in vcs.items()})
    rule = parse_limit_rule("x1.5")
    base = simulate(jobs_from_frame(df), spec, lambda vc: SlurmBackfill(SlurmConfig(limit_rule=rule))).jobs
    jobs = jobs_from_frame(df)
    for j in jobs:
        j.estimate = 100.0
    live = config_from_dict({"profiler": {"enabled": False}, "ordering": {"enabled": False}})
    sim = LucidOnSlurm(jobs, spec, live, lambda priority: SlurmBackfill(SlurmConfig(limit_rule=rule),
                                                                         priority=priority))
    sim.run()
    got = {j.job_id: j.start_time for j in jobs}
    assert [got[j] for j in base["job_id"]] == list(base["start_time"])
    series = sim.series_frame()
    assert (series["busy_gpus"] >= 0).all() and (series["queued_jobs"] >= 0).all()
    assert series["busy_gpus"].max() <= spec.total_gpus and series["queued_jobs"].iloc[-1] == 0


def test_profiling_runs_count_as_busy_gpus_in_lucid_standalone():
    """A run whose jobs all ended on lucid-standalone's profiling nodes showed gpu_util 0.0."""
    import pandas as pd

    from lucidd.metrics import busy_gpu_seconds
    from orchestrator.simulation import with_runs

    main = pd.DataFrame({"time": [0, 10, 20], "busy_gpus": [4.0, 8.0, 0.0], "queued_jobs": [1, 0, 0]})
    both = with_runs(main, [(5, 15, 2), (12, 30, 1)])
    assert busy_gpu_seconds(both, 30) == busy_gpu_seconds(main, 30) + 2 * 10 + 1 * 18
    only = with_runs(pd.DataFrame(columns=["time", "busy_gpus", "queued_jobs"]), [(0, 100, 8)])
    assert busy_gpu_seconds(only, 100) == 800
    assert with_runs(main, []) is main


# ----- GPU packing as lucidd applies it ([packing] enabled) -------------------------------------------

def _packing_replay(packing: bool):
    """One node of 2 GPUs; A, B, C take 1 GPU and are light (10 % SM, 2 GB), X takes 2 (Jumbo). A and B
    are profiled from 10 to 210 and released; A starts at once, B waits (X is profiled on the other
    GPU) and is lowered to one shard; it starts on that GPU at 420. C, profiled from 220 to 420 and
    lowered too, then joins B's GPU (Slurm's first-fit) at 510 instead of waiting for A to end."""
    from binder.speeds import PairSpeeds, time_sliced_pair_speed

    rows = [("A", 1, 5, 3000, 3000), ("B", 1, 5, 3000, 3000), ("X", 2, 100, 1000, 10 ** 6), ("C", 1, 5, 3000, 3000)]
    df = pd.DataFrame([r[:4] for r in rows], columns=["job_id", "gpu_num", "submit_time", "duration"])
    df["vc"], df["seq"] = "a", range(len(df))
    df["gpu_util"] = [10.0, 10.0, 90.0, 10.0]
    df["gmem"] = [2000.0, 2000.0, 20000.0, 2000.0]
    jobs = jobs_from_frame(df)
    for j, r in zip(sorted(jobs, key=lambda j: j.seq), rows):
        j.estimate = float(r[4])
    opts = {"tprof": 200, "prof_lend": 0, "prof_long_tprof": 0, "nprof": 2}
    if packing:
        opts["packing"] = {"enabled": True, "gpu_memory_mib": 24576}
    live = live_config(opts)
    # limits of 1 h (the default rule): room for 3,000 s at 0.87 of the speed (binder/live.py's limit rule)
    sim = LucidOnSlurm(jobs, ClusterSpec({"a": VCSpec("a", 1, 2)}), live,
                       lambda p: SlurmBackfill(SlurmConfig(), priority=p),
                       prof_gate=0, share_speeds=PairSpeeds(estimate=time_sliced_pair_speed))
    stats = sim.run()
    return {j.job_id: j for j in jobs}, stats


def test_packing_lowers_waiting_profiled_jobs_and_pairs_them_on_one_gpu():
    jobs, stats = _packing_replay(True)
    a, b, c, x = jobs["A"], jobs["B"], jobs["C"], jobs["X"]
    assert all(j.attrs.get("profiled") for j in (a, b, c))
    assert b.attrs.get("_lowered") and c.attrs.get("_lowered") and not a.attrs.get("_lowered")
    assert stats.packed == 1 and c.attrs["decision"].startswith("packed with job B:")
    assert (a.start_time, b.start_time, c.start_time) == (221, 420, 510)
    # 1 / 1.1 each while both run (time-slicing's estimate for 10 % + 10 %, as the replay of lucidd
    # uses it): B does 90 s alone, then the rest shared; C goes on alone at full speed once B has ended
    assert b.end_time == 510 + math.ceil(2910 * 1.1 - 1e-9) == 3711
    assert c.end_time == 3711 + 90 and c.shared_s == 3711 - 510 and not a.was_shared
    assert x.attrs["_main_start"] == c.end_time  # X (2 GPUs) waited for both GPUs to be whole again


def test_without_packing_the_third_job_waits_for_a_whole_gpu():
    jobs, stats = _packing_replay(False)
    a, c = jobs["A"], jobs["C"]
    assert stats.packed == 0 and not c.was_shared and not c.attrs.get("_lowered")
    assert c.start_time == a.end_time == 3221


def test_a_lent_run_that_ends_past_tprof_names_the_limit_it_had():
    # a review: jobs_lucid.csv said "finished inside the profiler's 200s limit" beside a profile_reason
    # of the lent run's long_tprof_s; a lent run of 500 s ends inside its 1,000 s limit
    rows = [("fill", 6, 0, 10_000, 10_000, "a"), ("big", 8, 15, 100, 100, "a"), ("p", 1, 25, 500, 500, "a")]
    r, _ = replay(rows, vcs={"a": 1, "b": 1}, nprof=4, prof_lend=1, prof_long_tprof=1000)
    assert r.loc["p", "profiler_finished"] and r.loc["p", "profiler_node"] == "b:0"
    assert r.loc["p", "decision"] == "finished inside the profiler's 1000s limit", r.loc["p", "decision"]
    short = [("s", 2, 3, 150, 900)]
    assert replay(short)[0].loc["s", "decision"] == "finished inside the profiler's 200s limit"
