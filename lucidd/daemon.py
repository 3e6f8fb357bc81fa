"""`lucidd`: the scheduling daemon on the Slurm controller.

    lucidd --config FILE [--once] [--dry-run]

Every `[daemon] interval_s` it runs one reconcile (lucidd/live/reconcile.py): read Slurm, let the
decider (Lucid) decide, apply only what changed, record why. `--once` runs a single reconcile and
exits 0 (or 1 if the cycle failed); `--dry-run` is the shadow mode: the inbox is left alone and
every decision is recorded but none is sent to Slurm. `--once --dry-run` is a check: one cycle,
its decisions logged, nothing written to Slurm, lucidd's database, the heartbeat or the models.

Exit codes: 0 done (orderly stop or --once ok), 1 a --once cycle failed, 2 bad config or
command line (one line naming the key; also a partition Slurm lacks, a heartbeat that cannot be
written, Slurm refusing lucidd's moves), 3 cannot start or go on (no Slurm, database unreachable at
start, another lucidd on the database).
`lucidd-failopen` is the separate guard a systemd timer runs (docs/deploy.md).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import signal
import sys
import threading
import time

from . import __version__
from .errors import ConfigError, LucidError

log = logging.getLogger("lucidd")


class InstanceLockLost(LucidError):
    """Another lucidd took the database's instance lock while this one had lost it (a database
    restart ends the session that held it): this one stops, and gives nothing back (the other runs)."""


class DatabaseFileGone(LucidError):
    """The SQLite file lucidd writes to was deleted or replaced under it: its writes reach no file
    anyone can read. lucidd stops in order (the inbox opens) with exit 1, and systemd starts it
    again on a new database, where it adopts the jobs it finds in Slurm."""


class HeartbeatUnwritable(LucidError):
    """The heartbeat could not be written three cycles running: lucidd stops in order (the inbox
    opens) rather than race lucidd-failopen, which opens the inbox whenever it looks."""


class _ZonedFormatter(logging.Formatter):
    """Times with their UTC offset (2026-11-28 00:10:47,851+0000), so that lines line up with
    another host's log (an admin trial could not without guessing)."""

    def formatTime(self, record, datefmt=None):
        ct = self.converter(record.created)
        return time.strftime("%Y-%m-%d %H:%M:%S", ct) + f",{int(record.msecs):03d}" + time.strftime("%z", ct)


def _setup_logging(level: str):
    handler = logging.StreamHandler(sys.stderr)  # journald takes stderr; one line per event
    # journald stamps each line itself (systemd sets JOURNAL_STREAM for a unit's stderr); run by
    # hand or under another supervisor, a line needs its own time (an admin trial had none)
    stamp = "" if os.environ.get("JOURNAL_STREAM") else "%(asctime)s "
    handler.setFormatter(_ZonedFormatter(stamp + "%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))


def _cycle_progress(notifier, heartbeat_file: str, changes: int):
    """Within a long cycle, after each batch of changes Slurm took: lucidd is alive and moving
    the inbox's jobs, so systemd's watchdog (WatchdogSec=120s) and lucidd-failopen's heartbeat
    bound (60 s) hear so. A first start on a full queue changes every job (20,000 changes at
    10,000 pending jobs, 44 s on the test cluster, minutes on a larger queue): before, systemd
    killed such a cycle and failopen opened the inbox under it."""
    from .live.reconcile import touch_heartbeat

    try:
        touch_heartbeat(heartbeat_file)
    except OSError:
        pass  # the end of the cycle writes it again, and counts its failures
    notifier.watchdog(f"cycle under way: {changes} changes made")


PING_EVERY_S = 5.0  # the most often lucidd pings the watchdog before Slurm commands


class _WatchdogBeforeSlurmCalls:
    """SlurmRunner.before_call: a watchdog ping before each Slurm command the main thread runs (at
    most one per `every_s`). Each command is bounded by [slurm] command_timeout_s, so a cycle of slow
    reads is lucidd waiting, not hung; before, a cycle's three reads had no ping between them, and a
    slurmctld slow to answer got lucidd killed by WatchdogSec and restarted into the same wall (a
    review: 8 s reads made 24 s cycles without a ping). Other threads (the refit) never ping: they
    must not hide a main loop that hangs."""

    def __init__(self, notifier, every_s: float = None, clock=time.monotonic):
        every_s = PING_EVERY_S if every_s is None else every_s
        self.notifier, self.every_s, self.clock = notifier, every_s, clock
        self.last = None

    def __call__(self, argv):
        if threading.current_thread() is not threading.main_thread():
            return
        now = self.clock()
        if self.last is not None and now - self.last < self.every_s:
            return
        self.last = now
        self.notifier.watchdog(f"waiting for Slurm: {' '.join(argv[:2])}")


class Daemon:
    def __init__(self, config, dry_run=False, backend=None, store=None, notifier=None, clock=time.time,
                 check=False, once=False):
        from .backends.slurm import make_backend
        from .live.notify import Notifier
        from .live.reconcile import Reconciler, load_decider
        from .live.store import Store

        self.cfg = config
        # check (`--once --dry-run`): one cycle that writes nothing anywhere, not even lucidd's database
        self.check = bool(check)
        self.once = bool(once)  # `--once`: a lock another lucidd holds is an exit 3, never a standby
        self.standing_by = False  # [daemon] standby: waiting for another lucidd's lock (stand_by)
        self.dry_run = dry_run or self.check
        self.clock = clock
        s = config.slurm
        self.backend = backend or make_backend("auto" if s.backend == "auto" else s.backend,
                                               bin_dir=s.bin_dir or None, timeout_s=s.command_timeout_s)
        self.store = store or Store(config.database.url, create_dir=not self.check)
        self.notifier = notifier or Notifier()
        runner = getattr(self.backend, "runner", None)
        if runner is not None and hasattr(runner, "before_call") and self.notifier.enabled:
            runner.before_call = _WatchdogBeforeSlurmCalls(self.notifier)
        self.decider = load_decider(config.daemon.decider, config)
        self.reconciler = Reconciler(config, self.backend, self.store, self.decider, dry_run=self.dry_run,
                                     clock=clock)
        # a check runs beside a live lucidd, which moves the inbox's jobs: no shadow's warning about them
        self.reconciler.warns_of_shadow_inbox = not self.check
        # (no bound method: the reconciler would hold the daemon, and its database lock, past its end)
        self.reconciler.progress = (None if self.dry_run else
                                    functools.partial(_cycle_progress, self.notifier, config.daemon.heartbeat_file))
        self.stop_requested = False
        self.db_down_since = None
        self.db_error = ""
        self.history_loaded = False
        self.inbox_opened = False
        self.lock_lost = False  # another lucidd holds the database: stop without giving anything back
        self.heartbeat_failures = 0

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self):
        from .live.store import StoreError

        check_job_submit_lua(slurm_cfg=self.cfg.slurm)  # at every start, and in the check an admin runs before one (an upgrade)
        slurm_warnings = self._check_slurm_settings()
        if (text := watchdog_warning(self.cfg, getattr(self.notifier, "watchdog_s", None))) is not None:
            log.warning("%s", text)
            slurm_warnings = (slurm_warnings or []) + [text]
        try:
            if self.check:
                self._open_for_check()
                log.info("lucidd %s check (--once --dry-run): one cycle, nothing written to Slurm or %s",
                         __version__, _redact(self.cfg.database.url))
                return
            self._check_partitions()
            self._check_heartbeat_file()
            # the lock first: creating and upgrading the tables changes the schema under whoever holds
            # it (an admin trial: a refused start had already altered a running lucidd's tables)
            if not (self.standing_by and self.store.instance_lock_alive()) and not self.store.hold_instance_lock():
                if self.cfg.daemon.standby and not self.once:
                    # a backup controller's lucidd: it waits for the lock (stand_by) and takes over
                    self.standing_by = True
                    return
                raise LucidError(f"cannot start: another lucidd (live or --dry-run) runs on {_redact(self.cfg.database.url)}: "
                                 "stop it first, or give this one its own [database] url (`lucidd --once --dry-run` "
                                 "checks a config beside it)")
            self.standing_by = False
            self.store.create()
            self._share_database_with_other_mode()
        except StoreError as exc:
            raise LucidError(f"cannot start: {exc}") from None
        self.store.set_meta("started_at", f"{self.clock():.3f}")
        self.store.set_meta("dry_run", "1" if self.dry_run else "0")
        self.store.set_meta("version", __version__)
        self.store.set_meta("config_path", self.cfg.path or "")
        if slurm_warnings is not None:  # for `lucidctl status`; None: Slurm could not be asked, keep the last
            self.store.set_meta("slurm_warnings", json.dumps(slurm_warnings))
        # what this lucidd runs with: `lucidctl status` read the file it was given, which an admin may
        # have edited since (an admin trial: status said Tprof 60 while the daemon ran with 20)
        self.store.set_meta("running_config", json.dumps(running_config(self.cfg), default=str))
        from .live.store import SCHEMA_VERSION

        log.info("lucidd %s started%s: database %s (schema %d), backend %s, every %gs", __version__,
                 " in dry-run (shadow) mode" if self.dry_run else "", _redact(self.cfg.database.url), SCHEMA_VERSION,
                 self.backend.name, self.cfg.daemon.interval_s)

    def _check_partitions(self):
        """Every partition the config names must exist in Slurm (a ConfigError, exit 2). A misspelled
        inbox left jobs waiting for ever in the real, DOWN one behind a lucidd that looked healthy,
        and lucidd-failopen --force could not open it either (an admin trial). A shadow runs before
        the inbox and profiling partitions exist (docs/deploy.md, rollout): only the others."""
        from .backends.base import BackendError

        s = self.cfg.slurm
        named = [("default_partition", s.default_partition)]
        named += [("managed_partitions", p) for p in s.managed_partitions]
        if not self.dry_run:
            named = [("inbox_partition", s.inbox_partition), ("profiling_partition", s.profiling_partition)] + named
        try:
            have = self.backend.partition_names()
        except BackendError as exc:  # Slurm not answering yet: the loop waits for it, as always
            log.warning("partitions not checked at start (Slurm: %s)", exc)
            return
        missing = [(key, name) for key, name in named if name and name not in have]
        if missing:
            key, name = missing[0]
            raise ConfigError(f"[slurm] {key} = \"{name}\": Slurm has no such partition (it has: "
                              f"{', '.join(sorted(have)) or 'none'})")

    def _check_slurm_settings(self) -> list | None:
        """Warn of slurm.conf settings under which Slurm would not follow lucidd's order
        (lucidd.live.slurm_settings). Returns the warnings, None when Slurm could not be asked; never
        stops lucidd: the settings are the admin's, and the order still helps where they allow."""
        from .backends.base import BackendError
        from .live.slurm_settings import partition_limit_warnings, slurm_settings_warnings

        s = self.cfg.slurm
        try:
            config = self.backend.controller_config()
            if not config:
                return None  # a backend that cannot tell: nothing checked, which is not "no problem"
            max_times = self.backend.partition_max_times()
            ordered = set(s.managed_partitions) or set(max_times) - {s.inbox_partition, s.profiling_partition}
            warnings = slurm_settings_warnings(config, max_times, ordered, self.cfg.ordering.enabled,
                                               self.cfg.daemon.interval_s, self.cfg.ordering.points_per_doubling)
        except BackendError as exc:
            log.warning("Slurm's settings not checked at start (%s)", exc)
            return None
        except Exception:  # a reply this check did not foresee: a check, never a reason not to start
            log.exception("Slurm's settings not checked at start")
            return None
        try:  # its own read: failing, it keeps the warnings above
            warnings += partition_limit_warnings(self.backend.partition_settings(), ordered, s.inbox_partition)
        except BackendError as exc:
            log.warning("partition settings not checked at start (%s)", exc)
        except Exception:
            log.exception("partition settings not checked at start")
        for text in warnings:
            log.warning("slurm.conf: %s", text)
        return warnings

    def _check_heartbeat_file(self):
        """The heartbeat must be writable before lucidd acts: a cycle that acted and then could not
        touch it crashed lucidd (an admin trial: a state folder out of inodes), and systemd's restart
        made that a loop of closing the inbox, acting and opening it. A new file gets an old time:
        it proves nothing until the first cycle."""
        from .live.reconcile import touch_heartbeat

        if self.dry_run:
            return
        path = self.cfg.daemon.heartbeat_file
        try:
            # written with the time it has (a new one: 0), so the check moves no heartbeat
            touch_heartbeat(path, at=os.stat(path).st_mtime if os.path.exists(path) else 0)
        except OSError as exc:
            raise ConfigError(f"[daemon] heartbeat_file {path}: cannot be written ({exc.strerror or exc}): lucidd-"
                              "failopen would open the inbox behind a running lucidd") from None

    def _open_for_check(self):
        """Read lucidd's state as the running daemon left it and write none (ReadOnlyStore). A
        database without lucidd's tables (never started) is read as an empty one, as a first start."""
        import atexit
        import shutil
        import tempfile

        from .live.store import OLDEST_READABLE_SCHEMA, SCHEMA_VERSION, ReadOnlyStore, Store

        base = self.store
        found = self.store.refuse_newer_schema()  # StoreError (unreachable): cannot start
        if found is None or found < OLDEST_READABLE_SCHEMA:
            # none yet, or an older schema (1-4: no jobs.lent before 25 November 2026, no
            # jobs.time_limit_s before 28 November), which this version's reads cannot use until its
            # own start upgrades it: the check that docs/deploy.md's upgrade step 1 runs
            tmp = tempfile.mkdtemp(prefix="lucidd-check-")
            atexit.register(shutil.rmtree, tmp, True)
            base = Store(f"sqlite:///{tmp}/check.db").create()
            log.info("check: %s %s; deciding as a first start would", _redact(self.cfg.database.url),
                     "holds no lucidd state yet" if found is None else
                     f"has schema {found}, which this lucidd upgrades to {SCHEMA_VERSION} when it starts")
        self.store = self.reconciler.store = ReadOnlyStore(base)

    def _share_database_with_other_mode(self):
        """A live and a shadow (`--dry-run`) lucidd never share a database at the same time: the
        live one would act on decisions the shadow recorded and never applied. A live start after
        a shadow has stopped drops the shadow's open decisions and adopts the jobs from Slurm."""
        last_mode = self.store.get_meta("dry_run")
        if last_mode is None or (last_mode == "1") == self.dry_run:
            return
        other = "a shadow (--dry-run)" if last_mode == "1" else "a live"
        last_ok = self.store.get_meta("last_ok_cycle")
        stopped = self.store.get_meta("stopped_at")
        d = self.cfg.daemon
        recent_s = max(d.failopen_after_s, 3 * d.interval_s, 30.0)
        # an orderly stop after its last cycle: it is not running (a trial was refused 14 s after one)
        stopped_since = stopped is not None and last_ok is not None and float(stopped) >= float(last_ok)
        if last_ok is not None and self.clock() - float(last_ok) < recent_s and not stopped_since:
            raise LucidError(
                f"{other} lucidd ran a cycle on {_redact(self.cfg.database.url)} {self.clock() - float(last_ok):.0f} s "
                f"ago: stop it first, or give this one its own [database] url (`lucidd --once --dry-run` checks a "
                f"config without writing anything)")
        if not self.dry_run:
            n = self.store.forget_shadow_decisions()
            log.warning("the database was last used by a shadow (--dry-run) lucidd: its %d open job record(s) "
                        "were never applied to Slurm and are dropped; lucidd adopts those jobs as Slurm shows them", n)

    def run_once(self) -> bool:
        """One reconcile; False when it could not act (Slurm or database unavailable)."""
        from .live.reconcile import open_inbox, touch_heartbeat
        from .live.store import StoreError
        from .backends.base import BackendError

        try:
            if self.db_down_since is not None:
                self.store.ping()
            # the lock before anything is written, as at start: after a database restart another lucidd
            # may have taken the database (and upgraded its schema); this one then leaves it alone
            if not self.check and (gone := self.store.file_replaced()):
                raise DatabaseFileGone(f"{gone}: lucidd stops and opens the inbox; started again (systemd), it "
                                       "makes a new database and adopts the jobs Slurm has")
            if not self.check and not self.store.instance_lock_alive():
                self.store.release_instance_lock()
                if not self.store.hold_instance_lock():
                    self.lock_lost = True
                    raise InstanceLockLost(
                        f"another lucidd took {_redact(self.cfg.database.url)} while this one's lock was lost (a "
                        "database restart ends it): this one stops and leaves the jobs to it")
                log.warning("the database's instance lock was lost (a database restart?) and is held again")
            if self.db_down_since is not None:
                now = self.clock()
                self.store.create()
                # the outage left no cycle rows (nothing could be written): `lucidctl status` shows it from here
                self.store.set_meta("last_database_outage", json.dumps(
                    {"from": round(self.db_down_since, 3), "to": round(now, 3),
                     "seconds": round(now - self.db_down_since, 1), "error": self.db_error[:300]}))
                # said once the database took a write: one that answers reads and refuses writes (a
                # read-only remount, a full disk) said "back" at every cycle of the outage
                log.warning("database is back after %.0f s: lucidd resumes", now - self.db_down_since)
                self.db_down_since = None
            if not self.history_loaded and not self.check:
                # the decider's history (estimates) before the first cycle orders anything, not after:
                # else every job ordered in a start's first cycle gets the constant and a second value
                # the cycle after (a check writes nothing, and a refit would)
                self.history_loaded = True
                self._model_upkeep(read_history=False)
            row = self.reconciler.cycle()
            # the sooner of the two bounds (a tiny interval does not make every cycle "slow")
            slow = min(self.cfg.daemon.failopen_after_s / 2, max(3 * self.cfg.daemon.interval_s, 5.0))
            if row.seconds > slow:
                # a hung database or slurmctld shows here first; lucidd-failopen goes by the heartbeat,
                # so past failopen_after_s it may have opened the inbox meanwhile
                log.warning("reconcile took %.1f s (Slurm calls made: %s): slurmctld or the database answered "
                            "slowly; lucidd-failopen opens the inbox after %g s without a heartbeat",
                            row.seconds, row.calls or "{}", self.cfg.daemon.failopen_after_s)
            if row.ok and self.check:
                return True  # no heartbeat, no history, no model upkeep: a check writes nothing
            if row.ok:
                if not self.dry_run:
                    try:
                        touch_heartbeat(self.cfg.daemon.heartbeat_file)
                        self.heartbeat_failures = 0
                    except OSError as exc:
                        # lucidd-failopen would open the inbox and the next cycle close it, over and
                        # over: after three, lucidd stops in order instead (exit 2: not restarted)
                        self.heartbeat_failures += 1
                        log.error("heartbeat %s not written (%s)", self.cfg.daemon.heartbeat_file, exc)
                        if self.heartbeat_failures >= 3:
                            raise HeartbeatUnwritable(
                                f"[daemon] heartbeat_file {self.cfg.daemon.heartbeat_file}: not written three cycles "
                                f"running ({exc.strerror or exc}); lucidd stops and opens the inbox") from None
                msg = self._model_upkeep(read_history=True)
                if msg:
                    log.info("%s", msg)
                self.notifier.watchdog(f"ok: {row.jobs} jobs, {row.actions} actions, {row.seconds * 1000:.0f} ms")
            else:
                # lucidd is alive and waiting for Slurm: keep systemd's watchdog fed.
                self.notifier.watchdog(f"waiting for Slurm: {row.error[:120]}")
            return row.ok
        except StoreError as exc:
            if self.db_down_since is None:
                self.db_down_since = self.clock()
                self.db_error = str(exc)
                log.error("database unavailable, lucidd stops acting%s: %s",
                          " (a dry run: the inbox is left as it is)" if self.dry_run else " and opens the inbox", exc)
            elif str(exc) != self.db_error:  # a new error in the same outage (it answers again, refuses writes)
                self.db_error = str(exc)
                log.error("database still unavailable: %s", exc)
            if not self.dry_run:
                try:
                    open_inbox(self.backend, self.cfg, "lucidd's database is unavailable")
                except BackendError as bexc:
                    log.error("could not give the jobs back to Slurm either (Slurm: %s); retried next cycle", bexc)
            self.notifier.watchdog(f"database unavailable: {str(exc)[:120]}")
            return False

    def _model_upkeep(self, read_history: bool) -> str | None:
        """Finished jobs from accounting (when `read_history`), then the decider's history and refits.
        Their failures never stop scheduling; a database error is the caller's (it fails open)."""
        from .live.store import StoreError

        try:
            if read_history:
                self.reconciler.read_history(int(self.clock()))
            return self.decider.background(self.store, int(self.clock()))
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - model upkeep never stops scheduling
            log.warning("background work failed: %s", exc)
            return None

    def stop(self, reason="orderly stop"):
        """Release every job lucidd holds and open the inbox: Slurm schedules alone until lucidd is back."""
        from .live.store import StoreError

        self.notifier.stopping(reason)
        if not (self.lock_lost or self.standing_by or self.dry_run) and not self.store.instance_lock_alive():
            # the lock went with a database restart since the last cycle: if another lucidd (a standby)
            # took it meanwhile, the jobs and the inbox are that one's (a review); a database that
            # does not answer is an outage, and this one gives back what it holds as always
            try:
                self.lock_lost = not self.store.hold_instance_lock()
            except StoreError:
                pass
            if self.lock_lost:
                log.warning("stop: another lucidd took the database's lock since this one's last cycle: it gives "
                            "nothing back (the jobs are that one's)")
        if self.lock_lost or self.standing_by:  # another lucidd runs on this database: its jobs, its inbox
            return
        try:
            # the jobs first: a database that hangs (paused, its host unreachable) would use up systemd's
            # TimeoutStopSec before they were given back
            if not self.dry_run:
                self._give_back(reason)
        finally:
            try:
                self.store.set_meta("stopped_at", f"{self.clock():.3f}")  # `lucidctl status` says STOPPED
            except StoreError as exc:
                log.warning("stop: could not record the stop in the database: %s", exc)
            self.store.release_instance_lock()

    def _give_back(self, reason):
        from .backends.base import BackendError
        from .live.reconcile import open_inbox
        from .live.store import StoreError

        released = []
        try:
            open_inbox(self.backend, self.cfg, reason, released=released)
        except BackendError as exc:
            log.error("stop: could not give every job back to Slurm (%s); lucidd-failopen will", exc)
        try:
            self.reconciler.record_released(released, int(self.clock()), reason)
        except StoreError as exc:  # the next start finds them moved without a record, and says so
            log.warning("stop: could not record the release of %d job(s): %s", len(released), exc)

    def stand_by(self, log_every_s: float = 3600.0) -> bool:
        """Wait while another lucidd holds the database ([daemon] standby): nothing is read from or
        written to Slurm, the database or the heartbeat meanwhile, so the active lucidd's heartbeat
        alone tells lucidd-failopen whether a lucidd runs. The lock is tried every interval_s; True
        once it is held (start() then goes on as at any start), False when asked to stop first."""
        from .live.store import StoreError

        interval = self.cfg.daemon.interval_s
        db = _redact(self.cfg.database.url)
        log.info("standby: another lucidd holds %s; this one takes over when that one stops (tried every %g s)",
                 db, interval)
        self.notifier.ready(f"standby: another lucidd holds {db}")
        said = time.monotonic()
        while not self.stop_requested:
            self.notifier.watchdog(f"standby: another lucidd holds {db}")
            self._sleep_until(time.monotonic() + interval)
            if self.stop_requested:
                break
            try:
                if self.store.hold_instance_lock():
                    log.warning("standby: the other lucidd let go of %s; this one takes over", db)
                    return True
            except StoreError as exc:  # the database away: still standing by (the other cannot act either)
                log.warning("standby: the database does not answer: %s", exc)
            if time.monotonic() - said >= log_every_s:
                said = time.monotonic()
                log.info("standby: another lucidd still holds %s", db)
        return False

    def _sleep_until(self, end: float):
        """Wait until the monotonic time `end`, or until a signal asks lucidd to stop (checked every 0.2 s)."""
        while not self.stop_requested and time.monotonic() < end:
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))

    def take_over(self):
        """The start after stand_by took the lock: the tables, the start's records, as at any start.
        READY went out when the standby began to wait, so systemd's watchdog already runs: it is fed
        around the start's Slurm checks, which a normal start makes before READY (a review: with slow
        Slurm replies, as in a controller failover, they and the first cycle outlasted WatchdogSec=120s)."""
        self.notifier.watchdog("taking over: starting")
        self.start()
        self.notifier.watchdog("taking over: started, first cycle")

    def loop(self):
        interval = self.cfg.daemon.interval_s
        ready = False
        while not self.stop_requested:
            t0 = time.monotonic()
            ok = self.run_once()
            if not ready:
                self.notifier.ready("first reconcile done" if ok else "started; Slurm or database not answering")
                ready = True
            self._sleep_until(t0 + interval)


def watchdog_warning(cfg, watchdog_s: float | None) -> str | None:
    """lucidd pings systemd's watchdog before each Slurm command (_WatchdogBeforeSlurmCalls), and each
    command is bounded by [slurm] command_timeout_s: one command that may take half of WatchdogSec or
    more, with the cycle's own work around it, can outlast it, and a slow slurmctld (not a hung lucidd)
    then gets lucidd killed with SIGABRT, with no orderly stop, and restarted into the same wall (a
    review). Said at start; the config allows command_timeout_s up to 600 s."""
    if not isinstance(watchdog_s, (int, float)) or not watchdog_s:  # (a stand-in notifier may have none)
        return None
    # (pings come at most every PING_EVERY_S: one command may start just before the next is due)
    if 2 * cfg.slurm.command_timeout_s < watchdog_s and cfg.slurm.command_timeout_s + PING_EVERY_S < watchdog_s:
        return None
    keep = min(watchdog_s / 2, watchdog_s - PING_EVERY_S)
    return (f"[slurm] command_timeout_s = {cfg.slurm.command_timeout_s:g}: one Slurm command may take that long, "
            f"too much of systemd's WatchdogSec ({watchdog_s:g} s): a slow slurmctld would get lucidd "
            f"killed by the watchdog; keep command_timeout_s under {max(keep, 0):g} s or raise WatchdogSec")


def running_config(cfg) -> dict:
    """A config's values as lucidd records them at start (the database URL left out: status shows it
    with its password hidden)."""
    d = cfg.as_dict()
    d.get("database", {}).pop("url", None)
    return d


def _redact(url):
    from .live.store import redact

    return redact(url)


_LUA_VERSION_RE = re.compile(r"LUCIDD_LUA_VERSION\s*=\s*([0-9]+)")
_LUA_NAME_RE = re.compile(r'^local (INBOX|PROFILING|DEFAULT)\s*=\s*"([^"]*)"', re.M)


def check_job_submit_lua(slurm_conf: str | None = None, slurm_cfg=None) -> str | None:
    """Warn when the job_submit.lua beside slurm.conf is older than the one this lucidd ships: an
    upgrade that did not copy it again left users able to move jobs into profiling, ahead of every
    queue (an admin trial); when it is newer (a downgrade); and, given lucidd's `[slurm]` section, when its INBOX, PROFILING or
    DEFAULT names differ from lucidd's. Returns the warning, or None (current, or no such file
    here: a site may keep it elsewhere)."""
    conf = slurm_conf or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    installed = os.path.join(os.path.dirname(conf), "job_submit.lua")
    shipped = os.path.join(os.path.dirname(__file__), "data", "slurm", "job_submit.lua")
    try:
        with open(installed, encoding="utf-8", errors="replace") as f:
            text = f.read()
        have = _LUA_VERSION_RE.search(text)
        with open(shipped, encoding="utf-8") as f:
            want = _LUA_VERSION_RE.search(f.read())
    except OSError:
        return None
    problems = []
    if want is not None and (have is None or int(have.group(1)) < int(want.group(1))):
        problems.append(f"{installed} is lucidd's job_submit.lua version {have.group(1) if have else '1 or older'}, "
                        f"this lucidd ships version {want.group(1)} ({shipped}): copy it again, keeping your "
                        "LUCIDD_USERS, and `scontrol reconfigure` (docs/deploy.md, Upgrading)")
    elif want is not None and int(have.group(1)) > int(want.group(1)):
        # lucidd downgraded without its job_submit.lua: the newer script may route jobs in ways this
        # lucidd does not know (version 8 leaves -w jobs in their partition; 7 did not) (a review)
        problems.append(f"{installed} is lucidd's job_submit.lua version {have.group(1)}, newer than the version "
                        f"{want.group(1)} this lucidd ships ({shipped}): after a downgrade, copy this version's "
                        "one, keeping your LUCIDD_USERS, and `scontrol reconfigure` (docs/deploy.md, Upgrading)")
    if slurm_cfg is not None:
        names = dict(_LUA_NAME_RE.findall(text))
        for const, key in (("INBOX", "inbox_partition"), ("PROFILING", "profiling_partition"),
                           ("DEFAULT", "default_partition")):
            # a wrong INBOX routes nothing through lucidd; a wrong DEFAULT sends the jobs that name no
            # partition there while lucidd is away (version 6 leaves them to Slurm then)
            if const in names and names[const] != getattr(slurm_cfg, key):
                problems.append(f"{installed} has {const} = \"{names[const]}\" but [slurm] {key} is "
                                f"\"{getattr(slurm_cfg, key)}\": make them equal and `scontrol reconfigure`")
    if not problems:
        return None
    warning = "; ".join(problems)
    log.warning("%s", warning)
    return warning


def _load_config_or_none(prog, path):
    """The validated config with logging set up, or None after one line `PROG: config error: ...`."""
    from .live.config import load_config

    try:
        cfg = load_config(path)
    except ConfigError as exc:
        print(f"{prog}: config error: {exc}", file=sys.stderr)
        return None
    _setup_logging(cfg.daemon.log_level)
    return cfg


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="lucidd", description="Lucid GPU scheduler daemon for Slurm (docs/deploy.md)")
    p.add_argument("--config", required=True, help="TOML configuration file (keys: docs/config.md)")
    p.add_argument("--once", action="store_true", help="run a single reconcile and exit (0 ok, 1 failed)")
    p.add_argument("--dry-run", action="store_true",
                   help="shadow mode: decide and record, change nothing in Slurm, leave the inbox alone; "
                        "with --once, a check that writes nothing anywhere")
    p.add_argument("--version", action="version", version=f"lucidd {__version__}")
    args = p.parse_args(argv)
    cfg = _load_config_or_none("lucidd", args.config)
    if cfg is None:
        return 2
    from .live.store import SchemaTooNew

    def failed_start(exc) -> tuple[int, str]:
        """The exit status and the line for a start that raised `exc` (at start, or at a takeover)."""
        if isinstance(exc, SchemaTooNew):  # exit 2 as a config error: systemd must not restart it into the same wall
            return 2, f"cannot start: {exc}"
        if isinstance(exc, ConfigError):  # a key the file's own checks pass but that cannot be used (decider, url)
            where = f"{cfg.path}: " if cfg.path and cfg.path not in str(exc) else ""
            return 2, f"config error: {where}{exc}"
        return 3, str(exc)

    try:
        daemon = Daemon(cfg, dry_run=args.dry_run, check=args.once and args.dry_run, once=args.once)
        daemon.start()
    except LucidError as exc:  # (SchemaTooNew and ConfigError are LucidErrors)
        code, line = failed_start(exc)
        print(f"lucidd: {line}", file=sys.stderr)
        return code
    from .live.reconcile import SlurmDeniesLucidd

    if args.once:
        failed = None
        try:
            ok = daemon.run_once()
        except (SlurmDeniesLucidd, HeartbeatUnwritable) as exc:
            failed = (exc, 2)
        except InstanceLockLost as exc:  # (another lucidd's jobs: stop() gives nothing back)
            failed = (exc, 3)
        finally:
            if not args.dry_run:
                # a live cycle closed the inbox and may have started profiling runs: with no lucidd
                # after it, they would run to their end ahead of every queue and new jobs wait for the
                # fail-open timer (or for ever where it is not installed yet). Given back as at a stop.
                daemon.stop("lucidd --once: one cycle, then the jobs given back")
        if failed is not None:  # the last line: what to fix
            print(f"lucidd: {failed[0]}", file=sys.stderr)
            return failed[1]
        return 0 if ok else 1

    def on_signal(signum, _frame):
        daemon.stop_requested = True
        log.info("signal %d: stopping after this cycle", signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if daemon.standing_by:
        if not daemon.stand_by():
            log.info("lucidd stopped while standing by: it held nothing")
            return 0
        try:
            daemon.take_over()
        except LucidError as exc:
            code, line = failed_start(exc)
            log.error("lucidd could not take over: %s", line)
            return code
    try:
        daemon.loop()
    except SlurmDeniesLucidd as exc:
        # a configuration Slurm will refuse every cycle: stop (the inbox opens) and stay stopped
        # (exit 2: systemd does not restart it, RestartPreventExitStatus)
        log.error("%s; lucidd stops and opens the inbox", exc)
        return 2
    except HeartbeatUnwritable as exc:
        log.error("%s", exc)
        return 2
    except DatabaseFileGone as exc:  # exit 1: restarted (Restart=on-failure) on a new database
        log.error("%s", exc)
        return 1
    except InstanceLockLost as exc:
        log.error("%s", exc)
        return 3
    except SchemaTooNew as exc:  # met again after an outage: exit 2, as at start (not restarted into it)
        log.error("lucidd stops: %s", exc)
        return 2
    finally:
        daemon.stop("lucidd stopped")
        log.info("lucidd stopped; %s", "another lucidd holds its database: it gave nothing back" if daemon.lock_lost
                 else "a dry run held no job" if daemon.dry_run else
                 "jobs it held were given back to Slurm (where Slurm let it; the inbox is open)")
    return 0


def failopen_main(argv=None) -> int:
    """`lucidd-failopen --config FILE [--force]`: the guard a systemd timer runs every few seconds.

    Needs only Slurm: when lucidd's heartbeat is older than `[daemon] failopen_after_s` (or
    missing), it releases every job lucidd holds and sets the inbox UP. lucidd closes the inbox
    again when it is back. Exit 0 (nothing to do or done), 1 (Slurm unavailable), 2 (bad config).
    """
    p = argparse.ArgumentParser(prog="lucidd-failopen", description="open the inbox if lucidd is not running")
    p.add_argument("--config", required=True)
    p.add_argument("--force", action="store_true", help="open the inbox whatever the heartbeat says")
    args = p.parse_args(argv)
    from .backends.base import BackendError
    from .backends.slurm import SlurmBackend, SlurmRunner
    from .live.reconcile import heartbeat_age, open_inbox

    # Lenient: the last line of defence must not stay shut over a key it does not need (a newer
    # lucidd's key after a rollback, a misspelling that also stops lucidd itself).
    from .live.config import load_config_failopen

    # A config it cannot use as it is (not valid TOML, a bad [daemon] or [slurm] value) is exit 2, said
    # at every run, but never a reason to leave the inbox shut: it goes on with what the file gives
    # validly, defaults and job_submit.lua's partition names (before, it opened nothing, and jobs
    # waited PartitionDown in the inbox for as long as the file stayed broken and lucidd stopped)
    cfg, ignored, config_error = load_config_failopen(args.config, _job_submit_lua_names())
    if config_error is not None:
        print(f"lucidd-failopen: config error: {config_error} (going on with defaults for what it cannot read: "
              f"heartbeat {cfg.daemon.heartbeat_file}, inbox {cfg.slurm.inbox_partition})", file=sys.stderr)
    _setup_logging(cfg.daemon.log_level)
    age = heartbeat_age(cfg.daemon.heartbeat_file)
    bound = cfg.daemon.failopen_after_s
    # dated more than the bound ahead of this clock: the clock stepped back since lucidd last wrote it.
    # A live lucidd rewrites it at its next cycle (and closes an inbox found open); a dead one never
    # would, and the inbox stayed DOWN until the clock caught up with the step
    acting = args.force or age is None or age > bound or age < -bound
    for text in ignored:  # said when it acts (it runs every 15 s: not a line each time lucidd is fine)
        logging.getLogger("lucidd").log(logging.WARNING if acting else logging.DEBUG,
                                        "lucidd-failopen: %s: ignored (lucidd itself refuses it): %s",
                                        args.config, text)
    if not acting:
        return 2 if config_error is not None else 0
    why = ("--force" if args.force else "no heartbeat file" if age is None
           else f"lucidd's heartbeat is dated {-age:.0f} s ahead of this clock (it stepped back)" if age < 0
           else f"lucidd's heartbeat is {age:.0f} s old (> {bound:g} s)")
    backend = SlurmBackend(SlurmRunner(bin_dir=cfg.slurm.bin_dir or None, timeout_s=cfg.slurm.command_timeout_s))
    try:
        lines = open_inbox(backend, cfg, why, inbox_must_exist=True)
    except ConfigError as exc:  # it exited 0 and opened nothing for a misspelled inbox (an admin trial)
        print(f"lucidd-failopen: config error: {cfg.path}: {exc}", file=sys.stderr)
        return 2
    except BackendError as exc:
        print(f"lucidd-failopen: Slurm unavailable: {exc}", file=sys.stderr)
        return 1
    if not lines:
        logging.getLogger("lucidd").debug("fail-open: nothing held (%s)", why)
    return 2 if config_error is not None else 0


def _job_submit_lua_names() -> dict:
    """INBOX, PROFILING and DEFAULT as job_submit.lua beside slurm.conf names them ({} if unreadable)."""
    conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    try:
        with open(os.path.join(os.path.dirname(conf), "job_submit.lua"), encoding="utf-8", errors="replace") as f:
            return dict(_LUA_NAME_RE.findall(f.read()))
    except OSError:
        return {}


if __name__ == "__main__":
    sys.exit(main())
