"""lucidd on a site that preempts by partition tier (PreemptType=preempt/partition_prio), against
the real slurmctld: a job started in the profiling partition (PriorityTier 2) would preempt running
jobs of lower tiers. Seen on this cluster before lucidd knew it (2 December 2026): a 1-GPU job in
profiling while every GPU was taken, and Slurm requeued an 8-GPU job of `main` to start it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from lucidd.live.store import Store

from .conftest import active_jobs, sacct_runs, sbatch, sh, squeue, wait_until, write_config

pytestmark = pytest.mark.slurm

PREEMPTION = "PreemptType=preempt/partition_prio\nPreemptMode=REQUEUE\n"


@pytest.fixture
def partition_prio(clean_cluster):
    """slurm.conf with preemption by partition tier, switched on with `scontrol reconfigure` (which
    takes PreemptType at once on 22.05) and off again after the test."""
    conf = Path(os.environ["SLURM_CONF"])
    before = conf.read_text()
    conf.write_text(PREEMPTION + before)
    try:
        sh("scontrol", "reconfigure")
        wait_until(lambda: "preempt/partition_prio" in sh("scontrol", "show", "config"), 30, "PreemptType")
        yield
    finally:
        sh("scancel", "--user", "root", check=False)
        conf.write_text(before)
        sh("scontrol", "reconfigure")
        wait_until(lambda: "preempt/none" in sh("scontrol", "show", "config"), 30, "PreemptType back")


def test_lucidd_profiles_nobody_while_a_profiling_run_would_preempt(partition_prio, tmp_path, job_script,
                                                                   lucidd_factory):
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    daemon = lucidd_factory(cfg).start().started()
    nodes = [f"gpu{i}" for i in range(1, 5)]  # the test cluster's 4 nodes x 8 GPUs (scripts/testcluster.sh)
    blockers = [sbatch(job_script, 40, "-w", n, "--gres=gpu:8", "--comment", "lucid:noprofile", name=f"block-{n}")
                for n in nodes]
    wait_until(lambda: sum(j["job_id"] in blockers and j["job_state"] == "RUNNING" for j in squeue()) == len(blockers),
               60, "the blockers to hold every GPU")
    job = sbatch(job_script, 4, "--gres=gpu:1", name="would-preempt")
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    wait_until(lambda: (r := store.job(job)) is not None and r.phase == "released", 30, "the job's release")
    row = store.job(job)
    assert row.profile == "skipped" and "would preempt running jobs of" in row.profile_reason, row
    time.sleep(3)  # a few of Slurm's scheduling passes: nobody is preempted for it
    running = {j["job_id"] for j in squeue() if j["job_state"] == "RUNNING"}
    assert set(blockers) <= running and any(j["job_id"] == job and j["job_state"] == "PENDING" for j in squeue())
    (warning,) = [w for w in json.loads(store.get_meta("slurm_warnings")) if w.startswith("PreemptType=")]
    assert "main (PriorityTier 1, PreemptMode REQUEUE)" in warning and "PreemptMode=OFF" in warning
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] in [job, *blockers]], 120, "all jobs to finish")
    runs = sacct_runs([job, *blockers])
    daemon.stop()
    for b in blockers:  # one run each: none was requeued to make room
        assert [r[:2] for r in runs[b]] == [("main", "COMPLETED")], runs[b]
    assert [r[:2] for r in runs[job]] == [("main", "COMPLETED")], runs[job]
    assert "would preempt" in daemon.text()
