"""`--dry-run` never leaves decisions a live lucidd would act on.

Found on the test cluster by an admin's first trial (27 November 2026): `lucidd --once --dry-run`,
the config check docs/config.md recommends before a restart, recorded "admitted to profiling" for a
job in the live database; the live daemon then believed the job was on its way and left it in the
DOWN inbox for good. Now a check (`--once --dry-run`) writes nothing, and a live and a shadow lucidd
never share a database at the same time.
"""

from __future__ import annotations

import inspect
import os

import pytest

from lucidd.daemon import Daemon
from lucidd.errors import LucidError
from lucidd.live.config import config_from_dict
from lucidd.live.store import ReadOnlyStore, Store

from .memslurm import Clock, MemSlurm


@pytest.fixture
def setup(tmp_path):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path / "state"), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")},
                            "profiler": {"tprof_s": 600, "skip_when_free": False}})
    clock = Clock()
    slurm = MemSlurm(clock)

    started = []

    def daemon(dry_run=False, check=False):
        # each call is a new process: the ones before have ended (killed, or stopped), and their
        # instance locks went with them
        for earlier in started:
            earlier.store.release_instance_lock()
        d = Daemon(cfg, dry_run=dry_run, check=check, backend=slurm, clock=clock)
        started.append(d)
        d.start()
        return d

    return cfg, clock, slurm, daemon


def _snapshot(url):
    s = Store(url)
    return ({j: (r.phase, r.profile) for j, r in s.jobs().items()},
            [(a.key, a.status) for a in s.recent_actions(1000)],
            len(s.last_cycles(1000)), s.get_meta("last_ok_cycle"), s.get_meta("dry_run"))


def test_a_check_writes_nothing_and_the_live_daemon_still_profiles_the_job(setup):
    cfg, clock, slurm, daemon = setup
    live = daemon()
    clock.t += 10
    assert live.run_once()
    slurm.submit(41, partition="main", gpus=1)
    before = _snapshot(cfg.database.url)
    clock.t += 1
    check = daemon(dry_run=True, check=True)
    assert check.run_once()
    assert isinstance(check.store, ReadOnlyStore)
    assert _snapshot(cfg.database.url) == before  # no job row, action, cycle or meta written
    assert slurm.jobs[41].partition == "inbox" and not slurm.job_calls(41)  # nothing sent to Slurm
    assert not slurm.inbox_up
    clock.t += 9
    live = daemon()  # restarted after the check, as the admin did: it reads its state from the database
    assert live.run_once()
    assert slurm.jobs[41].partition == "profiling"  # it acts on the job as if no check had run
    assert Store(cfg.database.url).job(41).profile == "admitted"


def test_a_check_on_a_database_lucidd_never_used_creates_nothing(setup, tmp_path):
    cfg, clock, slurm, daemon = setup
    path = cfg.database.url.removeprefix("sqlite:///")
    slurm.submit(7, partition="main", gpus=2)
    check = daemon(dry_run=True, check=True)
    assert check.run_once()
    assert not os.path.exists(path)
    assert slurm.jobs[7].partition == "inbox" and not slurm.calls


@pytest.mark.parametrize("first_dry", [False, True])
def test_a_live_and_a_shadow_lucidd_never_run_on_one_database_at_once(setup, first_dry):
    cfg, clock, slurm, daemon = setup
    first = daemon(dry_run=first_dry)
    clock.t += 10
    assert first.run_once()
    clock.t += 15
    with pytest.raises(LucidError, match="stop it first"):
        daemon(dry_run=not first_dry)
    daemon(dry_run=first_dry)  # a restart in the same mode is always allowed
    daemon(dry_run=True, check=True)  # and a check, which writes nothing


def test_a_live_start_after_a_shadow_drops_its_open_decisions_and_adopts_the_jobs(setup):
    cfg, clock, slurm, daemon = setup
    shadow = daemon(dry_run=True)
    slurm.submit(5, partition="main", gpus=1)
    slurm.submit(6, partition="main", gpus=1)
    clock.t += 10
    assert shadow.run_once()
    store = Store(cfg.database.url)
    assert store.job(5) is not None
    assert any(a.status == "dry-run" for a in store.recent_actions(100))
    slurm.jobs[6].partition, slurm.jobs[6].state = "main", "COMPLETED"  # ended meanwhile
    clock.t += 3600  # the shadow stopped an hour ago
    live = daemon()
    assert store.job(5) is None and not any(a.status == "dry-run" for a in store.recent_actions(100))
    clock.t += 10
    assert live.run_once()
    assert slurm.jobs[5].partition == "profiling" and store.job(5).profile == "admitted"


def test_the_read_only_store_drops_every_write_of_the_store():
    reads = {"ping", "get_meta", "jobs", "open_jobs", "started_jobs", "job", "applied_keys", "actions_for",
             "recent_actions", "action_log", "record_counts", "last_cycles", "recorded_cycles", "history",
             "history_count", "history_fingerprint",
             "gpu_profiles", "profiling_gpu_profiles", "hold_instance_lock", "release_instance_lock", "instance_lock_alive",
             "gpu_sampler_nodes", "gpu_nodes", "model_versions", "session", "has_state", "schema_version", "signals_sent",
             "refuse_newer_schema", "file_replaced", "planned_since", "db_time"}
    public = {n for n, _ in inspect.getmembers(Store, inspect.isfunction) if not n.startswith("_")}
    # a new Store method must be classed here: a write that reached the database would break checks
    assert public == reads | ReadOnlyStore.WRITES, sorted(public ^ (reads | ReadOnlyStore.WRITES))


def test_status_says_stopped_after_an_orderly_stop_and_not_running_once_failopen_would_act(setup):
    """`lucidctl status` said "healthy" 15 s after a kill -9 (fail-open after 10 s had already
    opened the inbox) and after an orderly stop: its window was max(3 x interval, 30 s) alone."""
    from lucidd.admin_cli import status_data

    cfg, clock, slurm, daemon = setup
    live = daemon()
    clock.t += 10
    assert live.run_once()
    store = Store(cfg.database.url)
    d = status_data(cfg, store, now=clock.t + 5)
    assert d["healthy"] and d["stopped_at"] is None
    # killed: no stop recorded; past failopen_after_s (60 s by default) it is not healthy
    assert not status_data(cfg, store, now=clock.t + cfg.daemon.failopen_after_s + 1)["healthy"]
    clock.t += 5
    live.stop("lucidd stopped")
    d = status_data(cfg, store, now=clock.t + 1)
    assert not d["healthy"] and d["stopped_at"] == pytest.approx(clock.t)
    assert slurm.inbox_up  # the stop gave the inbox back
    restarted = daemon()
    clock.t += 10
    assert restarted.run_once()
    d = status_data(cfg, store, now=clock.t + 1)
    assert d["healthy"] and d["stopped_at"] is None


def test_status_on_a_database_lucidd_never_used_says_so(tmp_path):
    """It printed the database's own words (`relation "meta" does not exist`)."""
    import argparse
    import sqlite3

    from lucidd.admin_cli import _open

    db = tmp_path / "empty.db"
    sqlite3.connect(db).execute("CREATE TABLE other (x INTEGER)").connection.commit()
    cfg = tmp_path / "lucidd.toml"
    cfg.write_text(f'[database]\nurl = "sqlite:///{db}"\n[daemon]\nstate_dir = "{tmp_path}"\n')
    with pytest.raises(LucidError, match=r"database sqlite:///\S+ has no lucidd state yet \(has lucidd run"):
        _open(argparse.Namespace(config=str(cfg)))


def test_explain_does_not_count_a_shadows_site_factor_as_set(setup):
    """It printed "SiteFactor set 1 time(s)" for a value a dry run never sent to Slurm."""
    from lucidd.admin_cli import explain_data
    from lucidd.backends.base import LiveJob

    cfg, clock, slurm, daemon = setup
    shadow = daemon(dry_run=True)
    for jid in (8, 9):  # pending in main, as a shadow sees jobs (no inbox); wider than Nprof: ordered at once
        slurm.jobs[jid] = LiveJob(jid, partition="main", gpus=12, submit_time=int(clock()))
    clock.t += 10
    assert shadow.run_once()
    store = Store(cfg.database.url)
    assert any(a.kind == "sitefactor" and a.status == "dry-run" for j in (8, 9) for a in store.actions_for(j))
    story = " | ".join(explain_data(cfg, store, 9)["story"] + explain_data(cfg, store, 8)["story"])
    assert "SiteFactor set" not in story and "not set in Slurm [dry-run]" in story, story


def test_a_check_on_a_host_lucidd_never_ran_on_creates_no_folder_or_file(tmp_path):
    """`lucidd --once --dry-run` made STATE_DIR (/var/lib/lucidd by default), the database's folder
    and the model store while saying it writes nothing anywhere."""
    state, dbdir, models = tmp_path / "never" / "made", tmp_path / "otherdb", tmp_path / "models"
    cfg = config_from_dict({"daemon": {"state_dir": str(state), "interval_s": 10},
                            "database": {"url": f"sqlite:///{dbdir}/x.db"}, "models": {"dir": str(models)}})
    clock = Clock()
    slurm = MemSlurm(clock)
    slurm.submit(5, partition="main", gpus=1)
    check = Daemon(cfg, dry_run=True, check=True, backend=slurm, clock=clock)
    check.start()
    clock.t += 10
    assert check.run_once()
    assert sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.rglob("*"))
    assert slurm.jobs[5].partition == "inbox" and not slurm.job_calls(5)


def test_a_slow_cycle_is_logged(setup, caplog):
    """A paused PostgreSQL held one cycle for 49 s and lucidd said nothing (the admin trial,
    27 November 2026): a cycle longer than half the fail-open delay (or three intervals) is logged."""
    cfg, clock, slurm, daemon = setup
    live = daemon()
    real = live.reconciler.cycle

    def slow():
        row = real()
        row.seconds = 95.0
        return row

    live.reconciler.cycle = slow
    with caplog.at_level("WARNING", logger="lucidd"):
        assert live.run_once()
    assert any("reconcile took 95.0 s" in r.getMessage() for r in caplog.records), caplog.text
    caplog.clear()
    live.reconciler.cycle = real
    clock.t += 10
    with caplog.at_level("WARNING", logger="lucidd"):
        assert live.run_once()
    assert not any("reconcile took" in r.getMessage() for r in caplog.records)


def test_a_database_outage_is_in_status_after_it(setup):
    """Nothing can be written while the database is down, so `status` showed no trace of an outage
    (the admin trial, 27 November 2026): lucidd records it when the database is back."""
    from lucidd.admin_cli import status_data
    from lucidd.live.store import StoreError

    cfg, clock, slurm, daemon = setup
    live = daemon()
    real = live.reconciler.cycle

    def down():
        raise StoreError("connection refused (test)")

    live.reconciler.cycle = down
    assert not live.run_once()
    assert status_data(cfg, live.store)["last_database_outage"] is None
    clock.t += 40
    live.reconciler.cycle = real
    assert live.run_once()
    outage = status_data(cfg, live.store)["last_database_outage"]
    assert outage["seconds"] == 40.0 and "connection refused (test)" in outage["error"]


@pytest.mark.parametrize("interval_s,failopen_s,cycle_s,logged", [
    (60, 120, 100, True),  # past half the fail-open delay, though under three intervals (the review)
    (60, 120, 50, False),
    (1, 60, 6, True),  # three intervals, floored at 5 s
    (1, 60, 4, False),
])
def test_the_slow_cycle_bound_is_the_sooner_of_half_failopen_and_three_intervals(tmp_path, caplog, interval_s,
                                                                                 failopen_s, cycle_s, logged):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path / "state"), "interval_s": interval_s,
                                       "failopen_after_s": failopen_s},
                            "models": {"dir": str(tmp_path / "models")}})
    clock = Clock()
    d = Daemon(cfg, backend=MemSlurm(clock), clock=clock)
    d.start()
    real = d.reconciler.cycle

    def slow():
        row = real()
        row.seconds = float(cycle_s)
        return row

    d.reconciler.cycle = slow
    with caplog.at_level("WARNING", logger="lucidd"):
        assert d.run_once()
    assert any("reconcile took" in r.getMessage() for r in caplog.records) == logged


def test_a_shadow_says_when_its_inbox_holds_jobs_for_nobody(setup, caplog):
    """docs/deploy.md runs the shadow without job_submit.lua or with the inbox UP; with the inbox
    DOWN, jobs routed there waited for nobody and the shadow said only "would profile" (the admin
    trial, 27 November 2026)."""
    cfg, clock, slurm, daemon = setup
    shadow = daemon(dry_run=True)
    slurm.submit(1, partition="main", gpus=1)
    with caplog.at_level("ERROR", logger="lucidd"):
        for _ in range(3):
            clock.t += 10
            assert shadow.run_once()
    said = [r.getMessage() for r in caplog.records if "a dry-run lucidd moves no job" in r.getMessage()]
    assert len(said) == 1 and "1 job(s) wait there" in said[0]  # once per 10 minutes, not every cycle
    assert slurm.jobs[1].partition == "inbox" and not slurm.inbox_up  # and it still changes nothing


def test_the_first_cycle_after_a_start_orders_with_the_stored_history(tmp_path):
    """The history lucidd keeps in its database is read before the first cycle, so a job ordered
    then gets the rule's estimate at once, not the constant and a second value the cycle after (the
    review: every restart flapped each new job's SiteFactor once; under repeated --once, for good)."""
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path / "state"), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")}, "profiler": {"enabled": False}})
    clock = Clock()
    slurm = MemSlurm(clock)
    store = Store(cfg.database.url).create()
    store.add_history([{"job_id": 100 + k, "name": "x", "user": "alice", "partition": "main", "gpus": 1,
                        "submit_time": int(clock.t) - 5000, "start_time": int(clock.t) - 4000,
                        "end_time": int(clock.t) - 3960, "duration": 40, "state": "COMPLETED"} for k in range(5)])
    slurm.submit(1, partition="main", gpus=1)
    d = Daemon(cfg, backend=slurm, clock=clock)
    d.start()
    assert d.run_once()
    row = Store(cfg.database.url).job(1)
    assert row.estimate_source.startswith("fallback:") and row.estimate_s == 40.0, (row.estimate_s,
                                                                                    row.estimate_source)


def test_a_shadow_runs_its_profiling_virtually_within_the_capacity_and_tprof(tmp_path):
    """A shadow's profiling was a sketch: the jobs it would have profiled stayed "in profiling" in
    its records until they ended, and none counted against the capacity, so it would have profiled
    every job at once. Now each would-be run is a virtual one: it holds profiling room from the
    cycle that admits it, is requeued at Tprof and released, and a job that ends before Tprof
    would have finished in profiling. Slurm is never asked anything."""
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path / "state"), "interval_s": 10},
                            "models": {"dir": str(tmp_path / "models")},
                            "profiler": {"tprof_s": 600, "capacity_gpus": 2, "skip_when_free": False,
                                         "lend_idle_gpus": False}})
    clock = Clock()
    slurm = MemSlurm(clock)
    slurm.inbox_up = True  # a shadow runs without job_submit.lua: jobs go where they were sent
    for jid in (1, 2, 3, 4):
        slurm.submit(jid, partition="main", gpus=1).partition = "main"
    shadow = Daemon(cfg, dry_run=True, backend=slurm, clock=clock)
    shadow.start()

    def state():
        return {j: (r.phase, r.profile) for j, r in shadow.store.jobs().items()}

    clock.t += 10
    assert shadow.run_once()
    assert state() == {1: ("profiling", "admitted"), 2: ("profiling", "admitted"),
                       3: ("inbox", "pending"), 4: ("inbox", "pending")}  # 2 GPUs of room: 2 runs
    for jid in (1, 2, 3, 4):  # Slurm starts them all in main, as it would without lucidd
        slurm.start(jid)
    clock.t += 300
    slurm.end(2)  # 310 s after its virtual run began: it would have ended in profiling
    assert shadow.run_once()
    assert state()[2] == ("done", "finished")
    assert "virtual profiling run" in shadow.store.job(2).profile_reason
    assert state()[3] == ("profiling", "admitted") and state()[4] == ("inbox", "pending")  # 2's room
    clock.t += 300  # job 1's virtual run reaches Tprof 600 s
    assert shadow.run_once()
    assert state()[1] == ("requeued", "requeued")
    clock.t += 10
    assert shadow.run_once()
    assert state()[1] == ("released", "released") and state()[4] == ("profiling", "admitted")
    assert not slurm.calls  # nothing sent to Slurm
    kinds = [(a.kind, a.status) for a in shadow.store.actions_for(1)]
    assert ("requeue", "dry-run") in kinds and ("release", "dry-run") in kinds
    assert all(slurm.jobs[j].partition == "main" for j in (1, 3, 4))
    from lucidd.admin_cli import explain_data, queue_data
    story = " | ".join(explain_data(cfg, shadow.store, 1)["story"])
    assert "dry-run: would have started its profiling run" in story, story
    assert [b["job_id"] for b in queue_data(cfg, shadow.store)["profiling"]] == [3, 4]


def test_explain_does_not_say_a_job_first_seen_outside_the_inbox_asked_for_that_partition(setup):
    """A job running when lucidd started was said to have asked for the partition it was found in;
    lucidd never saw what it asked for (no job_submit.lua record)."""
    from lucidd.admin_cli import explain_data
    from lucidd.backends.base import LiveJob

    cfg, clock, slurm, daemon = setup
    slurm.jobs[5] = LiveJob(5, partition="research", gpus=2, submit_time=int(clock()))
    slurm.start(5)
    live = daemon()
    clock.t += 10
    assert live.run_once()
    first = explain_data(cfg, Store(cfg.database.url), 5)["story"][0]
    assert "first seen in partition research" in first and "in partition research" not in first.split("(")[0], first


class _Watchdog:
    """Notifier stand-in: what lucidd tells systemd."""

    def __init__(self):
        self.pings = []

    def watchdog(self, status=""):
        self.pings.append(status)

    def __getattr__(self, name):  # ready, stopping, ...: nothing to record
        return lambda *a, **k: True


def test_a_cycle_that_changes_thousands_of_jobs_feeds_the_watchdog_and_the_heartbeat_as_it_goes(tmp_path):
    """A first start on a full queue moves and orders every job (44 s at 10,000 jobs on the test
    cluster, minutes at more): the watchdog (WatchdogSec=120s) and the heartbeat (failopen after
    60 s) heard from lucidd only at the cycle's end, so systemd killed such a cycle and
    lucidd-failopen opened the inbox under it. Now each batch Slurm takes says lucidd is alive."""
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path / "state")},
                            "models": {"dir": str(tmp_path / "models")}})
    clock = Clock()
    slurm = MemSlurm(clock)
    notifier = _Watchdog()
    d = Daemon(cfg, backend=slurm, clock=clock, notifier=notifier)
    d.start()
    for jid in range(1, 1201):
        slurm.submit(jid, partition="main", gpus=0)  # CPU jobs: straight to their partition, ordered there
    beat = cfg.daemon.heartbeat_file
    os.utime(beat, (0, 0))
    seen = []
    real = slurm.set_site_factor

    def set_site_factor(ids, value):
        seen.append(os.stat(beat).st_mtime)  # the heartbeat as each batch is sent
        return real(ids, value)

    slurm.set_site_factor = set_site_factor
    clock.t += 10
    assert d.run_once()
    under_way = [p for p in notifier.pings if p.startswith("cycle under way")]
    assert len(under_way) >= 4, notifier.pings  # 1,200 moves and 1,200 SiteFactors, 500 a batch
    assert seen[0] == 0 and seen[-1] > 0  # touched after the first batch, before the cycle's end
    assert all(slurm.jobs[j].partition == "main" for j in (1, 1200))


def test_a_dry_run_cycle_touches_no_heartbeat_as_it_goes(tmp_path):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path / "state")},
                            "models": {"dir": str(tmp_path / "models")}})
    d = Daemon(cfg, dry_run=True, backend=MemSlurm(Clock()), clock=Clock())
    assert d.reconciler.progress is None
