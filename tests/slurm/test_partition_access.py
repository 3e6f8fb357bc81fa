"""A partition whose access lists keep a job out (AllowAccounts, DenyQos, ...), against the real
slurmctld. Slurm 22.05 accepts the move of such a job from the inbox and keeps it pending for ever
(AccountNotAllowed), as plain Slurm keeps it when submitted there; profiling lets every account in,
so lucidd profiled it first: GPUs its partition's lists deny it (seen on this cluster, 2 December
2026)."""

from __future__ import annotations

import pytest

from lucidd.live.store import Store, StoreError

from .conftest import sbatch, sh, squeue, wait_until, write_config

pytestmark = pytest.mark.slurm


def _row(store, job_id):
    """The job's row, None before lucidd has made its tables (it starts beside this test)."""
    try:
        return store.job(job_id)
    except StoreError:
        return None


@pytest.fixture
def research_for_its_account(clean_cluster):
    """`research` open to the `research` account alone (root's default account is root)."""
    sh("scontrol", "update", "partitionname=research", "allowaccounts=research")
    try:
        yield
    finally:
        sh("scancel", "--user", "root", check=False)
        sh("scontrol", "update", "partitionname=research", "allowaccounts=ALL")


def test_a_job_its_partition_keeps_out_goes_there_unprofiled(research_for_its_account, tmp_path, job_script,
                                                             lucidd_factory):
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state")
    daemon = lucidd_factory(cfg).start()
    kept_out = sbatch(job_script, 30, "-p", "research", "--gres=gpu:1", name="kept-out")
    let_in = sbatch(job_script, 30, "-p", "research", "-A", "research", "--gres=gpu:1", name="let-in")
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    wait_until(lambda: (r := _row(store, kept_out)) is not None and r.phase == "released", 30, "the release")
    wait_until(lambda: (r := _row(store, let_in)) is not None and r.profile_start is not None, 30, "a profiling run")
    row = store.job(kept_out)
    assert row.profile == "skipped" and "research (AllowAccounts=research) does not let in its account root" \
        in row.profile_reason, row
    wait_until(lambda: any(j["job_id"] == kept_out and j["state_reason"] == "AccountNotAllowed" for j in squeue()),
               30, "Slurm's reason")
    wait_until(lambda: "Slurm may never start it in research (AccountNotAllowed)" in store.job(kept_out).profile_reason,
               30, "the never-start flag")
    assert store.job(kept_out).profile_start is None
    daemon.stop()
