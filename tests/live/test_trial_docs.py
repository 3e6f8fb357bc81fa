"""What an admin found following docs/deploy.md literally (27 November 2026, a helper's own test
cluster, 194 jobs): lucidd run as the shipped unit's user was refused every move and stranded jobs
behind a fresh heartbeat; a live start right after an orderly shadow stop was refused."""

from __future__ import annotations

import pytest

from lucidd.daemon import Daemon
from lucidd.live.config import config_from_dict
from lucidd.live.reconcile import SlurmDeniesLucidd

from .memslurm import Clock, MemSlurm


def _cfg(tmp_path, **profiler):
    return config_from_dict({"daemon": {"state_dir": str(tmp_path / "state"), "interval_s": 10},
                             "models": {"dir": str(tmp_path / "models")},
                             "profiler": {"tprof_s": 600, **profiler}})


def test_slurm_refusing_lucidds_moves_stops_it_instead_of_stranding_jobs(tmp_path):
    """The unit runs lucidd as `slurm`; job_submit.lua let only root move jobs out of the inbox, so
    Slurm answered every release "Access/permission denied" while lucidd's cycles counted as ok:
    the heartbeat stayed fresh, fail-open never came, the jobs waited in the DOWN inbox. Now the
    refusal stops lucidd (exit 2 from the command) and its stop opens the inbox."""
    cfg = _cfg(tmp_path, enabled=False)
    clock = Clock()
    slurm = MemSlurm(clock)
    slurm.submit(1, partition="main", gpus=1)
    slurm.fail[("move", 1)] = ("scontrol update jobid=1 partition=main: Access/permission denied", False, False)
    d = Daemon(cfg, backend=slurm, clock=clock)
    d.start()
    clock.t += 10
    with pytest.raises(SlurmDeniesLucidd, match="LUCIDD_USERS"):
        d.run_once()
    assert ("release", "failed") in [(a.kind, a.status) for a in d.store.actions_for(1)]
    d.stop("lucidd stopped")
    assert slurm.inbox_up  # Slurm schedules alone: the job runs (in the inbox, unmoved)


def test_a_live_start_right_after_an_orderly_shadow_stop_is_allowed(tmp_path):
    cfg = _cfg(tmp_path)
    clock = Clock()
    slurm = MemSlurm(clock)
    shadow = Daemon(cfg, dry_run=True, backend=slurm, clock=clock)
    shadow.start()
    clock.t += 10
    assert shadow.run_once()
    clock.t += 2
    shadow.stop("lucidd stopped")
    clock.t += 12  # the trial: refused 14 s after the stop ("stop it first")
    live = Daemon(cfg, backend=slurm, clock=clock)
    live.start()
    clock.t += 10
    assert live.run_once()


def _lucidd_once(tmp_path, fake, extra: str = ""):
    """`lucidd --config FILE --once` as an admin runs it, against the fake Slurm's commands."""
    import subprocess
    import sys
    from pathlib import Path

    from .fakeslurm import env_without_slurm

    cfg = tmp_path / "lucidd.toml"
    cfg.write_text(f'[slurm]\nbin_dir = "{fake.bin}"\ncommand_timeout_s = 10\n'
                   f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n{extra}'
                   f'[models]\ndir = "{tmp_path / "models"}"\n')
    return subprocess.run([str(Path(sys.executable).with_name("lucidd")), "--config", str(cfg), "--once"],
                          capture_output=True, text=True, timeout=120, env=env_without_slurm(), stdin=subprocess.DEVNULL)


def test_lucidd_once_exits_2_with_the_fix_when_slurm_refuses_its_moves(tmp_path):
    """The command an admin runs: one line naming the user and the fix, exit 2 (systemd does not
    restart it: RestartPreventExitStatus=2), and the inbox is left alone by a --once check."""
    from pathlib import Path

    from .fakeslurm import FakeSlurm

    fake = FakeSlurm(tmp_path / "bin").cluster(squeue="squeue_inbox.json")
    fake.script("scontrol", 'if [ "$1" = "-o" ]; then cat ' + str(Path(__file__).parent / "data" /
                                                                   "partitions_inbox_down.txt") + "; exit 0; fi\n"
                'case "$*" in *partition=*) echo "Access/permission denied for job" >&2; exit 1;; esac\nexit 0')
    r = _lucidd_once(tmp_path, fake, "[profiler]\nenabled = false\n")
    assert r.returncode == 2, (r.returncode, r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert "permission denied" in last.lower() and "LUCIDD_USERS" in last and "Traceback" not in r.stderr


def test_a_live_once_gives_the_jobs_back_at_its_end(tmp_path):
    """A review: a live `lucidd --once` closed the inbox and admitted jobs to profiling, then exited
    with nobody to requeue them at Tprof or to open the inbox (the fail-open timer may not be
    installed yet). It now gives them back as at a stop: its last Slurm call opens the inbox."""
    from .fakeslurm import FakeSlurm

    fake = FakeSlurm(tmp_path / "bin").cluster(squeue="squeue_inbox.json", partitions="partitions_inbox_down.txt")
    r = _lucidd_once(tmp_path, fake)
    assert r.returncode == 0, r.stderr
    updates = [c for c in fake.calls() if c[:2] == ["scontrol", "update"]]
    assert updates and updates[-1] == ["scontrol", "update", "partitionname=inbox", "state=UP"], updates
    assert "lucidd --once: one cycle, then the jobs given back" in r.stderr


def test_a_shadow_before_the_slurm_conf_changes_still_profiles_virtually(tmp_path, caplog):
    """docs/deploy.md's rollout runs the shadow before the inbox and profiling partitions exist: its
    profiling capacity was 0, so it profiled nothing, and `status` counted 1 ordered job of 15.
    The shadow now takes profiling to span the nodes it orders, and says so once."""
    cfg = _cfg(tmp_path, skip_when_free=False, lend_idle_gpus=False)
    clock = Clock()
    slurm = MemSlurm(clock, partitions=("main",))
    slurm.inbox_up = True
    for jid in (1, 2):
        slurm.submit(jid, partition="main", gpus=1).partition = "main"
    shadow = Daemon(cfg, dry_run=True, backend=slurm, clock=clock)
    shadow.start()
    with caplog.at_level("WARNING", logger="lucidd"):
        for _ in range(3):
            clock.t += 10
            assert shadow.run_once()
    assert {j: r.phase for j, r in shadow.store.jobs().items()} == {1: "profiling", 2: "profiling"}
    said = [r.getMessage() for r in caplog.records if "has no partition profiling" in r.getMessage()]
    assert len(said) == 1
    assert not slurm.calls


def test_an_orderly_stop_records_the_jobs_it_released(tmp_path, caplog):
    """lucidd's own stop gave its jobs back to Slurm without writing it down, and the next start
    warned of each one "moved there without a record of it" (an admin trial)."""
    cfg = _cfg(tmp_path, capacity_gpus=2, skip_when_free=False, lend_idle_gpus=False)
    clock = Clock()
    slurm = MemSlurm(clock)
    d = Daemon(cfg, backend=slurm, clock=clock)
    d.start()
    for jid in (1, 2, 3):
        slurm.submit(jid, partition="main", gpus=1)
    clock.t += 10
    assert d.run_once()
    assert [slurm.jobs[j].partition for j in (1, 2, 3)] == ["profiling", "profiling", "inbox"]
    slurm.start(1)
    clock.t += 610
    assert d.run_once()
    assert slurm.jobs[1].pending and slurm.jobs[1].restart_count == 1  # requeued, not yet released
    clock.t += 1
    d.stop("lucidd stopped")
    assert [slurm.jobs[j].partition for j in (1, 2, 3)] == ["main", "main", "main"]
    rows = d.store.jobs([1, 2, 3])
    assert [(rows[j].phase, rows[j].profile) for j in (1, 2, 3)] == [
        ("released", "released"), ("released", "skipped"), ("released", "skipped")]
    assert all("by lucidd's stop (lucidd stopped)" in rows[j].profile_reason for j in (1, 2, 3))
    from lucidd.admin_cli import explain_data

    story = " | ".join(explain_data(cfg, d.store, 3)["story"])
    assert "released outside lucidd's cycles: not profiled: released to main by lucidd's stop" in story, story
    caplog.clear()
    again = Daemon(cfg, backend=slurm, clock=clock)
    again.start()
    clock.t += 10
    assert again.run_once()
    assert "without a record" not in caplog.text
    assert [slurm.jobs[j].partition for j in (1, 2, 3)] == ["main", "main", "main"]
