"""What an admin trial of operating faults found (28 November 2026, a helper's own cluster, 333
jobs): a requeue sent on a stale look at Slurm, and one sent right after a slurmctld restart, each
ran a job that had already ended a second time (Slurm 22.05 requeues a finished job too)."""

from __future__ import annotations

from .test_reconcile_recovery import cluster, run_cycles, start_profiling_run  # noqa: F401 (fixture)


def test_a_run_that_ends_after_the_cycles_look_is_not_requeued(cluster):
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 7)
    # the job ends while the cycle that reaches Tprof waits on its database, after its snapshot
    slurm.before_requeue_check = lambda jid: slurm.end(jid)
    run_cycles(rec, clock, 600)
    assert not [c for c in slurm.calls if c[0] == "requeue"]
    (act,) = [a for a in store.actions_for(7) if a.kind == "requeue"]
    assert act.status == "failed" and "no requeue: Slurm shows the job COMPLETED" in act.error
    slurm.before_requeue_check = None
    run_cycles(rec, clock, 20)
    row = store.job(7)
    assert row.phase == "done" and row.profile == "finished"


def test_requeues_wait_until_a_restarted_slurmctld_has_settled(cluster):
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 8)
    run_cycles(rec, clock, 590)
    slurm.boot_time = int(clock.t)  # slurmctld restarted: a run that ended meanwhile still shows RUNNING
    run_cycles(rec, clock, 40)
    assert not [c for c in slurm.calls if c[0] == "requeue"] and store.job(8).phase == "profiling"
    run_cycles(rec, clock, 10)  # 50 s after the start: settled
    assert [c for c in slurm.calls if c[0] == "requeue"] == [("requeue", (8,))]
    assert store.job(8).phase == "requeued"
