"""What an admin trial of operating faults found (28 November 2026, a helper's own cluster, 333
jobs): a requeue sent on a stale look at Slurm, and one sent right after a slurmctld restart, each
ran a job that had already ended a second time (Slurm 22.05 requeues a finished job too)."""

from __future__ import annotations

import json
import os

import pytest

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


def test_a_run_that_ends_after_the_re_check_is_left_alone_by_slurm_and_counted_as_finished(cluster):
    """Between the re-check and the requeue request (milliseconds) a run can still end: `scontrol
    requeue Incomplete` makes slurmctld itself leave an ended job alone (plain `requeue` ran it again)."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 9)
    states = slurm.job_states

    def check_then_end(ids):
        seen = states(ids)  # RUNNING: the check passes ...
        slurm.end(9)  # ... and the run ends before slurmctld takes the requeue
        return seen

    slurm.job_states = check_then_end
    run_cycles(rec, clock, 600)
    slurm.job_states = states
    assert [c for c in slurm.calls if c[0] == "requeue"] == [("requeue", (9,))]
    j = slurm.jobs[9]
    assert j.state == "COMPLETED" and j.restart_count == 0  # not run again
    run_cycles(rec, clock, 20)
    row = store.job(9)
    assert row.phase == "done" and row.profile == "finished", (row.phase, row.profile, row.profile_reason)
    assert "as lucidd requeued it" in row.profile_reason and "did not run again" in row.profile_reason


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


def _daemon(tmp_path, slurm, clock, dry_run=False, check=False, **slurm_keys):
    from lucidd.daemon import Daemon
    from lucidd.live.config import config_from_dict

    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path / "state"), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")}, "slurm": slurm_keys})
    return Daemon(cfg, dry_run=dry_run, check=check, backend=slurm, clock=clock)


def test_a_partition_slurm_does_not_have_stops_a_start_with_the_key_named(tmp_path):
    """A misspelled inbox left jobs in the real, DOWN inbox behind a lucidd that said healthy."""
    import pytest

    from lucidd.errors import ConfigError

    from .memslurm import Clock, MemSlurm

    clock = Clock()
    slurm = MemSlurm(clock)
    for keys in ({"inbox_partition": "inbx"}, {"default_partition": "mian"}, {"managed_partitions": ["main", "gpu"]}):
        with pytest.raises(ConfigError, match=r'\[slurm\] \w+ = "(inbx|mian|gpu)": Slurm has no such partition'):
            _daemon(tmp_path, slurm, clock, **keys).start()
    # a shadow runs before the inbox and profiling partitions exist (the rollout's order)
    slurm.partitions = ["main"]
    _daemon(tmp_path, slurm, clock, dry_run=True).start()
    assert not slurm.calls


def test_a_heartbeat_that_cannot_be_written_stops_a_start_and_never_crashes_a_cycle(tmp_path, monkeypatch, caplog):
    import pytest

    from lucidd.errors import ConfigError
    from lucidd.live import reconcile

    from .memslurm import Clock, MemSlurm

    clock = Clock()
    slurm = MemSlurm(clock)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "heartbeat").mkdir()  # not a file: cannot be written
    with pytest.raises(ConfigError, match="heartbeat_file .*cannot be written"):
        _daemon(tmp_path, slurm, clock).start()
    (tmp_path / "state" / "heartbeat").rmdir()
    d = _daemon(tmp_path, slurm, clock)
    d.start()
    assert reconcile.heartbeat_age(str(tmp_path / "state" / "heartbeat")) > 10 ** 9  # made, but proves nothing yet

    def full(path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(reconcile, "touch_heartbeat", full)
    clock.t += 10
    d.run_once()  # no traceback: the failure is said
    assert "heartbeat" in caplog.text and "No space left on device" in caplog.text


def test_a_check_beside_a_live_lucidd_does_not_cry_stuck_jobs(tmp_path, caplog):
    from .memslurm import Clock, MemSlurm

    clock = Clock()
    slurm = MemSlurm(clock)
    slurm.submit(3, partition="main")  # in the DOWN inbox, which the live lucidd empties
    check = _daemon(tmp_path, slurm, clock, dry_run=True, check=True)
    check.start()
    clock.t += 10
    assert check.run_once()
    assert "wait there" not in caplog.text


def test_a_second_lucidd_on_the_same_database_is_refused_until_the_first_stops(tmp_path):
    import pytest

    from lucidd.errors import LucidError

    from .memslurm import Clock, MemSlurm

    clock = Clock()
    slurm = MemSlurm(clock)
    first = _daemon(tmp_path, slurm, clock)
    first.start()
    for dry_run in (False, True):
        with pytest.raises(LucidError, match="another lucidd .* runs on"):
            _daemon(tmp_path, slurm, clock, dry_run=dry_run).start()
    calls = len(slurm.calls)
    check = _daemon(tmp_path, slurm, clock, dry_run=True, check=True)
    check.start()  # a check writes nothing and runs beside it
    first.stop("lucidd stopped")
    assert len(slurm.calls) > calls  # the first's stop, not the refused ones', opened the inbox
    second = _daemon(tmp_path, slurm, clock)
    second.start()
    second.stop("lucidd stopped")


def test_status_shows_the_running_daemons_values_and_what_the_file_changed(tmp_path):
    """`lucidctl status --config edited.toml` printed the edited file's Tprof as the daemon's, and
    judged health with its interval (an admin trial)."""
    from lucidd.admin_cli import status_data
    from lucidd.live.config import config_from_dict
    from lucidd.live.store import Store

    from .memslurm import Clock, MemSlurm

    clock = Clock()
    slurm = MemSlurm(clock)
    d = _daemon(tmp_path, slurm, clock)
    d.start()
    edited = config_from_dict({"daemon": {"state_dir": str(tmp_path / "state"), "interval_s": 10},
                               "models": {"dir": str(tmp_path / "models")}, "profiler": {"tprof_s": 60}})
    st = status_data(edited, Store(edited.database.url), now=clock.t)
    assert st["profiling"]["tprof_s"] == d.cfg.profiler.tprof_s != 60
    assert st["config_differs"] == ["profiler.tprof_s"]
    same = status_data(d.cfg, Store(d.cfg.database.url), now=clock.t)
    assert same["config_differs"] == []


def test_status_with_the_database_down_still_says_how_old_the_heartbeat_is(tmp_path, capsys):
    import os

    from lucidd.cli import main

    cfg = tmp_path / "lucidd.toml"
    state = tmp_path / "state"
    state.mkdir()
    (state / "heartbeat").write_text("")
    cfg.write_text(f'[daemon]\nstate_dir = "{state}"\n[database]\n'
                   'url = "postgresql+psycopg://nobody@127.0.0.1:9/none"\n')
    os.utime(state / "heartbeat", None)
    assert main(["status", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "heartbeat here is" in err and "fail-open after" in err, err


def test_slurmctlds_start_is_read_as_unix_seconds_whatever_the_time_format():
    """Read as local text it was an hour off in the hour a DST change repeats, and unreadable under
    an admin's SLURM_TIME_FORMAT, which turned the restart hold off without a word (a review)."""
    from lucidd.backends.slurm import SlurmBackend

    class Runner:
        def run(self, argv, timeout_s=None, env=None):
            self.env = env
            assert argv == ["scontrol", "show", "config"]
            return "Configuration data as of 1795827598\nBOOT_TIME               = 1795827598\nClusterName = t\n"

    runner = Runner()
    assert SlurmBackend(runner).controller_boot_time() == 1795827598 and runner.env == {"SLURM_TIME_FORMAT": "%s"}


def test_the_requeues_of_one_cycle_share_one_read_of_slurmctlds_start(cluster):
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    reads = []
    slurm.controller_boot_time = lambda: reads.append(1) or None
    rec = lucidd()
    for jid in (11, 12, 13, 14):
        slurm.submit(jid, partition="main", gpus=1)
    run_cycles(rec, clock, 10)
    for jid in (11, 12, 13, 14):
        slurm.start(jid)
    run_cycles(rec, clock, 600)
    assert len([c for c in slurm.calls if c[0] == "requeue"]) == 4 and len(reads) == 1


def test_three_heartbeats_not_written_stop_lucidd_in_order(tmp_path, monkeypatch):
    """Logged and survived, one failed write made lucidd-failopen open the inbox and the next cycle
    close it, over and over (a review): after three, lucidd stops (exit 2, the inbox opens)."""
    import pytest

    from lucidd.daemon import HeartbeatUnwritable
    from lucidd.live import reconcile

    from .memslurm import Clock, MemSlurm

    clock = Clock()
    slurm = MemSlurm(clock)
    d = _daemon(tmp_path, slurm, clock)
    d.start()

    def full(path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(reconcile, "touch_heartbeat", full)
    for _ in range(2):
        clock.t += 10
        d.run_once()
    clock.t += 10
    with pytest.raises(HeartbeatUnwritable, match="three cycles running"):
        d.run_once()
    d.stop("lucidd stopped")
    assert slurm.inbox_up


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_database_file_deleted_under_lucidd_stops_it_in_order(tmp_path, how):
    """`rm lucidd.db*` while lucidd ran: it went on writing to the deleted file, `lucidctl status` said
    there was no database, and all it knew was gone at its next start (a review). It stops in order
    now (the inbox opens; exit 1, so systemd starts it again on a new database)."""
    import shutil

    from lucidd.daemon import DatabaseFileGone
    from lucidd.live.store import sqlite_file

    d, slurm, clock = _running_daemon(tmp_path)
    path = sqlite_file(d.cfg.database.url)
    if how == "deleted":
        os.unlink(path)
    else:
        shutil.copy(path, path + ".new")
        os.replace(path + ".new", path)
    clock.t += 10
    with pytest.raises(DatabaseFileGone, match=f"was {how} while lucidd ran"):
        d.run_once()
    d.stop("lucidd stopped")
    assert slurm.inbox_up


def test_a_lost_instance_lock_taken_by_another_lucidd_stops_this_one_giving_nothing_back(tmp_path, monkeypatch):
    import pytest

    from lucidd.daemon import InstanceLockLost

    from .memslurm import Clock, MemSlurm

    clock = Clock()
    slurm = MemSlurm(clock)
    d = _daemon(tmp_path, slurm, clock)
    d.start()
    slurm.submit(5, partition="main")
    monkeypatch.setattr(d.store, "instance_lock_alive", lambda: False)  # its database restarted...
    monkeypatch.setattr(d.store, "hold_instance_lock", lambda: False)  # ... and another lucidd took it
    clock.t += 10
    with pytest.raises(InstanceLockLost, match="another lucidd took"):
        d.run_once()
    calls = list(slurm.calls)
    d.stop("lucidd stopped")
    assert slurm.calls == calls and not slurm.inbox_up  # the other lucidd's inbox and jobs: untouched


def test_a_stop_in_the_cycle_that_requeued_a_job_waits_for_the_requeue_and_releases_it(tmp_path):
    """The stop looked once, saw the job still completing its requeue, and left it in profiling,
    where Slurm restarts it ahead of every queue with nobody to requeue it (a trial)."""
    from .memslurm import Clock, MemSlurm

    clock = Clock()
    slurm = MemSlurm(clock)
    d = _daemon(tmp_path, slurm, clock)
    d.start()
    j = slurm.submit(9, partition="main")
    j.partition, j.state, j.restart_count = "profiling", "COMPLETING", 1  # requeued a moment ago
    j.submit_time = int(clock.t) - 5
    real = slurm.snapshot
    looks = []

    def snapshot():
        looks.append(1)
        if len(looks) == 2:  # PENDING at the stop's second look
            slurm.jobs[9].state = "PENDING"
        return real()

    slurm.snapshot = snapshot
    d.stop("lucidd stopped")
    assert slurm.jobs[9].partition == "main" and len(looks) >= 2


# -- a review of the database path (2 December 2026) -------------------------------------------------


def _running_daemon(tmp_path):
    """(daemon, slurm, clock): a started lucidd on an in-memory cluster, after one good cycle."""
    from .memslurm import Clock, MemSlurm

    clock = Clock()
    slurm = MemSlurm(clock)
    d = _daemon(tmp_path, slurm, clock)
    d.start()
    clock.t += 10
    assert d.run_once()
    return d, slurm, clock


def _flaky_applied(store, kinds=None):
    """store.record_actions failing when an action is marked applied (the database died after the send)."""
    from lucidd.live.store import StoreError

    real = store.record_actions

    def flaky(items, now, status, error=""):
        if status == "applied" and (kinds is None or any(it[2] in kinds for it in items)):
            raise StoreError("database sqlite unavailable (session): disk I/O error (test)")
        return real(items, now, status, error)

    store.record_actions = flaky
    return real


def test_a_database_error_mid_cycle_does_not_leave_an_ended_job_open(tmp_path):
    """The cached records were reset only when their own save failed: a cycle cut short later (here
    marking a move applied) kept a cache without the job that ended in it, and its row stayed open
    for as long as lucidd ran (`lucidctl queue` showed the cancelled job pending, #1)."""
    from lucidd.admin_cli import queue_data

    from .memslurm import Clock, MemSlurm

    clock = Clock()
    slurm = MemSlurm(clock)
    d = _daemon(tmp_path, slurm, clock)
    d.start()
    slurm.submit(1, partition="main", gpus=0)  # a CPU job: straight to main
    for _ in range(2):
        clock.t += 10
        assert d.run_once()
    assert d.store.job(1).phase == "released"
    slurm.end(1, state="CANCELLED")
    slurm.submit(2, partition="main", gpus=0)
    real = _flaky_applied(d.store)
    clock.t += 10
    assert not d.run_once()  # failed open
    d.store.record_actions = real
    for _ in range(3):
        clock.t += 10
        assert d.run_once()
    del slurm.jobs[1]  # gone from squeue too
    clock.t += 10
    assert d.run_once()
    row = d.store.job(1)
    assert (row.phase, row.final_state) == ("done", "CANCELLED")
    assert [b["job_id"] for b in queue_data(d.cfg, d.store)["pending"]] == [2]


def test_a_warning_signal_is_not_sent_again_when_the_database_failed_after_sending_it(tmp_path):
    """Sent, then not marked applied (the database failed): once it was back the job was signalled a
    second time (a job whose handler checkpoints and requeues itself would do that twice)."""
    from lucidd.daemon import Daemon
    from lucidd.live.config import config_from_dict

    from .memslurm import Clock, MemSlurm

    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path / "state"), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")},
                            "profiler": {"tprof_s": 600, "lend_idle_gpus": False, "skip_when_free": False,
                                         "long_tprof_s": 0}})
    clock = Clock()
    slurm = MemSlurm(clock)
    d = Daemon(cfg, backend=slurm, clock=clock)
    d.start()
    slurm.submit(5, partition="main", gpus=1, comment="lucid:signal=B:USR1@60")
    clock.t += 10
    assert d.run_once() and slurm.jobs[5].partition == "profiling"
    slurm.start(5)
    real = _flaky_applied(d.store, kinds={"signal"})
    for _ in range(60):
        clock.t += 10
        ok = d.run_once()
        if slurm.signals:
            break
    assert not ok and len(slurm.signals) == 1
    d.store.record_actions = real
    for _ in range(12):  # back: past the warning's lead, to Tprof
        clock.t += 10
        d.run_once()
    assert len(slurm.signals) == 1
    assert [c for c in slurm.calls if c[0] == "requeue"] == [("requeue", (5,))]  # requeued after the one warning


def test_after_an_outage_the_instance_lock_is_checked_before_anything_is_written(tmp_path):
    """Recovery upgraded the schema (create) before it checked the lock: with the lock taken by a
    newer lucidd meanwhile, SchemaTooNew escaped instead of InstanceLockLost, and the stop that
    followed gave the other lucidd's jobs away."""
    import pytest

    from lucidd.daemon import InstanceLockLost
    from lucidd.live.store import SchemaTooNew, StoreError

    d, slurm, clock = _running_daemon(tmp_path)
    real = d.reconciler.cycle
    d.reconciler.cycle = lambda: (_ for _ in ()).throw(StoreError("server closed the connection (test)"))
    clock.t += 10
    assert not d.run_once()
    d.reconciler.cycle = real

    def newer():
        raise SchemaTooNew("the database has schema 99, written by a newer lucidd (test)")

    d.store.create = newer
    d.store.instance_lock_alive = lambda: False  # the server restarted: the lock's session is gone
    d.store.hold_instance_lock = lambda: False  # and another lucidd holds it now
    clock.t += 10
    with pytest.raises(InstanceLockLost):
        d.run_once()
    assert d.lock_lost


def test_a_database_that_reads_and_refuses_writes_is_not_said_to_be_back(tmp_path, caplog):
    """A read-only remount or a full disk: ping answered, so every cycle of the outage logged
    "database is back ... lucidd resumes" and the real error only once."""
    from sqlalchemy import event

    caplog.set_level("INFO")
    d, slurm, clock = _running_daemon(tmp_path)

    @event.listens_for(d.store.engine, "connect")
    def read_only(dbapi_conn, _record):
        dbapi_conn.execute("PRAGMA query_only=ON")  # writes fail: "attempt to write a readonly database"

    d.store.engine.dispose()
    for _ in range(4):
        clock.t += 10
        assert not d.run_once()
    assert not [r for r in caplog.records if "database is back" in r.getMessage()]
    assert len([r for r in caplog.records if r.levelname == "ERROR" and "database" in r.getMessage()]) == 1  # once
    event.remove(d.store.engine, "connect", read_only)
    d.store.engine.dispose()
    clock.t += 10
    assert d.run_once()
    assert [r for r in caplog.records if "database is back" in r.getMessage()]


def test_a_first_cut_database_gets_every_column_the_model_has(tmp_path):
    """Schema 1's first cut had no jobs.started_ahead_of: the upgrade stamped schema 5 and every read
    of the jobs table failed, which lucidd took for an outage (failing open every cycle)."""
    from sqlalchemy import create_engine

    from lucidd.live.store import JobRow, Store

    url = f"sqlite:///{tmp_path / 'lucidd.db'}"
    Store(url).create().engine.dispose()
    raw = create_engine(url)
    with raw.begin() as c:
        c.exec_driver_sql("ALTER TABLE jobs DROP COLUMN started_ahead_of")
        c.exec_driver_sql("ALTER TABLE jobs DROP COLUMN partition_ran")  # one with a default
        c.exec_driver_sql("ALTER TABLE jobs DROP COLUMN time_limit_s")  # schema 5's, before schema 1-4 databases
        c.exec_driver_sql("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    raw.dispose()
    s = Store(url).create()
    assert s.open_jobs() == {}
    s.save_jobs([JobRow(job_id=1, first_seen=1, original_submit=1, requested_partition=None, target_partition="main",
                        name="t", user="u", account="a", gpus=1, started_ahead_of=2, time_limit_s=60)], new_ids={1})
    assert s.job(1).started_ahead_of == 2 and s.job(1).partition_ran == "" and s.job(1).time_limit_s == 60


def test_a_job_gone_from_squeue_before_lucidd_saw_it_end_gets_its_end_from_sacct(cluster):  # noqa: F811
    """MinJobAge=2: 7 of 7 short jobs left squeue between two cycles and were closed as GONE, their end
    and where they ended lost (a review on a test cluster). The next read of accounting mends them."""
    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    slurm.submit(50, partition="main", gpus=64)  # a bystander: squeue lists some job
    start_profiling_run(rec, clock, slurm, 51)
    started = slurm.jobs[51].start_time
    clock.t += 5
    ended = int(clock.t)
    del slurm.jobs[51]  # ended, and gone from squeue before the next cycle
    run_cycles(rec, clock, 10)
    assert store.job(51).final_state == "GONE"
    slurm.finished_jobs = lambda since, until=None: [
        {"job_id": 51, "name": "t", "user": "u", "partition": "profiling", "gpus": 1, "submit_time": started - 20,
         "start_time": started, "end_time": ended, "state": "FAILED", "nodes": "gpu1"},
        {"job_id": 52, "name": "t", "user": "u", "partition": "main", "gpus": 1, "submit_time": started,
         "start_time": started, "end_time": ended, "state": "COMPLETED", "nodes": "gpu1"}]  # not lucidd's
    rec.read_history(int(clock.t) + 3600)
    row = store.job(51)
    assert (row.final_state, row.end_time, row.start_time, row.partition_ran, row.profile) == \
        ("FAILED", ended, started, "profiling", "finished")
    assert "ended (FAILED) inside the profiling partition, 5 s after it started there" in row.profile_reason


def test_status_says_when_the_state_dir_is_full(tmp_path, capsys, monkeypatch):
    """A full state directory: lucidd failed open, and `lucidctl status` said only "NOT running",
    with nothing in recent_errors (a review on a test cluster)."""
    from types import SimpleNamespace

    from lucidd import admin_cli
    from lucidd.cli import main as lucidctl
    from lucidd.live.config import config_from_dict
    from lucidd.live.store import Store

    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)}, "models": {"dir": str(tmp_path / "models")}})
    Store(cfg.database.url).create().set_meta("lucidd_version", "test")
    config = tmp_path / "lucidd.toml"
    config.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n\n[models]\ndir = "{tmp_path / "models"}"\n')
    assert lucidctl(["status", "--config", str(config)]) in (0, 1)
    assert "disk of [daemon] state_dir is full" not in capsys.readouterr().out
    monkeypatch.setattr(admin_cli.os, "statvfs", lambda path: SimpleNamespace(f_bavail=3, f_frsize=4096))
    lucidctl(["status", "--config", str(config)])
    assert "the disk of [daemon] state_dir is full (12,288 bytes free)" in capsys.readouterr().out
    lucidctl(["--json", "status", "--config", str(config)])
    assert json.loads(capsys.readouterr().out)["state_dir_free_bytes"] == 12288


@pytest.mark.parametrize("lands", [True, False])
def test_a_requeue_an_earlier_lucidd_died_sending_is_not_sent_again_while_it_may_land(cluster, lands):  # noqa: F811
    """kill -9 while `scontrol requeue` was slow (a review): the new lucidd requeued and released the
    job, then the old call reached Slurm and killed its run in main (three runs). The new lucidd
    holds its requeue while the old call could still land; if it lands, the job goes on as requeued."""
    import pytest

    cfg, clock, slurm, store, lucidd = cluster(skip_when_free=False, lend_idle_gpus=False)
    rec = lucidd()
    for jid in (61, 62):
        start_profiling_run(rec, clock, slurm, jid)

    class Killed(BaseException):
        pass

    real = slurm.requeue
    late = []

    def dies(job_id):  # the call is under way when lucidd is killed; it reaches Slurm later (job 61)
        late.append(job_id)
        raise Killed()

    slurm.requeue = dies
    with pytest.raises(Killed):
        run_cycles(rec, clock, 600)
    slurm.requeue = real
    (first,) = late
    other = ({61, 62} - {first}).pop()
    rec = lucidd()  # restarted by systemd
    run_cycles(rec, clock, 30)
    assert ("requeue", (first,)) not in slurm.calls  # held: the old call may still land
    calls = len(slurm.calls)
    if lands:
        slurm.requeue(first)  # ... and it does
        calls = len(slurm.calls)
        run_cycles(rec, clock, 30)
        assert ("requeue", (first,)) not in slurm.calls[calls:]
    else:  # it never does: sent once the old call would have timed out (command_timeout_s 30 s + 60 s)
        run_cycles(rec, clock, 120)
        assert slurm.calls[calls:].count(("requeue", (first,))) == 1
    assert slurm.jobs[first].partition == "main" and slurm.jobs[first].restart_count == 1
    # the other job's requeue was never under way: the new lucidd sent it at once, as always
    assert ("requeue", (other,)) in slurm.calls and slurm.jobs[other].partition == "main"
