"""`[daemon] standby`: a backup controller's lucidd waits for the database's instance lock and takes
over when the active lucidd stops, instead of exiting 3 (and being restarted every 10 s by systemd,
one error line each time). While it waits it holds nothing and gives nothing back."""
from __future__ import annotations

import threading
import time

import pytest

from lucidd.daemon import Daemon
from lucidd.errors import LucidError
from lucidd.live.config import config_from_dict

from .memslurm import Clock, MemSlurm


@pytest.fixture
def pair(tmp_path):
    def make(standby=True):
        cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path / "state"), "interval_s": 0.2,
                                           "standby": standby},
                                "models": {"dir": str(tmp_path / "models")},
                                "profiler": {"tprof_s": 600, "skip_when_free": False}})
        return cfg

    clock = Clock()
    slurm = MemSlurm(clock)
    return make, clock, slurm


def test_a_standby_takes_over_when_the_active_lucidd_stops(pair):
    make, clock, slurm = pair
    active = _active_with_a_profiling_job(make, clock, slurm)
    assert not active.standing_by

    backup = Daemon(make(), backend=slurm, clock=clock)
    backup.start()
    assert backup.standing_by
    took = []
    waiting = threading.Thread(target=lambda: took.append(backup.stand_by()))
    waiting.start()
    time.sleep(1.0)
    assert waiting.is_alive() and not took, "took the lock another lucidd holds"
    assert not slurm.inbox_up and slurm.jobs[5].partition == "profiling"  # it touched nothing
    active.stop("the primary controller's lucidd stopped")
    assert slurm.inbox_up
    waiting.join(5)
    assert took == [True]
    backup.start()
    assert not backup.standing_by
    clock.t += 10
    assert backup.run_once() and not slurm.inbox_up  # acting: the inbox closed again
    slurm.submit(6, partition="main", gpus=1)
    clock.t += 10
    assert backup.run_once() and slurm.jobs[6].partition == "profiling"
    backup.stop("done")


def _active_with_a_profiling_job(make, clock, slurm) -> Daemon:
    """A running lucidd that has closed the inbox and admitted job 5 to profiling."""
    active = Daemon(make(), backend=slurm, clock=clock)
    active.start()
    clock.t += 10
    assert active.run_once()
    slurm.submit(5, partition="main", gpus=1)
    clock.t += 10
    assert active.run_once() and slurm.jobs[5].partition == "profiling" and not slurm.inbox_up
    return active


def test_a_standby_stopped_gives_nothing_back(pair):
    make, clock, slurm = pair
    active = _active_with_a_profiling_job(make, clock, slurm)
    backup = Daemon(make(), backend=slurm, clock=clock)
    backup.start()
    backup.stop_requested = True  # SIGTERM while it waits
    assert backup.stand_by() is False
    backup.stop("systemctl stop")
    assert not slurm.inbox_up and slurm.jobs[5].partition == "profiling", "the active lucidd's jobs were given away"
    clock.t += 10
    assert active.run_once()  # the active one still holds its lock and acts
    active.stop("done")


def test_without_standby_or_with_once_a_held_lock_is_an_error(pair):
    make, clock, slurm = pair
    active = Daemon(make(), backend=slurm, clock=clock)
    active.start()
    with pytest.raises(LucidError, match="stop it first"):
        Daemon(make(standby=False), backend=slurm, clock=clock).start()
    with pytest.raises(LucidError, match="stop it first"):  # `lucidd --once`: one cycle or an exit 3
        Daemon(make(), backend=slurm, clock=clock, once=True).start()
    active.stop("done")


class _Said:
    """A notifier that keeps what lucidd told systemd."""

    def __init__(self):
        self.said = []

    def ready(self, status=""):
        self.said.append("READY")

    def watchdog(self, status=""):
        self.said.append("WATCHDOG")

    def stopping(self, status=""):
        self.said.append("STOPPING")


def test_the_takeover_feeds_the_watchdog_around_the_start(pair, monkeypatch):
    """A review: READY goes out when the standby begins to wait, so WatchdogSec runs from then; at
    the takeover the start's Slurm checks and the first cycle came with no ping between them, and
    with slow Slurm replies (a controller failover) systemd would have killed it."""
    make, clock, slurm = pair
    active = Daemon(make(), backend=slurm, clock=clock)
    active.start()
    said = _Said()
    backup = Daemon(make(), backend=slurm, clock=clock, notifier=said)
    backup.start()
    active.stop("gone")
    assert backup.stand_by() is True
    real_start = backup.start
    monkeypatch.setattr(backup, "start", lambda: (said.said.append("start"), real_start()))
    backup.take_over()
    assert said.said[0] == "READY" and said.said[-3:] == ["WATCHDOG", "start", "WATCHDOG"], said.said
    assert not backup.standing_by
    backup.stop("done")


def test_a_stop_after_another_lucidd_took_the_lost_lock_gives_nothing_back(pair):
    """A review: after a PostgreSQL restart ended the active lucidd's lock session, a standby took the
    lock before the active one's next cycle; stopped then, the old one released jobs and opened the
    inbox, which were the new one's."""
    make, clock, slurm = pair
    old = _active_with_a_profiling_job(make, clock, slurm)
    old.store.instance_lock_alive = lambda: False  # its session ended with the restart
    old.store.hold_instance_lock = lambda: False  # and the standby holds the lock now
    old.stop("systemctl stop")
    assert not slurm.inbox_up and slurm.jobs[5].partition == "profiling"
    assert old.lock_lost
