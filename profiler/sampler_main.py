"""`lucidd-sampler --config FILE [--once]`: the NVML sampler service of a GPU node.

Reads the node's GPUs every `[sampler] interval_s`, writes the per-job figures to lucidd's
database every `flush_s` (docs/deploy.md, "The NVML sampler"). It never touches Slurm or a job: if
it stops, nothing but the figures is missing. A database that does not answer is retried at the
next flush with everything kept in memory; NVML that cannot start is one line and exit status 3.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import time

from profiler.nvml_sampler import Sampler, SamplerError, load_nvml

log = logging.getLogger("lucidd.sampler")
HEARTBEAT_S = 60.0  # the shortest time between two heartbeats (store.GpuNodeRow)
CLOCK_WARN_S = 60.0  # the node's clock this far from the database's: said (lucidd copes, people may not)
DATABASE_TIMEOUT_S = 10.0  # the longest a write waits to connect (two writes a step, WatchdogSec=120s)


def node_name(cfg) -> str:
    return cfg.sampler.node or socket.gethostname().split(".", 1)[0]


class SamplerService:
    """The loop around a Sampler: readings, writes, pruning. `clock` and `sleep` are injectable
    so tests drive it without waiting."""

    def __init__(self, cfg, nvml, store, proc_dir="/proc", clock=time.time, sleep=time.sleep):
        from lucidd.live.notify import Notifier

        self.cfg = cfg
        self.sampler = Sampler(nvml, node_name(cfg), proc_dir)
        self.store = store
        self.clock, self.sleep = clock, sleep
        self.stop_requested = False
        self.last_flush = self.last_prune = self.last_heartbeat = 0.0
        self.unsaved: list = []  # figures a failed write left, written with the next
        self.created = False  # its table made (or checked) once the database first answers
        # for the heartbeat (store.GpuNodeRow, profile_incompleteness), on this node's clock:
        self.sampling_since: int | None = None  # this process's first reading
        self.last_reading: int | None = None
        self.flushed_at: int | None = None  # the last reading the last whole flush covered
        self.clock_offset_s: float | None = None  # this node's clock less the database's
        self.said: set = set()  # warnings given once
        self.once = False  # `lucidd-sampler --once`: a reading beside the service, which it must not speak for
        self.notifier = Notifier()

    def start(self):
        self.sampler.start()
        self.notifier.ready(f"sampling {self.sampler.node}")

    def _create_tables(self):
        """The samplers' tables, made (or checked) once the database first answers; StoreError else."""
        if not self.created:
            self.store.create_gpu_profiles()
            self.created = True

    def flush(self, now: float) -> bool:
        from lucidd.live.store import StoreError

        changed = {(p.job_id, p.partition): p for p in self.unsaved}
        changed.update({(p.job_id, p.partition): p for p in self.sampler.take_changes()})
        # what was written and has not been seen for a while has ended: free its memory. Not what a
        # failed write left: a run that came back would start afresh in memory, and its new figures
        # would replace the unwritten ones (a 20 GiB peak lost to a 2 GiB one while the database was away)
        self.sampler.forget_before(int(now - 3 * max(self.cfg.sampler.flush_s, self.cfg.sampler.interval_s)),
                                   keep=changed.keys())
        if changed:
            try:
                self._create_tables()
                self.store.save_gpu_profiles(list(changed.values()))
            except StoreError as exc:
                self.unsaved = list(changed.values())
                log.warning("cannot write %d job profile(s), kept for the next try: %s", len(changed), exc)
                return False
            self.unsaved = []
        # nothing is left unwritten up to the last reading (not `now`: close() flushes with no reading
        # of its own, and a reading that was never taken must not say a run had ended by then)
        self.flushed_at = self.last_reading
        return True

    def heartbeat(self, now: float) -> bool:
        """Say in the database that this node's sampler runs, and what its GPUs are (store.GpuNodeRow):
        `lucidctl status` tells a stopped sampler from an idle node by it, and GPU packing with
        `[packing] gpu_memory_mib = 0` takes its partitions' smallest GPU from it."""
        from lucidd.live.store import StoreError

        g = self.sampler.describe()
        try:
            self._create_tables()
            self._check_clock()
            # (`--once` beside the service vouches for nothing it did not read: the service's figures
            # of what it has written are left as they are)
            whole = self.store.save_gpu_node(self.sampler.node, int(now), g.count or 0, g.gpu_memory_mib, g.name,
                                             g.driver, flushed_at=self.flushed_at, sampling_since=self.sampling_since,
                                             clock_offset_s=self.clock_offset_s, coverage=not self.once)
        except StoreError as exc:
            log.warning("cannot write this node's heartbeat: %s", exc)
            return False
        if whole is False and "columns" not in self.said:
            self.said.add("columns")
            log.warning("the database's gpu_nodes table has no flushed_at column (lucidd on the controller is older "
                        "than this sampler, or has not started since its upgrade): lucidd lets no job profiled on "
                        "%s share a GPU until it has", self.sampler.node)
        return True

    def _check_clock(self) -> None:
        """This node's clock against the database server's, at each heartbeat (one cheap query):
        lucidd corrects for it, but a node's readings far off the controller's are confusing to
        read, and were lost for good before (docs/deploy.md)."""
        db_now = self.store.db_time()
        if db_now is None:
            self.clock_offset_s = None
            return
        self.clock_offset_s = round(self.clock() - db_now, 3)
        off = abs(self.clock_offset_s) > CLOCK_WARN_S
        if off and "clock" not in self.said:
            self.said.add("clock")
            log.warning("this node's clock is %+.0f s from the database server's: check its time sync (chrony, "
                        "ntpd); lucidd allows for it", self.clock_offset_s)
        elif not off:
            self.said.discard("clock")

    def prune(self, now: float) -> None:
        from lucidd.live.store import StoreError

        if not self.created:
            return  # nothing written yet: the next hour's prune
        try:
            # its own node's rows by its own clock; other nodes' by theirs (Store.prune_gpu_profiles)
            keep_s = self.cfg.sampler.keep_days * 86400
            self.store.prune_gpu_profiles(int(now - keep_s), node=self.sampler.node, keep_s=keep_s)
        except StoreError as exc:
            log.warning("cannot prune old GPU profiles: %s", exc)

    def step(self) -> bool:
        """One reading, and the writes that are due; True when the last write (if any) worked."""
        now = self.clock()
        self.sampler.sample(int(now))
        self.last_reading = int(now)
        if self.sampling_since is None:
            self.sampling_since = int(now)
        ok = True
        if now - self.last_flush >= self.cfg.sampler.flush_s:
            ok = self.flush(now)
            self.last_flush = now
            # each write can take the whole database timeout: systemd hears from the sampler between them
            self.notifier.watchdog()
        # at most once a minute: a thousand nodes at the default flush_s would write 33 rows a second;
        # not right after a failed flush (the database is away: the next step tries it)
        if ok and now - self.last_heartbeat >= max(self.cfg.sampler.flush_s, HEARTBEAT_S):
            ok = self.heartbeat(now) and ok
            self.last_heartbeat = now
        if now - self.last_prune >= 3600:
            self.prune(now)
            self.last_prune = now
        self.notifier.watchdog()
        return ok

    def loop(self):
        interval = self.cfg.sampler.interval_s
        while not self.stop_requested:
            began = self.clock()
            self.step()
            # in slices: a long interval_s must not outlast systemd's WatchdogSec, nor delay a stop
            while not self.stop_requested:
                left = interval - (self.clock() - began)
                if left <= 0:
                    break
                self.sleep(min(left, 10.0))
                self.notifier.watchdog()

    def close(self):
        self.notifier.stopping()
        # the last flush, and a heartbeat that says so: without it the runs that ended in the last
        # minute before a stop were never found whole (the heartbeat is at most once a minute)
        if self.flush(self.clock()) and self.last_reading is not None:
            self.heartbeat(self.clock())
        self.sampler.stop()


def main(argv=None) -> int:
    from lucidd import __version__
    from lucidd.daemon import _load_config_or_none
    from lucidd.live.store import Store, StoreError

    p = argparse.ArgumentParser(prog="lucidd-sampler",
                                description="lucidd's NVML sampler for one GPU node (docs/deploy.md)")
    p.add_argument("--config", required=True, help="lucidd's TOML configuration ([database], [sampler])")
    p.add_argument("--once", action="store_true",
                   help="take one reading, write it, print the per-job figures and exit (0 ok, 1 the write failed)")
    p.add_argument("--version", action="version", version=f"lucidd-sampler {__version__}")
    args = p.parse_args(argv)
    cfg = _load_config_or_none("lucidd-sampler", args.config)
    if cfg is None:
        return 2
    try:
        # its own bound, not [slurm] command_timeout_s (up to 600 s): a step's writes must end well
        # inside the unit's WatchdogSec=120s, or systemd kills it with the figures it kept in memory
        store = Store(cfg.database.url, connect_timeout_s=min(cfg.slurm.command_timeout_s, DATABASE_TIMEOUT_S))
    except StoreError as exc:  # a URL that cannot work (no driver, malformed)
        print(f"lucidd-sampler: {exc}", file=sys.stderr)
        return 2
    if cfg.database.url.startswith("sqlite"):
        log.warning("[database] url is SQLite (%s): the figures stay on this node; lucidd on the controller "
                    "reads them only from a database both reach (PostgreSQL)", cfg.database.url)
    try:
        service = SamplerService(cfg, load_nvml(), store)
        service.start()
    except SamplerError as exc:
        print(f"lucidd-sampler: {exc}", file=sys.stderr)
        return 3
    if args.once:
        service.once = True
        try:
            service.step()
            ok = service.flush(service.clock())
            g = service.sampler.gpus
            print(f"node {service.sampler.node}: {g.count if g.count is not None else '?'} GPU(s) {g.name}, the "
                  f"smallest {'?' if g.gpu_memory_mib is None else f'{g.gpu_memory_mib:,.0f} MiB'}, driver "
                  f"{g.driver or '?'}{f' ({g.problem})' if g.problem else ''}")
            for prof in service.sampler.profiles.values():
                print(f"job {prof.job_id} ({prof.partition or '?'}) on {prof.node} GPUs {sorted(prof.gpus)}: "
                      f"gpu_util {_pct(prof.gpu_util)}, gmem_util {_pct(prof.gmem_util)}, gmem "
                      f"{'?' if prof.gmem_mib is None else f'{prof.gmem_mib:,.0f} MiB'}")
            return 0 if ok else 1
        finally:
            service.sampler.stop()

    def on_signal(signum, _frame):
        service.stop_requested = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        service.loop()
    finally:
        service.close()
    return 0


def _pct(v):
    return "?" if v is None else f"{v:.1f} %"


if __name__ == "__main__":
    sys.exit(main())
