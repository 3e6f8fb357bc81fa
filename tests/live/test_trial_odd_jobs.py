"""What an admin trial with odd jobs and node faults found (27 November 2026, a helper's own test
cluster, about 100 jobs): two ways a job ran twice, jobs that held profiling room for nothing, and
false or missing flags. Each case is driven through the reconcile loop on the in-memory cluster;
the parsing of squeue's fields is checked on the JSON 22.05 prints."""

from __future__ import annotations

import pytest

from lucidd.backends.base import LiveJob
from lucidd.backends.slurm import parse_job

from .test_decider import NOW, TPROF, decider, inp, lj, rec, reasons  # noqa: F401 (fixture)
from .test_reconcile_recovery import cluster, run_cycles, start_profiling_run  # noqa: F401 (fixture)


# ----- squeue --json fields (as Slurm 22.05 printed them on the test cluster) ------------------

def _rec(**kw):
    base = {"job_id": 61, "job_state": "PENDING", "state_reason": "PartitionDown", "partition": "inbox",
            "tres_per_node": "gres:gpu:1", "node_count": 1, "het_job_id": 0, "het_job_id_set": "",
            "het_job_offset": 0, "shared": None}
    base.update(kw)
    return parse_job(base)


def test_exclusive_het_and_begin_time_are_read_from_squeue():
    assert _rec(shared="none").exclusive and not _rec().exclusive  # `--exclusive`
    assert not _rec(shared="oversubscribe").exclusive
    # `--exclusive=user` and `--exclusive=mcs` (22.05 on the test cluster, 2 December 2026): whole nodes too
    assert _rec(shared="user").exclusive and _rec(shared="mcs").exclusive
    # an array's last pending task keeps the array's id, with no task string left (seen on 22.05:
    # job 5 of `--array=0-2%1` pending as task 2): it is a task, though not a pending array record
    last = _rec(job_id=5, array_job_id=5, array_task_id=2, array_task_string="")
    assert last.array_job_id == 5 and not last.array_pending and _rec().array_job_id == 0
    leader = _rec(job_id=63, het_job_id=63, het_job_id_set="63-64", het_job_offset=0)
    comp = _rec(job_id=64, het_job_id=63, het_job_id_set="63-64", het_job_offset=1)
    assert leader.het_job_id == 63 and not leader.het_component and comp.het_component
    assert _rec(state_reason="BeginTime").waits_for_begin_time and not _rec().waits_for_begin_time
    # salloc/srun, and --deadline (22.05 prints 0 for none)
    assert not _rec(batch_flag=False).batch and _rec(batch_flag=True).batch and _rec().batch
    assert _rec(deadline=1795838494).deadline == 1795838494 and _rec(deadline=0).deadline is None


# ----- skip rules ------------------------------------------------------------------------------

@pytest.mark.parametrize("kw,why", [({"exclusive": True}, "--exclusive"),
                                    ({"het_job_id": 1}, "heterogeneous"),
                                    ({"reason": "BeginTime"}, "begin time"),
                                    ({"batch": False}, "interactive allocation (salloc/srun)"),
                                    ({"deadline": NOW + 7200}, "--deadline"),
                                    ({"array_job_id": 1}, "a task of job array 1: a requeue could reach")])
def test_exclusive_heterogeneous_and_future_jobs_skip_profiling(decider, kw, why):  # noqa: F811
    """An --exclusive 1-GPU job counted 1 profiling GPU and held a whole node (four held the
    cluster); a het job's components were profiled apart, 12 GPUs on 2 nodes past Nprof 8; eight
    --begin jobs filled the capacity for their whole wait and pushed a plain job out of profiling."""
    plan = decider.decide(inp([lj(1, 1, **kw), lj(2, 1)]))
    assert ids_(plan.profile) == [2] and ids_(plan.release) == [1] and why in reasons(plan.release)[1]


def ids_(pairs):
    return [jid for jid, _ in pairs]


def test_a_job_given_a_begin_time_after_its_admission_leaves_profiling_at_once(decider):  # noqa: F811
    later = lj(1, 8, partition="profiling", reason="BeginTime")
    records = {1: rec(later, first_seen=NOW - 30, profile="admitted", phase="profiling")}
    plan = decider.decide(inp([lj(2, 8)], profiling=[later], records=records, profiling_gpus=16))
    assert ids_(plan.release) == [1] and "later begin time" in reasons(plan.release)[1]
    assert ids_(plan.profile) == [2]


# ----- a run its own time limit ends inside Tprof is not requeued ------------------------------

@pytest.mark.parametrize("own,requeued", [(60, False), (TPROF, False), (TPROF + 60, False), (TPROF + 61, True),
                                          (None, True)])
def test_a_run_whose_time_limit_ends_it_in_profiling_is_not_requeued(decider, own, requeued):  # noqa: F811
    """`sbatch -t 1` with Tprof 75 s: Slurm checks limits about every 30 s, so lucidd's requeue at
    Tprof raced the timeout; the job that lost the race ran its 60 s limit again in main and was
    killed there too. A run whose limit falls within Tprof + the grace (60 s) is left to end."""
    run = lj(1, 1, partition="profiling", state="RUNNING", start_time=NOW - TPROF, time_limit_s=own)
    plan = decider.decide(inp(profiling=[run], profile="admitted", phase="profiling"))
    assert (ids_(plan.requeue) == [1]) == requeued
    if not requeued:
        assert ids_(plan.abandon) == [1] and "own time limit" in reasons(plan.abandon)[1]


# ----- the reconcile loop ----------------------------------------------------------------------

def test_no_requeue_while_the_runs_node_does_not_answer(cluster):  # noqa: F811
    """slurmd of the node killed during a profiling run: Slurm could not deliver the requeue's kill,
    the script ran to its end, the requeue completed when slurmd came back, and the finished job ran
    again in main (2 of 2 on the test cluster). The requeue now waits for the node."""
    cfg, clock, slurm, store, lucidd = cluster(lend_idle_gpus=False, skip_when_free=False)
    rec_ = lucidd()
    start_profiling_run(rec_, clock, slurm, 5)
    slurm.jobs[5].node_names = ("gpu1",)
    slurm.nodes["gpu1"].state = "IDLE+NOT_RESPONDING"
    run_cycles(rec_, clock, 700)
    assert not [c for c in slurm.job_calls(5) if c[0] == "requeue"]
    assert store.job(5).phase == "profiling"
    slurm.nodes["gpu1"].state = "MIXED"  # it answers again
    run_cycles(rec_, clock, 10)
    assert [c[0] for c in slurm.job_calls(5)].count("requeue") == 1


def test_a_het_component_is_left_to_its_leader(cluster):  # noqa: F811
    """Each component was recorded and acted on as a job of its own: moves of the leader moved all,
    requeues of a component failed ("Job not heterogeneous job leader"), and one job ran in two
    partitions at once. Only the leader is lucidd's now, and it is not profiled."""
    cfg, clock, slurm, store, lucidd = cluster(lend_idle_gpus=False)
    rec_ = lucidd()
    slurm.submit(63, partition="main", gpus=1, het_job_id=63)
    slurm.submit(64, partition="main", gpus=2, het_job_id=63, het_job_offset=1)
    run_cycles(rec_, clock, 10)
    assert store.job(64) is None
    row = store.job(63)
    assert row.phase == "released" and "heterogeneous" in row.profile_reason
    assert not slurm.job_calls(64)


def _het_in_two_partitions(slurm):
    slurm.partitions = ("inbox", "profiling", "main", "research")
    slurm.submit(63, partition="main", gpus=1, het_job_id=63)
    slurm.submit(64, partition="research", gpus=2, het_job_id=63, het_job_offset=1)


def test_a_het_job_whose_components_ask_for_different_partitions_runs_in_each(cluster):  # noqa: F811
    """`sbatch -p main ... : -p research ...` (a review, checked on 22.05): the leader's move by its
    plain id took the research component to main. The component goes first, by its own id, then
    the leader alone (jobid=L+0), while the DOWN inbox keeps the job from starting in between."""
    cfg, clock, slurm, store, lucidd = cluster(lend_idle_gpus=False)
    rec_ = lucidd()
    _het_in_two_partitions(slurm)
    run_cycles(rec_, clock, 10)
    assert slurm.jobs[63].partition == "main" and slurm.jobs[64].partition == "research"
    assert [c for c in slurm.calls if c[0] == "move"] == [("move", (64,)), ("move", (63,))]
    assert store.job(63).phase == "released" and store.job(64) is None


@pytest.mark.parametrize("error,transient,first,then", [
    # for now (Slurm slow): the whole job waits in the DOWN inbox, and goes where it asked at the next cycle
    ("Socket timed out on send/recv operation", True, ("inbox", "inbox"), ("main", "research")),
    # for good: it goes whole to the leader's partition, as Slurm moves it
    ("Invalid partition name specified", False, ("main", "main"), ("main", "main")),
])
def test_a_het_job_whose_components_move_is_refused(cluster, error, transient, first, then):  # noqa: F811
    cfg, clock, slurm, store, lucidd = cluster(lend_idle_gpus=False)
    rec_ = lucidd()
    _het_in_two_partitions(slurm)
    slurm.fail[("move", 64)] = (error, transient, False)
    run_cycles(rec_, clock, 10)
    assert (slurm.jobs[63].partition, slurm.jobs[64].partition) == first
    run_cycles(rec_, clock, 10)
    assert (slurm.jobs[63].partition, slurm.jobs[64].partition) == then


def test_fail_open_sends_a_het_jobs_components_to_their_own_partitions(cluster):  # noqa: F811
    from lucidd.live.reconcile import open_inbox

    cfg, clock, slurm, store, lucidd = cluster(lend_idle_gpus=False)
    _het_in_two_partitions(slurm)
    slurm.submit(70, partition="main", gpus=1)
    open_inbox(slurm, cfg, "lucidd is dead")
    assert slurm.jobs[63].partition == "main" and slurm.jobs[64].partition == "research"
    assert slurm.jobs[70].partition == "main"
    moves = [c[1] for c in slurm.calls if c[0] == "move"]
    assert moves.index((64,)) < moves.index((63,)), moves
    # lucidd died between sending the component on and moving its leader: the leader moves alone
    cfg, clock, slurm, store, lucidd = cluster(lend_idle_gpus=False)
    _het_in_two_partitions(slurm)
    slurm.jobs[64].partition = "research"
    open_inbox(slurm, cfg, "lucidd is dead")
    assert slurm.jobs[63].partition == "main" and slurm.jobs[64].partition == "research"


def test_fail_open_waits_at_most_2_s_for_a_requeue_dated_ahead_of_its_clock(cluster, monkeypatch):  # noqa: F811
    """A review: the same-second wait before releasing requeued jobs slept until their submit time
    plus 1 s; one dated an hour ahead of this clock (a step back, slurmctld's host running ahead)
    made lucidd-failopen sleep an hour, and systemd killed it before it opened the inbox. The inbox
    is also opened before the profiling partition's jobs are seen to."""
    import lucidd.live.reconcile as reconcile_mod
    from lucidd.live.reconcile import open_inbox

    cfg, clock, slurm, store, lucidd = cluster(lend_idle_gpus=False)
    slurm.jobs[7] = LiveJob(7, partition="profiling", gpus=1, state="PENDING", restart_count=1,
                            submit_time=int(clock()) + 3600, admin_comment="lucid:partition=main")
    slept = []
    monkeypatch.setattr(reconcile_mod.time, "sleep", slept.append)
    open_inbox(slurm, cfg, "lucidd is dead", clock=clock)
    assert slept and max(slept) <= 2.0, slept
    assert slurm.jobs[7].partition == "main" and slurm.inbox_up
    assert [c[0] for c in slurm.calls].index("partition") < [c[0] for c in slurm.calls].index("move")


def test_an_array_whose_first_tasks_run_is_not_flagged_when_only_those_refuse_the_move(cluster):  # noqa: F811
    """`35_1-2: Job is no longer pending execution 35_3-6: No error`: the pending tasks moved, and
    lucidd flagged the array as one Slurm may never start while its tasks ran."""
    from lucidd.admin_cli import status_data

    cfg, clock, slurm, store, lucidd = cluster(enabled=False)
    rec_ = lucidd()
    slurm.submit(35, partition="main", gpus=1)
    slurm.fail[("move", 35)] = ("35_1-2: Job is no longer pending execution 35_3-6: No error", False, True)
    run_cycles(rec_, clock, 30)
    assert "may never start" not in (store.job(35).profile_reason or "")
    assert status_data(cfg, store, now=clock.t)["jobs_needing_attention"] == []


def test_a_dependency_that_can_never_be_met_is_flagged(cluster):  # noqa: F811
    """`afterok` on a job that failed: Slurm keeps the job for ever (as plain Slurm does), and
    `queue` listed it as #1 with nothing said."""
    from lucidd.admin_cli import status_data

    cfg, clock, slurm, store, lucidd = cluster(enabled=False)
    rec_ = lucidd()
    slurm.submit(9, partition="main", gpus=1, dependency="afterok:8(unfulfilled)")
    run_cycles(rec_, clock, 10)
    slurm.jobs[9].reason = "DependencyNeverSatisfied"
    run_cycles(rec_, clock, 10)
    row = store.job(9)
    assert "Slurm may never start it in main (DependencyNeverSatisfied)" in row.profile_reason
    assert "dependency=" in row.profile_reason
    assert [x["job_id"] for x in status_data(cfg, store, now=clock.t)["jobs_needing_attention"]] == [9]


def test_partition_max_time_is_read_from_scontrol():
    from lucidd.backends.slurm import parse_partitions, slurm_minutes_s

    assert [slurm_minutes_s(t) for t in ("UNLIMITED", "30", "1:30", "1:30:00", "2-00:00:00", "2-12", "odd")] == \
        [None, 1800, 90, 5400, 172800, 216000, None]
    parts = parse_partitions("PartitionName=research MaxTime=00:05:00 State=UP\nPartitionName=main State=UP", {})
    assert parts["research"].max_time_s == 300 and parts["main"].max_time_s is None


def _with_research(cluster, **settings):  # noqa: F811
    """A lucidd (no lending, no skip when free) on a cluster with partition research, whose Partition
    Slurm reports with `settings` (MaxTime, access lists, ...)."""
    cfg, clock, slurm, store, lucidd = cluster(lend_idle_gpus=False, skip_when_free=False)
    slurm.partitions.append("research")
    orig = slurm.snapshot

    def snapshot():
        snap = orig()
        for k, v in settings.items():
            setattr(snap.partitions["research"], k, v)
        return snap

    slurm.snapshot = snapshot
    return cfg, clock, slurm, store, lucidd()


@pytest.mark.parametrize("kw,why", [({"time_limit_s": 600}, "above research's MaxTime (300 s)"),
                                    ({"gpus": 20}, "more than research has (16)")])
def test_a_job_its_partition_can_never_start_is_not_profiled_first(cluster, kw, why):  # noqa: F811
    """`-p research -t 10` with research's MaxTime 5 min: the job ran 21 s in profiling, then pended
    with PartitionTimeLimit for ever (flagged only then). It goes to its partition unprofiled now."""
    cfg, clock, slurm, store, rec_ = _with_research(cluster, max_time_s=300)
    slurm.submit(18, partition="research", **({"gpus": 1} | kw))
    run_cycles(rec_, clock, 10)
    row = store.job(18)
    assert row.phase == "released" and row.profile == "skipped" and why in row.profile_reason
    assert slurm.jobs[18].partition == "research"


def test_partition_access_lists_are_read_and_judged():
    """scontrol's AllowAccounts, DenyAccounts, AllowQos and DenyQos as 22.05 prints them."""
    from lucidd.backends.slurm import parse_partitions

    parts = parse_partitions("PartitionName=main AllowGroups=ALL AllowAccounts=research,Vision DenyQos=normal "
                             "State=UP\nPartitionName=open AllowAccounts=ALL DenyQos= AllowQos=ALL State=UP\n"
                             "PartitionName=deny AllowAccounts=ALL DenyAccounts=root State=UP", {})
    main, open_, deny = parts["main"], parts["open"], parts["deny"]
    assert main.refuses("root", "high") == "AllowAccounts=research,Vision"
    assert main.refuses("vision", "high") is None  # Slurm keeps account names in lower case
    assert main.refuses("research", "normal") == "DenyQos=normal"
    assert main.refuses("", "") is None  # not known: not judged
    assert open_.refuses("root", "normal") is None
    assert deny.refuses("root", "normal") == "DenyAccounts=root" and deny.refuses("research", "") is None


@pytest.mark.parametrize("access,asked,why", [
    ({"AllowAccounts": "research"}, "research", "research (AllowAccounts=research) does not let in its account root"),
    ({"DenyQos": "normal"}, "research", "research (DenyQos=normal) does not let in its QOS normal"),
    ({"AllowAccounts": "research"}, "research,main", None),  # main lets it in: profiled as before
])
def test_a_job_its_partition_keeps_out_is_not_profiled(cluster, access, asked, why):  # noqa: F811
    """main with AllowAccounts=research (seen on 22.05): the move of a root job is accepted and the job
    pends for ever, AccountNotAllowed, as plain Slurm leaves it. Profiling lets every account in, so a
    profiling run first gave it GPUs its partition's lists deny it."""
    cfg, clock, slurm, store, rec_ = _with_research(cluster, access=dict(access))
    slurm.submit(19, partition=asked, gpus=1, account="root", qos="normal")
    run_cycles(rec_, clock, 10)
    row = store.job(19)
    if why is None:
        assert row.profile != "skipped" and slurm.jobs[19].partition == "profiling"
    else:
        assert row.phase == "released" and row.profile == "skipped" and why in row.profile_reason
        assert slurm.jobs[19].partition == "research"


def test_a_completing_requeue_is_not_taken_for_a_new_start(cluster):  # noqa: F811
    """A requeue completing on a node that did not answer (COMPLETING for a minute) carried a start
    time explain then told as a start that never happened."""
    cfg, clock, slurm, store, lucidd = cluster(lend_idle_gpus=False, skip_when_free=False)
    rec_ = lucidd()
    start_profiling_run(rec_, clock, slurm, 84)
    run_cycles(rec_, clock, 10)
    first = store.job(84).start_time
    slurm.jobs[84].state, slurm.jobs[84].start_time = "COMPLETING", int(clock.t) + 5
    run_cycles(rec_, clock, 20)
    assert store.job(84).start_time == first


# ----- a warning signal before the requeue (lucid:signal= in the comment) -----------------------

def _asking_run(cluster, job_id, tag, **profiler):  # noqa: F811
    """A lucidd and one 1-GPU run started in profiling whose comment is `tag` (one Tprof, 600 s)."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False,
                                               **({"long_tprof_s": 0} | profiler))
    rec = lucidd()
    j = slurm.submit(job_id, partition="main", gpus=1, comment=tag)
    run_cycles(rec, clock, 10)
    slurm.start(job_id)
    return rec, clock, slurm, store, j


def test_the_requeue_warning_is_read_from_the_comment():
    assert _rec(comment="lucid:signal=B:USR1@90").requeue_warning == ("USR1", True, 90)
    assert _rec(comment="lr=0.1 lucid:signal=SIGUSR2@30 x").requeue_warning == ("USR2", False, 30)
    assert _rec(comment="lucid:signal=usr1@5").requeue_warning == ("USR1", False, 5)
    assert _rec(comment="exp42,lucid:signal=USR1@90;lr=0.1").requeue_warning == ("USR1", False, 90)
    for bad in ("lucid:signal=KILL@30", "lucid:signal=USR1", "lucid:signal=USR1@", "xlucid:signal=USR1@9", ""):
        assert _rec(comment=bad).requeue_warning is None, bad


def test_a_job_that_asks_is_signalled_once_before_each_requeue_point(cluster):  # noqa: F811
    """An admin trial (28 November 2026): a job that checkpoints on SIGUSR1 (PyTorch Lightning's
    auto-requeue, submitit) got no warning before lucidd's requeue, which sends only SIGTERM, and
    lost its profiling run."""
    rec, clock, slurm, store, j = _asking_run(cluster, 5, "lucid:signal=B:USR1@60")
    run_cycles(rec, clock, 530)
    assert slurm.signals == []  # more than 60 s before Tprof (600 s)
    run_cycles(rec, clock, 40)
    assert slurm.signals == [(5, "USR1", True)]  # once, in the minute before the requeue
    run_cycles(rec, clock, 40)
    assert slurm.signals == [(5, "USR1", True)] and store.job(5).phase in ("requeued", "released")
    (act,) = [a for a in store.actions_for(5) if a.kind == "signal"]
    assert act.status == "applied" and "before its requeue at Tprof 600 s" in act.reason
    # a job that did not ask gets none
    slurm.submit(6, partition="main", gpus=1)
    run_cycles(rec, clock, 10)
    slurm.start(6)
    run_cycles(rec, clock, 620)
    assert [s for s in slurm.signals if s[0] == 6] == []


def test_a_run_whose_own_limit_ends_it_gets_no_warning(cluster):  # noqa: F811
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False, long_tprof_s=0)
    rec = lucidd()
    j = slurm.submit(7, partition="main", gpus=1, comment="lucid:signal=USR1@60")
    j.time_limit_s = 600  # Slurm ends it at Tprof: no requeue comes, its own --signal is for that
    run_cycles(rec, clock, 10)
    slurm.start(7)
    run_cycles(rec, clock, 600)
    assert slurm.signals == []


def test_a_run_kept_past_tprof_is_warned_again_before_long_tprof(cluster):  # noqa: F811
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False, long_tprof_s=1200,
                                               long_share=1.0)
    rec = lucidd()
    slurm.submit(8, partition="main", gpus=1, comment="lucid:signal=USR1@60")
    run_cycles(rec, clock, 10)
    slurm.start(8)
    run_cycles(rec, clock, 620)  # warned before 600 s; kept as a long run, not requeued
    assert slurm.signals == [(8, "USR1", False)] and store.job(8).phase == "profiling"
    run_cycles(rec, clock, 600)
    assert slurm.signals == [(8, "USR1", False)] * 2  # and again before 1,200 s
    assert store.job(8).phase in ("requeued", "released")


# A review (28 November 2026) found requeues without the warning: it went out only if a cycle
# happened to fall in the last SECONDS before Tprof, and the requeue never waited for it.

def _signalled_before_requeue(slurm, jid):
    calls = [c[0] for c in slurm.calls if jid in c[1] and c[0] in ("signal", "requeue")]
    return calls and calls[0] == "signal" and "requeue" in calls


def test_a_warning_shorter_than_a_cycle_is_sent_late_and_the_requeue_waits_for_it(cluster):  # noqa: F811
    rec, clock, slurm, store, j = _asking_run(cluster, 5, "lucid:signal=B:USR1@5")
    run_cycles(rec, clock, 600)  # ran 600: the warning goes now, not the requeue
    assert slurm.signals == [(5, "USR1", True)] and not [c for c in slurm.calls if c[0] == "requeue"]
    run_cycles(rec, clock, 10)  # 10 s later (>= 5 s): the requeue
    assert _signalled_before_requeue(slurm, 5) and slurm.signals == [(5, "USR1", True)]


def test_a_cycle_that_fails_in_the_window_only_delays_the_requeue(cluster):  # noqa: F811
    from lucidd.backends.base import BackendError

    rec, clock, slurm, store, j = _asking_run(cluster, 6, "lucid:signal=USR1@15")
    run_cycles(rec, clock, 580)
    snap = slurm.snapshot
    slurm.snapshot = lambda: (_ for _ in ()).throw(BackendError("squeue: Socket timed out"))
    clock.t += 10
    assert not rec.cycle().ok  # ran 590: the one cycle in [585, 600) fails
    slurm.snapshot = snap
    run_cycles(rec, clock, 40)
    assert _signalled_before_requeue(slurm, 6)
    (sig,) = [a for a in store.actions_for(6) if a.kind == "signal"]
    (rq,) = [a for a in store.actions_for(6) if a.kind == "requeue"]
    assert rq.applied_at - sig.applied_at >= 15  # the time it asked for to save


def test_a_warning_slurm_refuses_holds_the_run_at_most_half_the_grace(cluster):  # noqa: F811
    rec, clock, slurm, store, j = _asking_run(cluster, 7, "lucid:signal=USR1@300")
    from lucidd.backends.base import BackendError

    def refused(job_id, sig, batch_only):  # scancel fails at every try, with no text (a job that just ended)
        slurm.calls.append(("signal", (job_id,)))
        raise BackendError("", transient=True)

    slurm.signal = refused
    run_cycles(rec, clock, 590)
    assert [c for c in slurm.calls if c[0] == "signal"] and not [c for c in slurm.calls if c[0] == "requeue"]
    assert store.job(7).phase == "profiling"  # the failed signals cut no cycle short
    run_cycles(rec, clock, 40)  # Tprof 600 s + grace / 2 (30 s): requeued without it
    assert [c for c in slurm.calls if c[0] == "requeue"] == [("requeue", (7,))]


def test_a_reclaimed_lent_run_is_warned_first(tmp_path):
    from orchestrator.live import LucidDecider

    from .test_decider import make_cfg

    d = LucidDecider(make_cfg(tmp_path, profiler={"lend_idle_gpus": True, "reclaim_lent": True,
                                                  "long_tprof_s": 3600}))
    run = lj(1, 1, partition="profiling", state="RUNNING", start_time=NOW - 1800, node_names=("gpu3",),
             comment="lucid:signal=B:USR1@120")
    records = {1: rec(run, profile="admitted", phase="profiling")}
    records[1].lent = True
    x = inp(profiling=[run], records=records)
    x.busy_nodes = frozenset({"gpu3"})
    plan = d.decide(x)
    assert [s[0] for s in plan.signal] == [1] and not plan.requeue  # warned, not yet reclaimed
    x.signalled = {(1, 0, 0): NOW - 40}  # sent 40 s ago: half the grace (30 s) has passed
    plan = d.decide(x)
    assert [jid for jid, _ in plan.requeue] == [1] and not plan.signal


@pytest.mark.parametrize("change", [{"user": "bob"}, {"submit_time_shift": 3600}])
def test_a_job_given_an_old_jobs_id_is_a_new_job(cluster, change):  # noqa: F811
    """slurmctld restarted without its state and gave job 1's id to another job (a review on a test
    cluster): taken for the old job, released to research, the new job went there unprofiled, and
    `explain` told both jobs' actions as one story."""
    from lucidd.admin_cli import explain_data

    cfg, clock, slurm, store, lucidd = cluster(lend_idle_gpus=False, skip_when_free=False)
    slurm.partitions.append("research")
    rec_ = lucidd()
    slurm.submit(1, partition="research", gpus=1, user="alice")
    run_cycles(rec_, clock, 20)
    assert slurm.jobs[1].partition == "profiling"
    slurm.start(1)
    run_cycles(rec_, clock, 700)  # its Tprof (600 s), its requeue and release to research
    assert slurm.jobs[1].partition == "research" and store.job(1).phase == "released"
    old = store.job(1)
    # slurmctld's state is lost; the id comes again, for a new job of main, in the inbox
    clock.t += 60
    del slurm.jobs[1]
    new = slurm.submit(1, partition="main", gpus=1, user=change.get("user", "alice"))
    new.submit_time += change.get("submit_time_shift", 0)
    run_cycles(rec_, clock, 20)
    row = store.job(1)
    assert row.first_seen > old.first_seen and row.requested_partition == "main"
    assert slurm.jobs[1].partition == "profiling" and row.profile == "admitted"
    story = " | ".join(explain_data(cfg, store, 1, now=clock.t)["story"])
    assert "research" not in story and "requeue" not in story, story


@pytest.mark.parametrize("seen_after_s, requeued_again", [(10, True), (600, False)])
def test_a_restart_that_began_in_profiling_is_requeued_again(cluster, seen_after_s, requeued_again):  # noqa: F811
    """The owner's `scontrol update jobid=X starttime=now` while its requeue waited in profiling: the
    restart began there, and the job ran to its end in profiling, ahead of every queue (a review on a
    test cluster). A restart lucidd sees only long after it began (lucidd was away) is left to finish."""
    cfg, clock, slurm, store, lucidd = cluster(lend_idle_gpus=False, skip_when_free=False)
    rec_ = lucidd()
    start_profiling_run(rec_, clock, slurm, 31)
    # Tprof reached: requeued; the restart begins in profiling before the cycle that would release it
    while store.job(31).profile != "requeued":
        run_cycles(rec_, clock, 10)
    j = slurm.jobs[31]
    assert j.partition == "profiling" and j.pending
    j.state, j.start_time = "RUNNING", int(clock.t)
    clock.t += seen_after_s - 10
    run_cycles(rec_, clock, 10)
    requeues = [c for c in slurm.job_calls(31) if c[0] == "requeue"]
    assert len(requeues) == (2 if requeued_again else 1), slurm.job_calls(31)
    if requeued_again:
        run_cycles(rec_, clock, 20)
        assert slurm.jobs[31].partition == "main"


def test_one_empty_squeue_reply_closes_no_record(cluster):  # noqa: F811
    """A well-formed squeue reply listing no job while lucidd followed some closed every record as
    GONE; at the next read each was a job first seen (a review). Once is taken for a bad reply; a
    second empty reply is believed."""
    cfg, clock, slurm, store, lucidd = cluster(lend_idle_gpus=False, skip_when_free=False)
    rec_ = lucidd()
    start_profiling_run(rec_, clock, slurm, 41)
    first_seen = store.job(41).first_seen
    kept = dict(slurm.jobs)
    slurm.jobs.clear()
    clock.t += 10
    assert not rec_.cycle().ok
    slurm.jobs.update(kept)
    run_cycles(rec_, clock, 10)
    row = store.job(41)
    assert row.phase != "done" and row.first_seen == first_seen
    slurm.jobs.clear()
    clock.t += 10
    assert not rec_.cycle().ok
    run_cycles(rec_, clock, 10)  # empty again: believed
    assert store.job(41).phase == "done" and store.job(41).final_state == "GONE"


@pytest.mark.parametrize("change,why", [({"requeue": False}, "not to be requeued"),
                                        ({"comment": "lucid:noprofile"}, "lucid:noprofile")])
def test_a_job_its_owner_opts_out_after_its_admission_leaves_profiling_before_it_starts(decider, change, why):  # noqa: F811
    """Admitted and still waiting in profiling, its owner set requeue=0 (lucidd's requeue at Tprof
    would be refused: the run stayed in profiling to its end, holding the room) or the documented
    opt-out comment (ignored: the job was profiled and requeued all the same). A review."""
    later = lj(1, 8, partition="profiling", reason="Resources", **change)
    records = {1: rec(later, first_seen=NOW - 30, profile="admitted", phase="profiling")}
    plan = decider.decide(inp([], profiling=[later], records=records, profiling_gpus=16))
    assert ids_(plan.release) == [1] and why in reasons(plan.release)[1], plan
