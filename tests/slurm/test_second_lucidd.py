"""Two lucidd on the real test cluster with two databases (a copy of the config on a second host):
the instance lock cannot see it. Each job must still run once in profiling and once in its
partition, and the lucidd that finds a run it did not admit must say so (docs/deploy.md, "One
lucidd per cluster")."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from lucidd.live.store import Store

from .conftest import (VENV_BIN, active_jobs, failopen, partition_up, sacct_runs, sbatch, squeue, wait_until,
                       write_config)

pytestmark = pytest.mark.slurm


def test_two_lucidd_with_two_databases(clean_cluster, tmp_path, job_script, lucidd_factory):
    # the second looks every 4 s: most jobs are moved by the first before it sees them in the inbox
    # (a job both see there in the same second is admitted by both, unseen; its requeue still goes once)
    cfgs = [write_config(tmp_path / "a.toml", tmp_path / "a"),
            write_config(tmp_path / "b.toml", tmp_path / "b", daemon={"interval_s": 4.0, "failopen_after_s": 20.0})]
    first = lucidd_factory(cfgs[0], log_name="a.log").start()
    time.sleep(1.5)  # the two cycle out of step, as two hosts would
    second = lucidd_factory(cfgs[1], log_name="b.log").start()
    time.sleep(5)
    ids = []
    for k in range(6):
        ids.append(sbatch(job_script, 14, "--gres=gpu:1", name=f"j{k}"))
        time.sleep(1.5)
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] in ids], 150, "all jobs to finish")
    runs = sacct_runs(ids)
    for j in ids:  # one run in profiling, requeued once, then one in main: none requeued twice, none lost
        assert [r[:2] for r in runs[j]] == [("profiling", "REQUEUED"), ("main", "COMPLETED")], (j, runs[j])
    found = [json.loads(Store(f"sqlite:///{tmp_path / n / 'lucidd.db'}").get_meta("other_scheduler") or "null")
             for n in ("a", "b")]
    assert found[1], (found, first.text()[-3000:], second.text()[-3000:])
    which = 1
    assert "by something other than this lucidd" in (first, second)[which].text()
    out = subprocess.run([str(VENV_BIN / "lucidctl"), "--json", "status", "--config", str(cfgs[which])],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["other_scheduler"]["jobs_last_hour"] >= 1, out.stderr
    text = subprocess.run([str(VENV_BIN / "lucidctl"), "status", "--config", str(cfgs[which])],
                          capture_output=True, text=True, timeout=60).stdout
    assert "ANOTHER SCHEDULER moves jobs into profiling" in text, text
    assert second.stop() == 0 and first.stop() == 0


def test_a_standby_lucidd_takes_over_when_the_active_one_dies(clean_cluster, tmp_path, job_script, lucidd_factory):
    """Two controllers (a backup slurmctld): lucidd on both, one PostgreSQL database, the state folder
    (heartbeat, models) on storage both see, `[daemon] standby = true` (docs/deploy.md, "A backup
    controller"). The active one is killed (SIGKILL: its host died) while a job runs in profiling;
    the standby takes the lock, adopts that run, requeues it at Tprof, and profiles the next job."""
    from .test_live_daemon import _fresh_pg_database

    url = _fresh_pg_database(clean_cluster["LUCIDD_TEST_PG_URL"], f"lucidd_h{os.getpid()}")
    shared = tmp_path / "shared-state"
    cfgs = [write_config(tmp_path / f"{n}.toml", shared, db_url=url, daemon={"standby": True}) for n in ("a", "b")]
    active = lucidd_factory(cfgs[0], log_name="a.log").start()
    wait_until(lambda: "started" in active.text(), 30, "the first lucidd to start")
    backup = lucidd_factory(cfgs[1], log_name="b.log").start()
    wait_until(lambda: "standby: another lucidd holds" in backup.text(), 30, "the second to stand by")
    # the standby touches nothing: failopen, reading the shared heartbeat, sees a running lucidd
    assert failopen(cfgs[1]).returncode == 0 and not partition_up("inbox")
    first = sbatch(job_script, 20, "--gres=gpu:1", name="before")
    wait_until(lambda: any(j["job_id"] == first and j["partition"] == "profiling" and j["job_state"] == "RUNNING"
                           for j in squeue()), 30, "the first job to run in profiling")
    active.stop(signal.SIGKILL)
    wait_until(lambda: "takes over" in backup.text(), 30, "the standby to take over")
    second = sbatch(job_script, 14, "--gres=gpu:1", name="after")
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] in (first, second)], 150, "both jobs to finish")
    runs = sacct_runs([first, second])
    for j in (first, second):
        assert [r[:2] for r in runs[j]] == [("profiling", "REQUEUED"), ("main", "COMPLETED")], (j, runs[j])
    assert not partition_up("inbox")
    assert backup.stop() == 0 and partition_up("inbox")
