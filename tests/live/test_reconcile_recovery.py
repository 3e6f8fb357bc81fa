"""The reconcile loop against an in-memory cluster (tests/live/memslurm.py): jobs that lucidd's
records and Slurm disagree about are found and handled, never left where nobody moves them.

Each case was a way to strand a job, found by a review on 27 November 2026: a job requeued back
into the closed inbox, a job id Slurm hands out again, a job moved to profiling whose admission was
never recorded, and a partition that does not exist.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from lucidd.backends.base import BackendError
from lucidd.live.config import config_from_dict
from lucidd.live.reconcile import Reconciler, open_inbox
from lucidd.live.store import Store
from orchestrator.live import LucidDecider

from .memslurm import Clock, MemSlurm


@pytest.fixture
def cluster(tmp_path):
    """(config, clock, slurm, store, make_reconciler); make_reconciler() is a (re)started lucidd."""

    def build(**profiler):
        cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                                "models": {"dir": str(tmp_path / "models")},
                                "profiler": {"tprof_s": 600, **profiler}})
        clock = Clock()
        clock.step = 0.0  # how far the wall clock was stepped (NTP) since the start
        slurm = MemSlurm(clock)
        store = Store(cfg.database.url).create()

        def lucidd():
            # the monotonic clock follows the wall clock, except where a test steps the wall clock
            return Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=lambda: clock.t - clock.step)

        return cfg, clock, slurm, store, lucidd

    return build


def run_cycles(rec, clock, seconds, step=10):
    for _ in range(int(seconds // step)):
        clock.t += step
        assert rec.cycle().ok


def start_profiling_run(rec, clock, slurm, job_id):
    """A 1-GPU job for main, admitted to profiling by lucidd and started there by Slurm."""
    slurm.submit(job_id, partition="main", gpus=1)
    run_cycles(rec, clock, 10)
    assert slurm.jobs[job_id].partition == "profiling"
    slurm.start(job_id)


def test_a_job_requeued_back_into_the_closed_inbox_goes_to_its_partition(cluster):
    cfg, clock, slurm, store, lucidd = cluster()
    # lucidd was stopped (the inbox opened): job 10 started in the inbox meanwhile
    slurm.inbox_up = True
    j = slurm.submit(10, partition="main", gpus=1)
    slurm.start(10)
    rec = lucidd()
    run_cycles(rec, clock, 10)
    assert not slurm.inbox_up and store.job(10).phase == "released"
    slurm.slurm_requeue(10)  # a node failed: Slurm requeues it, pending again in the (closed) inbox
    run_cycles(rec, clock, 30)
    assert j.partition == "main"
    row = store.job(10)
    assert row.phase == "released" and "back in inbox after a requeue" in row.profile_reason
    assert [c[0] for c in slurm.job_calls(10)].count("move") == 1  # no profiling run for it


def test_a_job_id_slurm_hands_out_again_is_a_new_job(cluster):
    cfg, clock, slurm, store, lucidd = cluster()
    rec = lucidd()
    slurm.submit(50, partition="main", gpus=0)  # a CPU job: straight to its partition
    run_cycles(rec, clock, 10)
    assert slurm.jobs[50].partition == "main"
    slurm.start(50)
    run_cycles(rec, clock, 10)
    slurm.end(50)
    run_cycles(rec, clock, 10)
    del slurm.jobs[50]
    run_cycles(rec, clock, 10)
    assert store.job(50).phase == "done"
    # slurmctld lost its state: another user's job gets id 50 again
    slurm.submit(50, partition="main", gpus=0, user="bob")
    run_cycles(rec, clock, 20)
    assert slurm.jobs[50].partition == "main"
    assert [c[0] for c in slurm.job_calls(50)].count("move") == 2


def test_an_unrecorded_admission_to_profiling_is_taken_as_admitted(cluster):
    """scontrol reported an error for a move it made (Slurm 22.05's PartitionConfig check runs after
    the change); the next cycle finds the job in profiling and treats it as admitted: Tprof applies."""
    cfg, clock, slurm, store, lucidd = cluster(lend_idle_gpus=False, skip_when_free=False)
    rec = lucidd()
    slurm.submit(20, partition="main", gpus=2)
    slurm.fail[("move", 20)] = ("Requested partition configuration not available now", False, True)
    run_cycles(rec, clock, 10)
    assert slurm.jobs[20].partition == "profiling"
    run_cycles(rec, clock, 10)
    row = store.job(20)
    assert (row.phase, row.profile) == ("profiling", "admitted")
    assert "admission was not recorded" in row.profile_reason
    slurm.start(20)
    run_cycles(rec, clock, 620)  # past Tprof: requeued, then released to its partition
    assert slurm.jobs[20].partition == "main" and slurm.jobs[20].restart_count == 1
    assert store.job(20).profile == "released"


def test_an_admission_that_never_starts_is_withdrawn_even_if_unrecorded(cluster):
    """Killed between the move and the database write; profiling's nodes are then busy: after
    2 x Tprof the job goes to its partition instead of holding profiling room for good."""
    cfg, clock, slurm, store, lucidd = cluster(lend_idle_gpus=False, skip_when_free=False, capacity_gpus=2,
                                               long_tprof_s=0)
    rec = lucidd()
    slurm.submit(5, partition="main", gpus=2)  # holds the profiling capacity while job 20 arrives
    run_cycles(rec, clock, 10)
    slurm.start(5)
    slurm.submit(20, partition="main", gpus=2)
    run_cycles(rec, clock, 10)
    assert store.job(20).phase == "inbox"  # recorded, waiting for room
    slurm.end(5)  # room again: the next cycle admits job 20
    orig = store.record_actions

    def killed_after_the_move(items, now, status, error=""):
        if status == "applied" and any(it[0].startswith("profile:20:") for it in items):
            raise SystemExit("kill -9")
        return orig(items, now, status, error)

    store.record_actions = killed_after_the_move
    for node in slurm.nodes.values():
        node.used = node.gpus  # nothing can start in profiling
    clock.t += 10
    with pytest.raises(SystemExit):
        rec.cycle()
    store.record_actions = orig
    assert slurm.jobs[20].partition == "profiling" and store.job(20).profile == "pending"
    rec = lucidd()  # restarted
    slurm.submit(30, partition="main", gpus=1)
    run_cycles(rec, clock, 1300)
    assert slurm.jobs[20].partition == "main"
    assert "no node there had its GPUs free" in store.job(20).profile_reason


def test_a_partition_that_does_not_exist_is_not_profiled_and_not_retried_every_cycle(cluster):
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False)
    rec = lucidd()
    slurm.submit(60, partition="mian", gpus=2)
    slurm.submit(61, partition="mian", gpus=0)
    run_cycles(rec, clock, 24 * 3600)
    for jid in (60, 61):
        assert slurm.jobs[jid].partition == "inbox"  # never ran anywhere it was not sent
        moves = [c for c in slurm.job_calls(jid) if c[0] == "move"]
        # 1 min doubling to 1 h: ~30 tries a day (each a batch call and one alone), not 8,640
        assert 1 <= len(moves) <= 80, len(moves)
        reason = store.job(jid).profile_reason
        assert "mian" in reason and f"scontrol update jobid={jid} partition=" in reason
    # `lucidctl status` lists them (it was only in the log)
    from lucidd.admin_cli import status_data

    assert [x["job_id"] for x in status_data(cfg, store, now=clock.t)["jobs_needing_attention"]] == [60, 61]
    # `lucidctl queue` does not show them as waiting for profiling: they wait for an admin
    from lucidd.admin_cli import queue_data, queue_text

    q = queue_data(cfg, store)
    assert [(r["job_id"], r["needs_attention"]) for r in q["inbox"]] == [(61, True), (60, True)]
    assert all("mian" in r["attention_reason"] for r in q["inbox"])
    text = queue_text(q)
    assert text[0] == "waiting for profiling (inbox): 0" and text[1].startswith("held in the inbox: Slurm refuses"), text
    # an admin fixes it: the job leaves the inbox and lucidd follows
    slurm.jobs[60].partition = "main"
    run_cycles(rec, clock, 20)
    assert store.job(60).phase == "released"
    assert [x["job_id"] for x in status_data(cfg, store, now=clock.t)["jobs_needing_attention"]] == [61]
    # fail-open still tries, and opens the inbox whatever happens to job 61
    lines = open_inbox(slurm, cfg, "test")
    assert slurm.inbox_up and any("61" in line for line in lines)


def test_a_transient_slurm_error_is_not_taken_for_a_bad_partition(cluster):
    cfg, clock, slurm, store, lucidd = cluster()
    rec = lucidd()
    slurm.submit(70, partition="main", gpus=0)
    slurm.fail[("move", 70)] = ("Socket timed out on send/recv operation", True, False)
    clock.t += 10
    assert not rec.cycle().ok
    run_cycles(rec, clock, 10)
    assert slurm.jobs[70].partition == "main"
    assert "refused" not in store.job(70).profile_reason


def test_a_cycle_cut_short_keeps_when_a_job_was_first_seen(cluster):
    """Rows of new jobs are saved before anything is sent: a transient Slurm error later in the cycle
    does not reset when the job was first seen (its room wait and its action keys count from it)."""
    cfg, clock, slurm, store, lucidd = cluster()
    rec = lucidd()
    slurm.submit(80, partition="main", gpus=0)
    slurm.fail[("move", 80)] = ("Socket timed out on send/recv operation", True, False)
    clock.t += 10
    first = int(clock.t)
    assert not rec.cycle().ok
    assert store.job(80).first_seen == first
    rec = lucidd()  # restarted too: the database, not the cache, holds it
    run_cycles(rec, clock, 20)
    assert store.job(80).first_seen == first and slurm.jobs[80].partition == "main"


def test_a_move_slurm_made_but_reported_as_failed_is_explained(cluster):
    """A partition the job's account may not use: Slurm moves the job, reports the limits check as
    an error, and keeps it pending there (PartitionConfig). lucidd records the move and says why
    the job will not start and what its owner can do."""
    cfg, clock, slurm, store, lucidd = cluster()
    rec = lucidd()
    slurm.submit(90, partition="main", gpus=0)
    slurm.fail[("move", 90)] = ("Requested partition configuration not available now", False, True)
    run_cycles(rec, clock, 20)
    row = store.job(90)
    assert row.phase == "released" and "configuration not available" in row.profile_reason
    assert "scontrol update jobid=90 partition=" in row.profile_reason
    from lucidd.admin_cli import status_data

    assert [x["job_id"] for x in status_data(cfg, store, now=clock.t)["jobs_needing_attention"]] == [90]
    from lucidd.admin_cli import queue_data, queue_text

    (pending,) = [r for r in queue_data(cfg, store)["pending"] if r["job_id"] == 90]
    assert pending["needs_attention"] and "configuration not available" in pending["attention_reason"]
    assert any(line.lstrip().startswith("! ") and "configuration not available" in line
               for line in queue_text(queue_data(cfg, store)))
    # the same when Slurm's pending reason is all lucidd has (the move made by a lucidd now restarted)
    slurm.submit(91, partition="main", gpus=0)
    slurm.fail[("move", 91)] = ("Requested partition configuration not available now", False, True)
    run_cycles(rec, clock, 10)
    slurm.jobs[91].reason = "PartitionConfig"
    rec = lucidd()
    run_cycles(rec, clock, 10)
    assert "(PartitionConfig)" in store.job(91).profile_reason


def test_a_clock_step_does_not_leave_a_profiling_run_behind(cluster):
    """An NTP step of an hour made a profiling run 5 minutes old look an hour past Tprof: it was
    left to finish in profiling "while lucidd was away", although lucidd had cycled all along."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False)  # profiled on an idle cluster
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 30)
    run_cycles(rec, clock, 300)
    clock.t += 3600
    clock.step += 3600
    run_cycles(rec, clock, 10)
    row = store.job(30)
    assert row.profile in ("requeued", "released") and "the clock stepped" in row.profile_reason


def test_a_run_far_past_tprof_after_lucidd_was_away_is_left_to_finish(cluster):
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False)  # profiled on an idle cluster
    rec = lucidd()
    slurm.submit(31, partition="main", gpus=1)
    run_cycles(rec, clock, 10)
    slurm.start(31)
    run_cycles(rec, clock, 20)
    clock.t += 7200  # lucidd stopped for two hours (its monotonic clock ran on too)
    rec = lucidd()
    run_cycles(rec, clock, 10)
    row = store.job(31)
    assert row.profile == "abandoned" and "lucidd was away" in row.profile_reason


def test_queue_ranks_are_those_of_now_not_of_when_the_site_factor_was_set(cluster):
    """A SiteFactor (and the rank saved with it) is written only when the value changes, so after
    the jobs ahead of a job started, `lucidctl queue` showed ranks such as #3 for the first job."""
    from lucidd.admin_cli import queue_data

    cfg, clock, slurm, store, lucidd = cluster(enabled=False)
    for node in slurm.nodes.values():
        node.used = node.gpus  # full: every job pends in main
    rec = lucidd()
    for jid, gpus in ((1, 1), (2, 2), (3, 4)):
        slurm.submit(jid, partition="main", gpus=gpus)
    run_cycles(rec, clock, 30)
    assert [(r["job_id"], r["rank"]) for r in queue_data(cfg, store)["pending"]] == [(1, 1), (2, 2), (3, 3)]
    assert store.job(3).queue_rank == 3
    slurm.start(1)
    slurm.start(2)
    run_cycles(rec, clock, 30)
    (only,) = queue_data(cfg, store)["pending"]
    assert only["job_id"] == 3 and only["rank"] == 1
    assert not only["reason"].startswith("rank ")  # the saved "rank 3 in main: ..." is not repeated


def test_a_job_of_a_partition_list_ranks_and_is_overtaken_in_each_of_its_partitions(cluster):
    """A review: `-p main,research` is "main,research" to squeue, and queue ranks and status' order
    agreement were counted per that string: the list job and the main job behind it were both #1,
    and a main job started ahead of the list job was counted as started in order."""
    from lucidd.admin_cli import queue_data

    cfg, clock, slurm, store, lucidd = cluster(enabled=False)
    slurm.partitions.append("research")
    for name, node in slurm.nodes.items():
        slurm.nodes[name] = replace(node, used=node.gpus, partitions=(*node.partitions, "research"))  # full
    rec = lucidd()
    for jid, gpus, part in ((1, 2, "main"), (2, 1, "main,research"), (3, 4, "research")):
        slurm.submit(jid, partition=part, gpus=gpus)
    run_cycles(rec, clock, 30)
    assert slurm.jobs[2].partition == "main,research"
    ranks = {r["job_id"]: r["rank"] for r in queue_data(cfg, store)["pending"]}
    assert ranks == {2: 1, 1: 2, 3: 2}  # fewest GPUs first; the list job is ahead in both partitions
    slurm.start(1)
    run_cycles(rec, clock, 10)
    assert store.job(1).partition_ran == "main" and store.job(1).started_ahead_of == 1


def test_queue_text_prints_a_job_whose_user_lucidd_does_not_know():
    from lucidd.admin_cli import queue_text

    row = {"job_id": 7, "user": None, "name": None, "gpus": 1, "partition": "main", "phase": "released",
           "profile": "skipped", "submitted": 0, "estimate_s": None, "estimate_source": None, "site_factor": None,
           "rank": None, "reason": None, "needs_attention": False, "attention_reason": None}
    lines = queue_text({"inbox": [], "profiling": [], "pending": [row]})
    assert lines[-1].split()[:5] == ["7", "main", "1", "GPU", "?"], lines


def test_a_job_cancelled_while_it_waits_is_not_said_to_have_started(cluster):
    """Slurm gives a job cancelled while pending a start time equal to its end time; `explain`
    then said "started ... in inbox" for a job that never ran (the admin trial, 27 November 2026)."""
    from lucidd.admin_cli import explain_data

    cfg, clock, slurm, store, lucidd = cluster()
    rec = lucidd()
    slurm.submit(95, partition="mian", gpus=1)
    run_cycles(rec, clock, 60)
    j = slurm.jobs[95]
    j.state, j.start_time, j.end_time = "CANCELLED", int(clock.t), int(clock.t)  # scancel while pending
    run_cycles(rec, clock, 10)
    row = store.job(95)
    assert row.phase == "done" and row.final_state == "CANCELLED" and row.start_time is None
    story = explain_data(cfg, store, 95)["story"]
    assert not any(line.startswith("started") for line in story), story
    assert any("CANCELLED" in line for line in story)
    slurm.submit(96, partition="main", gpus=1)  # a --deadline that passed while it waited
    run_cycles(rec, clock, 20)
    j = slurm.jobs[96]
    j.state, j.start_time, j.end_time = "DEADLINE", int(clock.t), int(clock.t)
    run_cycles(rec, clock, 10)
    assert store.job(96).phase == "done" and store.job(96).start_time is None


def test_a_profiled_job_waiting_in_its_partition_is_in_the_queue_and_in_the_order_agreement(cluster):
    """A profiled job has a start time (its profiling run's) while it waits in its partition again:
    `lucidctl queue` left it out, and status' order agreement never counted its start (the admin
    trial, 27 November 2026)."""
    from lucidd.admin_cli import queue_data

    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 1)
    run_cycles(rec, clock, 20)
    assert store.job(1).profile_start is not None
    run_cycles(rec, clock, 620)  # past Tprof: requeued, then released to main, where it waits
    j = slurm.jobs[1]
    assert j.partition == "main" and j.state == "PENDING" and j.restart_count == 1
    row = store.job(1)
    assert row.phase == "released" and row.start_time is not None and row.partition_ran == "profiling"
    (pending,) = queue_data(cfg, store)["pending"]
    assert pending["job_id"] == 1 and pending["rank"] == 1 and pending["site_factor"] is not None
    slurm.start(1)
    run_cycles(rec, clock, 10)
    row = store.job(1)
    assert row.partition_ran == "main" and row.started_ahead_of == 0
    assert queue_data(cfg, store)["pending"] == []
    assert [r.job_id for r in store.started_jobs(since=0)] == [1]
    # explain tells it in the order it happened: profiling run, requeue, release, start in main
    from lucidd.admin_cli import explain_data

    story = explain_data(cfg, store, 1)["story"]
    steps = [next(i for i, line in enumerate(story) if needle in line)
             for needle in ("profile [applied]", "started its profiling run", "requeue [applied]",
                            "release [applied]")]
    steps.append(next(i for i, line in enumerate(story) if line.startswith("started ") and line.endswith("in main")))
    assert steps == sorted(steps), story


@pytest.mark.parametrize("recorded", [True, False])
def test_a_job_failopen_released_from_profiling_is_released_in_the_record(cluster, recorded):
    """lucidd requeued a profiling run and died (with or without recording the requeue);
    lucidd-failopen moved the job to its partition; the restarted lucidd kept saying "in profiling",
    and `explain` showed the requeue as planned (the admin trial, 27 November 2026)."""
    from lucidd.admin_cli import queue_data

    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 1)
    run_cycles(rec, clock, 580)  # 580 s into Tprof 600
    if not recorded:  # the requeue is made, then the call reports an error: lucidd dies before recording it
        slurm.fail[("requeue", 1)] = ("scontrol: Socket timed out", True, True)
    clock.t += 30
    rec.cycle()  # requeue at Tprof
    j = slurm.jobs[1]
    assert j.partition == "profiling" and j.state == "PENDING" and j.restart_count == 1
    assert store.job(1).phase == ("requeued" if recorded else "profiling")
    clock.t += 5
    open_inbox(slurm, cfg, "lucidd is not running")  # lucidd-failopen
    assert j.partition == "main"
    rec = lucidd()
    run_cycles(rec, clock, 20)
    row = store.job(1)
    assert row.phase == "released" and row.profile == "released", row.profile_reason
    assert "moved out of profiling without a record" in row.profile_reason
    assert [a.status for a in store.actions_for(1) if a.kind == "requeue"] == ["applied"]
    assert [r["job_id"] for r in queue_data(cfg, store)["profiling"]] == []
    assert [r["job_id"] for r in queue_data(cfg, store)["pending"]] == [1]
    assert [c[0] for c in slurm.job_calls(1)].count("requeue") == 1  # never requeued twice


@pytest.mark.parametrize("reason", ["BadConstraints", "PartitionNodeLimit"])
def test_a_released_job_slurm_says_may_never_start_is_flagged_until_it_starts(cluster, reason):
    """`sbatch -p research --gpus=20` on a 16-GPU partition: the inbox over every node accepts it,
    lucidd moves it, and it pends with BadConstraints for ever, flagged nowhere (the admin trial,
    27 November 2026); plain Slurm refuses it at submission."""
    from lucidd.admin_cli import queue_data, status_data

    cfg, clock, slurm, store, lucidd = cluster(enabled=False)
    rec = lucidd()
    slurm.submit(7, partition="main", gpus=20)
    run_cycles(rec, clock, 10)
    j = slurm.jobs[7]
    assert j.partition == "main"
    j.reason = reason
    run_cycles(rec, clock, 20)
    row = store.job(7)
    assert f"Slurm may never start it in main ({reason})" in row.profile_reason
    assert row.profile_reason.count("Slurm may never start it") == 1
    (pending,) = queue_data(cfg, store)["pending"]
    assert pending["needs_attention"]
    assert [x["job_id"] for x in status_data(cfg, store)["jobs_needing_attention"]] == [7]
    slurm.start(7)  # an admin fixed it
    run_cycles(rec, clock, 10)
    assert "may never start" not in store.job(7).profile_reason
    assert status_data(cfg, store)["jobs_needing_attention"] == []


def test_a_failopen_release_to_a_partition_lucidd_does_not_order_is_recorded_too(tmp_path):
    """job_submit.lua routes every job through the inbox, so jobs bound for a partition outside
    [slurm] managed_partitions are profiled too; one that lucidd-failopen released from profiling
    stayed "requeued" in the record (the review, 27 November 2026)."""
    from lucidd.admin_cli import queue_data

    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")},
                            "slurm": {"managed_partitions": ["main"]},
                            "profiler": {"tprof_s": 600, "skip_when_free": False, "lend_idle_gpus": False}})
    clock = Clock()
    clock.step = 0.0
    slurm = MemSlurm(clock, partitions=("inbox", "profiling", "main", "debug"))
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=lambda: clock.t)
    slurm.submit(1, partition="debug", gpus=1)
    run_cycles(rec, clock, 10)
    assert slurm.jobs[1].partition == "profiling"
    slurm.start(1)
    run_cycles(rec, clock, 580)
    clock.t += 30
    rec.cycle()  # requeued at Tprof; lucidd dies before releasing it
    assert store.job(1).phase == "requeued" and slurm.jobs[1].partition == "profiling"
    clock.t += 5
    open_inbox(slurm, cfg, "lucidd is not running")  # lucidd-failopen releases it
    assert slurm.jobs[1].partition == "debug"
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=lambda: clock.t)
    run_cycles(rec, clock, 20)
    assert store.job(1).phase == "released"
    assert queue_data(cfg, store)["profiling"] == []


def test_a_withdrawal_from_profiling_slurm_made_but_reported_as_failed_is_explained(cluster):
    """Slurm 22.05 can make a move and report an error: for a job withdrawn from profiling (no room
    to start there within 2 x Tprof) the error was dropped and the release stayed "failed" (the
    review, 27 November 2026)."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False, long_tprof_s=0)
    rec = lucidd()
    slurm.submit(1, partition="main", gpus=1)
    run_cycles(rec, clock, 10)
    assert slurm.jobs[1].partition == "profiling"  # admitted, but it never starts there
    slurm.fail[("move", 1)] = ("scontrol: error: Job violates accounting/QOS policy", False, True)
    run_cycles(rec, clock, 1300)  # past 2 x Tprof: withdrawn to main (made, reported as failed)
    row = store.job(1)
    assert slurm.jobs[1].partition == "main" and row.phase == "released", row.profile_reason
    assert "Slurm may never start it in main (it reported: scontrol: error: Job violates" in row.profile_reason
    assert {a.status for a in store.actions_for(1) if a.kind == "release"} == {"applied"}


def test_a_release_from_profiling_slurm_made_but_lucidd_did_not_record_is_settled(cluster):
    """The release after a requeue was made, but scontrol's reply timed out: the restarted lucidd
    found the job in main and left the release "failed" beside a released record (the review)."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 1)
    run_cycles(rec, clock, 580)
    clock.t += 30
    assert rec.cycle().ok  # requeued at Tprof
    slurm.fail[("move", 1)] = ("scontrol: Socket timed out on send/recv operation", True, True)
    clock.t += 10
    rec.cycle()  # the release is made, and reported as failed
    assert slurm.jobs[1].partition == "main"
    rec = lucidd()
    run_cycles(rec, clock, 20)
    row = store.job(1)
    assert row.phase == "released" and row.profile == "released"
    assert {a.status for a in store.actions_for(1) if a.kind in ("release", "requeue")} == {"applied"}
    assert [c[0] for c in slurm.job_calls(1)].count("requeue") == 1


def test_a_job_its_owner_moves_is_ordered_where_it_now_is(cluster):
    """`scontrol update jobid=N partition=research` by its owner: lucidd does not move it back, but
    it went on ranking and showing it in main (the admin trial, 27 November 2026)."""
    from lucidd.admin_cli import queue_data

    cfg, clock, slurm, store, lucidd = cluster(enabled=False)
    for node in slurm.nodes.values():
        node.used = node.gpus  # full: jobs pend
    rec = lucidd()
    slurm.submit(1, partition="main", gpus=1)
    slurm.submit(2, partition="main", gpus=1)
    run_cycles(rec, clock, 20)
    assert slurm.jobs[1].partition == "main" and store.job(1).site_factor is not None
    slurm.jobs[1].partition = "research"  # the owner moves it
    run_cycles(rec, clock, 20)
    row = store.job(1)
    assert row.target_partition == "research" and "moved from main to research" in row.profile_reason
    assert slurm.jobs[1].partition == "research"  # not moved back
    assert [c[0] for c in slurm.job_calls(1)].count("move") == 1  # only lucidd's own release
    ranks = {(r["job_id"], r["partition"], r["rank"]) for r in queue_data(cfg, store)["pending"]}
    assert ranks == {(1, "research", 1), (2, "main", 1)}
    assert row.site_factor == store.job(2).site_factor  # the same estimate and width: the same value


def test_a_requeue_slurm_refuses_for_good_is_not_asked_again_every_cycle(cluster):
    """A --no-requeue job its owner moved into profiling: `scontrol requeue` is refused, and lucidd
    asked again every cycle until the job ended (21 times in 40 s in the admin trial)."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 1)
    slurm.fail[("requeue", 1)] = ("scontrol requeue 1: Requested operation is presently disabled for job 1",
                                  False, False)
    run_cycles(rec, clock, 700)
    row = store.job(1)
    assert row.profile == "abandoned" and "Slurm refuses to requeue it" in row.profile_reason
    assert [c[0] for c in slurm.job_calls(1)].count("requeue") == 1
    assert slurm.jobs[1].partition == "profiling" and slurm.jobs[1].state == "RUNNING"


def test_a_job_cancelled_after_its_requeue_is_told_in_order(cluster):
    """Cancelled while pending after its requeue: explain listed the start after the requeue, and
    as a start "in main" for a run that was in profiling (the review, 27 November 2026)."""
    from lucidd.admin_cli import explain_data

    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    for node in slurm.nodes.values():
        node.used = 0
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 1)
    run_cycles(rec, clock, 620)
    j = slurm.jobs[1]
    assert j.partition == "main" and j.state == "PENDING"
    j.state, j.start_time, j.end_time = "CANCELLED", int(clock.t), int(clock.t)  # scancel while pending
    run_cycles(rec, clock, 10)
    row = store.job(1)
    assert row.partition_ran == "profiling" and row.start_time == row.profile_start
    story = explain_data(cfg, store, 1)["story"]
    at = {k: next(i for i, line in enumerate(story) if k in line)
          for k in ("started its profiling run", "requeue [applied]")}
    assert at["started its profiling run"] < at["requeue [applied]"], story
    assert not any(line.startswith("started ") and "in main" in line for line in story), story


@pytest.mark.parametrize("message,abandoned", [
    ("scontrol requeue 1: Requested operation is presently disabled for job 1", True),
    ("scontrol requeue 1: Job/step already completing or completed", False),
    ("scontrol requeue 1: Job is pending execution", False),
])
def test_only_a_requeue_slurm_can_never_make_is_given_up(cluster, message, abandoned):
    """A refusal from a race (the job just ended, Slurm requeued it itself) is read from the next
    snapshot, not taken as 'it finishes in profiling' (the review)."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 1)
    slurm.fail[("requeue", 1)] = (message, False, False)
    run_cycles(rec, clock, 620)
    row = store.job(1)
    assert (row.profile == "abandoned") == abandoned, row.profile_reason
    assert ("Slurm refuses to requeue it" in row.profile_reason) == abandoned


def test_an_owner_move_to_a_partition_lucidd_does_not_order_drops_stale_notes(tmp_path):
    from lucidd.admin_cli import explain_data

    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")},
                            "slurm": {"managed_partitions": ["main"]}, "profiler": {"enabled": False}})
    clock = Clock()
    clock.step = 0.0
    slurm = MemSlurm(clock, partitions=("inbox", "profiling", "main", "debug"))
    for node in slurm.nodes.values():
        node.used = node.gpus
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=lambda: clock.t)
    slurm.submit(1, partition="main", gpus=20)
    run_cycles(rec, clock, 10)
    slurm.jobs[1].reason = "BadConstraints"
    run_cycles(rec, clock, 10)
    assert "Slurm may never start it in main" in store.job(1).profile_reason
    slurm.jobs[1].partition, slurm.jobs[1].reason = "inbox,debug", "Priority"  # as the flag told its owner
    run_cycles(rec, clock, 10)
    row = store.job(1)
    assert row.target_partition == "debug"  # lucidd's own partition left out
    assert "a partition lucidd does not order" in row.profile_reason
    assert "may never start" not in row.profile_reason and not row.order_reason.startswith("rank ")
    assert explain_data(cfg, store, 1)["partition"] == "debug"


def test_ended_job_records_and_cycles_are_forgotten_after_keep_days_hourly(cluster, caplog):
    """[daemon] keep_days (180) bounds the jobs, actions and cycles tables; jobs are kept at least
    [models] history_days (60 by default, below it here). The prune runs once an hour."""
    caplog.set_level("INFO", logger="lucidd")
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False)
    rec = lucidd()
    t0 = clock.t
    start_profiling_run(rec, clock, slurm, 95)
    slurm.submit(96, partition="main", gpus=1)  # still waiting at the end: never forgotten
    run_cycles(rec, clock, 30)
    slurm.end(95)
    run_cycles(rec, clock, 20)
    assert store.job(95).phase == "done" and store.actions_for(95)
    calls = []
    real = store.prune_ended
    store.prune_ended = lambda *a, **k: calls.append(a) or real(*a, **k)
    clock.t += 179 * 86400
    run_cycles(rec, clock, 60)
    assert len(calls) == 1 and store.job(95) is not None  # 179 days: kept
    clock.t += 2 * 86400
    run_cycles(rec, clock, 60)
    assert len(calls) == 2 and store.job(95) is None and store.actions_for(95) == []
    assert store.job(96) is not None and store.job(96).phase != "done" and store.actions_for(96)
    assert min(c.started_at for c in store.last_cycles(1000)) > t0 + 179 * 86400  # the first day's cycles went
    assert "forgot 1 ended job record(s)" in caplog.text
    run_cycles(rec, clock, 3500)
    assert len(calls) == 2  # not again within the hour
    run_cycles(rec, clock, 200)
    assert len(calls) == 3


def test_job_records_are_kept_for_the_models_history_window_at_least(tmp_path):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path), "keep_days": 30},
                            "models": {"dir": str(tmp_path / "models"), "history_days": 90}})
    clock = Clock()
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, MemSlurm(clock), store, LucidDecider(cfg), clock=clock, monotonic=lambda: clock.t)
    calls = []
    store.prune_ended = lambda jobs_before, cycles_before, limit: calls.append((jobs_before, cycles_before)) or (0, 0)
    clock.t += 10
    assert rec.cycle().ok
    assert calls == [(int(clock.t) - 90 * 86400, int(clock.t) - 30 * 86400)]


def test_the_daemon_guards_a_job_of_several_nodes_sooner(cluster):
    """[ordering] starvation_node_cap (4): the daemon reads its partitions' GPUs per node from
    Slurm's nodes (8 here), so a 16-GPU job starves after 12 h / 2 while an 8-GPU job submitted with
    it waits the whole 12 h first."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False)
    rec = lucidd()
    slurm.submit(1, partition="main", gpus=16)  # wider than Nprof: straight to main
    slurm.submit(2, partition="main", gpus=8)
    slurm.jobs[2].requeue = False  # not profiled either: both wait in main from the first cycle
    run_cycles(rec, clock, 20)
    assert slurm.jobs[1].partition == slurm.jobs[2].partition == "main"
    normal = store.job(1).site_factor
    assert normal < 2 * 10 ** 9 - 10 ** 8
    clock.t += 6 * 3600
    run_cycles(rec, clock, 20)
    assert store.job(1).site_factor > 2 * 10 ** 9 - 10 ** 8  # starving: in front
    assert store.job(2).site_factor < 2 * 10 ** 9 - 10 ** 8  # one node: not before 12 h
    assert "> 6 h (starvation_s / 2: a job of several nodes)" in store.actions_for(1)[-1].reason
    clock.t += 6 * 3600
    run_cycles(rec, clock, 20)
    assert store.job(2).site_factor > 2 * 10 ** 9 - 10 ** 8


@pytest.mark.parametrize("outage_s,requeued", [(180, True), (3590, True), (3700, False)])
def test_a_run_past_tprof_through_a_slurm_outage_is_requeued_if_the_outage_was_short(cluster, outage_s, requeued):
    """slurmctld did not answer while a profiling run passed its Tprof (a restart, an upgrade, a
    network cut) and lucidd kept trying every cycle. Before, any outage past max(60 s, 3 cycles)
    counted as lucidd away, and the run, 3 minutes past Tprof, was left to finish in profiling: a
    training job of days held profiling GPUs for days. An outage of at most long_tprof_s (3,600 s)
    costs the run no more work than a long run's requeue at long_tprof_s does, so it is requeued;
    a longer one still leaves it to finish."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 1)
    run_cycles(rec, clock, 590)  # 10 s before its Tprof
    snapshot = slurm.snapshot

    def down():
        raise BackendError("squeue: error: Unable to contact slurm controller (connect failure)")
    slurm.snapshot = down
    for _ in range(outage_s // 10):
        clock.t += 10
        assert not rec.cycle().ok
    slurm.snapshot = snapshot
    run_cycles(rec, clock, 10)
    row = store.job(1)
    assert (row.profile == "requeued") == requeued, row.profile_reason
    if requeued:
        assert "Slurm did not answer" in row.profile_reason
    else:
        assert row.profile == "abandoned" and "lucidd was away" not in row.profile_reason


def test_a_lucidd_that_stopped_trying_during_a_slurm_outage_was_away(cluster):
    """A Slurm outage with lucidd itself frozen for 2 minutes in it (SIGSTOP, a hung host):
    lucidd-failopen may have opened the inbox meanwhile, so lucidd was away as before, and the run
    far past its Tprof is left to finish."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 1)
    run_cycles(rec, clock, 590)
    snapshot = slurm.snapshot

    def down():
        raise BackendError("squeue: error: Unable to contact slurm controller (connect failure)")
    slurm.snapshot = down
    clock.t += 10
    assert not rec.cycle().ok
    clock.t += 120  # no cycle tried
    slurm.snapshot = snapshot
    run_cycles(rec, clock, 10)
    row = store.job(1)
    assert row.profile == "abandoned" and "lucidd was away" in row.profile_reason


def test_a_run_whose_partition_was_removed_is_not_requeued_at_tprof_and_is_left_to_finish(cluster):
    """An admin removed (or renamed) the partition a profiling run's job asked for: requeued at
    Tprof, the job could go nowhere (its release fails: Invalid partition name), and Slurm restarts
    it in profiling. Not requeued, it runs on as plain Slurm would have let it; left to finish once
    another Tprof has passed without the partition coming back."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 1)
    run_cycles(rec, clock, 100)
    slurm.partitions.remove("main")
    run_cycles(rec, clock, 600)  # past its Tprof
    assert not [c for c in slurm.job_calls(1) if c[0] == "requeue"]
    assert store.job(1).profile == "admitted"
    run_cycles(rec, clock, 600)
    row = store.job(1)
    assert row.profile == "abandoned" and "no longer has it" in row.profile_reason, row.profile_reason
    assert slurm.jobs[1].state == "RUNNING" and slurm.jobs[1].partition == "profiling"


def test_a_requeued_job_whose_partition_was_removed_is_not_requeued_again_at_each_restart(cluster):
    """The partition went after the requeue: every release failed (a warning a second), the restart
    Slurm began in profiling after its BeginTime was requeued again, and so on every 2 minutes for
    as long as the partition was gone (a review: the job never finished, status said healthy).
    Now the release backs off, the restart runs on in profiling, and status flags the job."""
    from lucidd.admin_cli import _needing_attention

    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 1)
    run_cycles(rec, clock, 600)
    assert store.job(1).profile == "requeued"
    slurm.partitions.remove("main")
    run_cycles(rec, clock, 120)
    moves = [c for c in slurm.job_calls(1) if c[0] == "move"]
    assert len(moves) <= 3, moves  # the admission, then a release retried after 1 min, not every cycle
    slurm.start(1)  # Slurm's restart, in profiling
    run_cycles(rec, clock, 300)
    assert len([c for c in slurm.job_calls(1) if c[0] == "requeue"]) == 1  # the Tprof requeue only
    assert slurm.jobs[1].state == "RUNNING"
    row = store.job(1)
    assert "Slurm refused to move it" in row.profile_reason
    assert [x["job_id"] for x in _needing_attention({1: row})] == [1]


def test_a_restart_is_away_only_as_long_as_the_stored_last_cycle_says(tmp_path):
    """lucidd restarted within seconds with a shorter Tprof (an admin's config change): its first
    cycle took every run past the new Tprof + 60 s for one it had been away for and left them to
    run to their end in profiling, ahead of every queue (a review). The time since the previous
    lucidd's last successful cycle (stored) is the absence; a restart after longer still leaves them."""
    def config(tprof):
        return config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                                 "models": {"dir": str(tmp_path / "models")},
                                 "profiler": {"tprof_s": tprof, "skip_when_free": False, "lend_idle_gpus": False}})

    clock = Clock()
    slurm = MemSlurm(clock)
    cfg = config(600)
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=clock)
    for jid in (1, 2):
        start_profiling_run(rec, clock, slurm, jid)
    run_cycles(rec, clock, 100)
    clock.t += 3  # restarted with Tprof 20 s
    cfg2 = config(20)
    rec2 = Reconciler(cfg2, slurm, store, LucidDecider(cfg2), clock=clock, monotonic=lambda: 0.0)
    assert rec2.cycle().ok
    for jid in (1, 2):
        assert store.job(jid).profile == "requeued", store.job(jid).profile_reason


def test_a_restart_long_after_the_last_cycle_leaves_runs_far_past_tprof_to_finish(cluster):
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 1)
    run_cycles(rec, clock, 500)
    clock.t += 600  # lucidd stopped for 10 minutes
    assert lucidd().cycle().ok
    row = store.job(1)
    assert row.profile == "abandoned" and "lucidd was away" in row.profile_reason


def test_a_run_its_owner_held_is_said_to_wait_held_after_its_requeue(cluster):
    """`scontrol hold` on a running profiling job changes nothing until the requeue at Tprof; then the
    job waits held in its partition. explain said "runs in main" (a review)."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 1)
    slurm.jobs[1].priority = 0  # held while it runs
    run_cycles(rec, clock, 620)
    j = slurm.jobs[1]
    assert j.partition == "main" and j.pending
    (release,) = [a for a in store.actions_for(1) if a.kind == "release"]
    assert "held by its owner or an admin" in release.reason and "scontrol release 1" in release.reason


def test_a_node_of_an_ordered_partition_the_inbox_lacks_is_warned_of_once(cluster, caplog):
    """A node added to `main` only: jobs routed to the inbox are checked against its nodes at
    submission, so one only that node can run was refused where plain Slurm took it (a review)."""
    from lucidd.backends.base import NodeGPUs

    cfg, clock, slurm, store, lucidd = cluster()
    rec = lucidd()
    slurm.nodes["gpu5"] = NodeGPUs("gpu5", 8, 0, "IDLE", ("main",))
    with caplog.at_level("WARNING", logger="lucidd"):
        run_cycles(rec, clock, 30)
    said = [r.getMessage() for r in caplog.records if "not in the inbox" in r.getMessage()]
    assert len(said) == 1 and "gpu5" in said[0] and "gpu1" not in said[0]


def test_a_lucidd_started_during_a_slurm_outage_after_a_long_absence_was_away(cluster):
    """The Slurm-outage rule covers only an outage this process cycled through: a lucidd stopped
    for 30 minutes and started while slurmctld was down had its absence counted as Slurm's."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 1)
    run_cycles(rec, clock, 500)
    clock.t += 1800  # stopped
    rec2 = lucidd()
    snapshot = slurm.snapshot

    def down():
        raise BackendError("squeue: error: Unable to contact slurm controller (connect failure)")
    slurm.snapshot = down
    for _ in range(3):
        clock.t += 10
        assert not rec2.cycle().ok
    slurm.snapshot = snapshot
    run_cycles(rec2, clock, 10)
    row = store.job(1)
    assert row.profile == "abandoned" and "lucidd was away" in row.profile_reason, row.profile_reason


def test_a_release_from_the_inbox_slurm_made_but_reported_as_failed_is_lucidds(cluster):
    """Slurm 22.05 made the move of a `-n 80` job to a 64-CPU partition and reported an error: the
    release stayed "failed" and the reason blamed lucidd-failopen or the job's owner (a review)."""
    cfg, clock, slurm, store, lucidd = cluster(enabled=False)
    rec = lucidd()
    slurm.submit(1, partition="main", gpus=1)
    slurm.fail[("move", 1)] = ("scontrol: error: Job violates accounting/QOS policy", False, True)
    run_cycles(rec, clock, 30)
    row = store.job(1)
    assert slurm.jobs[1].partition == "main" and row.phase == "released", row.profile_reason
    assert "released to main by lucidd; Slurm reported an error for the move but made it" in row.profile_reason
    assert "its owner" not in row.profile_reason.split(";")[0]
    assert "Slurm may never start it in main (it reported: scontrol: error: Job violates" in row.profile_reason
    assert {a.status for a in store.actions_for(1) if a.kind == "release"} == {"applied"}
