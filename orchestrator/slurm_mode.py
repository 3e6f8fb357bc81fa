"""Lucid as lucidd runs it on Slurm, in the simulator (`lucidctl simulate --policies lucid`).

On a real cluster lucidd places nothing itself: Slurm's own scheduler (priority order plus
sched/backfill judged by users' time limits) starts every job. lucidd only decides, once per
reconcile interval, which new jobs are profiled first and in which order the pending jobs of
each partition are considered (SiteFactor). This replay does exactly that, with the code the
daemon runs:

* Slurm: the `slurm` baseline's engine (lucidd/policies/slurm_backfill.py, same `--limit-rule`
  and backfill knobs) per partition (VC), its priority being lucidd's SiteFactor, higher first,
  ties by submission order. No preemption. GPU packing only where the replayed config turns it
  on, as lucidd applies it (`_lower`, `_join`; docs/simulator.md): lowered 1-GPU jobs pair on a
  GPU by Slurm's first-fit and run at their co-located rates.
* SiteFactor: `orchestrator.live.site_factor`, the function the daemon applies, computed when
  a job enters its partition's queue and again at the first cycle after it starts starving
  (the only time the value changes; estimates are fixed once made, as live).
* Profiling: `orchestrator.live.plan_profiling`, the daemon's admission (capacity = max(Nprof,
  3 % of the GPUs) unless configured, burst capacity, least-GPUs-first, skip rules (a job that
  would start at once in its partition is not profiled, `[profiler] skip_when_free`), jobs that
  waited more than 2 x Tprof for room go unprofiled, Tprof requeue). The `profiling` partition
  spans every node with PriorityTier=2: its jobs start before any partition's jobs, on the
  best-fitting node anywhere (Slurm does not know a job's home partition). While they run,
  Slurm's backfill sees them as holding their GPUs until their time limit (Slurm does not know
  lucidd will requeue them).
* Timing as the daemon's cycle makes it: new jobs wait in the inbox until the next reconcile
  (`[daemon] interval_s`, 10 s; cycles at multiples of it); a job that ran >= Tprof is requeued
  at the first cycle after (its GPUs are free at once, its work is lost), moved to its partition
  at the next cycle (the requeue must be a whole second old and the job PENDING) and startable
  `restart_s` (1 s: Slurm's requeue -> RUNNING) later, restarting from zero. A job that ends
  before its requeue is done ("finished in the profiler").

Only cycles where something can change are simulated (new jobs, a profiling run reaching Tprof,
requeued jobs to release, capacity freed while jobs wait for it, a wait passing 2 x Tprof, a job
starting to starve): a cycle with none of these decides exactly what the previous one did.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass

import pandas as pd

from lucidd.backends.base import LiveJob
from lucidd.cluster import ClusterSpec, VCSpec, VirtualCluster
from lucidd.jobs import DONE, PENDING, RUNNING, Job, within_limit
from lucidd.live.config import config_from_dict
from lucidd.policies.base import ClusterView, SchedulingView
from lucidd.policies.slurm_backfill import SlurmBackfill, SlurmConfig
from lucidd.simulator import SimulationError, _SortedJobs

from .live import lent_tprof, plan_profiling, profiling_room_wait, profiling_skip_reason, site_factor, starvation_after
from .policy import LucidConfig, LucidPolicy

PROFILING = "profiling"


class _Rec:
    """What lucidd records about a job (the fields `plan_profiling` reads, as on JobRow)."""

    __slots__ = ("first_seen", "original_submit", "requested_partition", "target_partition", "estimate_s",
                 "profile", "requeued_at", "profile_start", "lent")

    def __init__(self, first_seen, original_submit, partition, estimate):
        self.first_seen = first_seen
        self.original_submit = original_submit
        self.requested_partition = partition
        self.target_partition = partition
        self.estimate_s = estimate
        self.profile = "pending"
        self.requeued_at = None
        self.profile_start = None  # the replay withdraws only jobs that never started in profiling
        self.lent = False  # admitted on GPUs nobody waits for (its Tprof: long_tprof_s)


class _Partition:
    """One VC: its GPUs, Slurm's pending queue (SiteFactor order) and what runs on its nodes."""

    __slots__ = ("name", "vc", "policy", "pending", "running", "dirty", "index", "_by_submission")

    def __init__(self, index, spec, policy):
        self.index = index
        self.name = spec.name
        self.vc = VirtualCluster(spec)
        self.policy = policy
        self.pending = _SortedJobs(policy.pending_key)
        self.running = []  # main jobs and profiling runs on this VC's nodes, in start order
        self.dirty = False
        # (original submission, seq, job) of every job enqueued here, the started ones dropped lazily:
        # the oldest pending submission in O(log n), read at every event while lent runs are kept
        # ([profiler] keep_lent_while_idle), where a scan of the queue was O(n) per event
        self._by_submission = []

    def enqueue(self, job):
        self.pending.add(job)
        heapq.heappush(self._by_submission, (job.attrs["submitted"], job.seq, job))

    def oldest_submitted(self):
        """The original submission of the oldest job pending here, None when none is (a job enqueued
        leaves only by starting: main jobs are never requeued)."""
        heap = self._by_submission
        while heap and heap[0][2].status != PENDING:
            heapq.heappop(heap)
        return heap[0][0] if heap else None


class _BusyNodes:
    """`node in busy`: the node's partition has a pending job (a view, read when asked)."""

    def __init__(self, parts):
        self.parts = parts

    def __contains__(self, node):
        part = self.parts.get(node.rpartition(":")[0])
        return part is not None and bool(part.pending)


class _NodeWaits:
    """`waits.get(node, 0)`: the longest a job pending in the node's partition has waited at t since
    its original submission (DecisionInput.node_wait_s; a view, worked out once per partition)."""

    def __init__(self, parts, t: int):
        self.parts, self.t, self._memo = parts, t, {}

    def get(self, node, default=0):
        name = node.rpartition(":")[0]
        if name not in self._memo:
            part = self.parts.get(name)
            oldest = part.oldest_submitted() if part is not None else None
            self._memo[name] = self.t - oldest if oldest is not None else default
        return self._memo[name]


# The replay options (as `lucidctl simulate`, the tuner and the benches name them) that are one of
# lucidd's config keys: option -> (section, key, type, is a duration). One table for every place that
# turns one into the other (`live_config`, `options_from_config`, `replay_cycle`, the experiment's
# option list), so a new key cannot reach the daemon and miss the simulator.
LIVE_OPTIONS = {
    "tprof": ("profiler", "tprof_s", int, True),
    "nprof": ("profiler", "nprof_gpus", int, False),
    "prof_capacity_gpus": ("profiler", "capacity_gpus", int, False),
    "prof_burst_gpus": ("profiler", "burst_capacity_gpus", int, False),
    "prof_burst_queue": ("profiler", "burst_queue", int, False),
    "prof_max_job_share": ("profiler", "max_job_share", float, False),
    "skip_when_free": ("profiler", "skip_when_free", bool, False),
    "prof_lend": ("profiler", "lend_idle_gpus", bool, False),
    "prof_long_tprof": ("profiler", "long_tprof_s", int, True),
    "prof_long_share": ("profiler", "long_share", float, False),
    "prof_reclaim": ("profiler", "reclaim_lent", bool, False),
    "prof_keep_lent": ("profiler", "keep_lent_while_idle", bool, False),
    "prof_room_wait": ("profiler", "room_wait_s", int, True),
    "starvation_s": ("ordering", "starvation_s", int, True),
    "aging_halflife_s": ("ordering", "aging_halflife_s", int, True),
    "starving_halflife_s": ("ordering", "starving_halflife_s", int, True),
    "starvation_node_cap": ("ordering", "starvation_node_cap", int, False),
    "points_per_doubling": ("ordering", "points_per_doubling", int, False),
}


def live_config(options: dict | None = None):
    """lucidd's own config (lucidd.live.config, same defaults and checks) for a replay.

    options: those of `LIVE_OPTIONS`, plus cprof (0: no profiling), profiling (False: off) and
    interval_s (the reconcile interval)."""
    o = {k: v for k, v in (options or {}).items() if v is not None}
    sections = {"profiler": {}, "ordering": {}}
    for opt, (section, key, kind, _) in LIVE_OPTIONS.items():
        if opt in o:
            sections[section][key] = kind(o[opt])
    if not o.get("profiling", True) or o.get("cprof") == 0:
        sections["profiler"]["enabled"] = False
    daemon = {}
    if "interval_s" in o:
        daemon["interval_s"] = float(o["interval_s"])
        daemon["failopen_after_s"] = max(60.0, 2 * float(o["interval_s"]))
    if o.get("packing"):  # a lucidd config's [packing] section (options_from_config)
        sections["packing"] = dict(o["packing"])
    return config_from_dict({**sections, "daemon": daemon})


def options_from_config(cfg, scale: float = 1.0) -> dict:
    """The replay options of a lucidd config (`LIVE_OPTIONS`), durations times `scale` (a real-Slurm
    replay's compression), plus profiling on/off and the reconcile interval."""
    out = {}
    for opt, (section, key, kind, duration) in LIVE_OPTIONS.items():
        v = getattr(getattr(cfg, section), key)
        out[opt] = int(round(v * scale)) if duration else kind(v)
    out["profiling"] = bool(cfg.profiler.enabled)
    out["interval_s"] = float(cfg.daemon.interval_s * scale)
    out["packing"] = cfg.packing.as_dict() if cfg.packing.enabled else None
    return out


@dataclass
class SlurmModeStats:
    profiled: int = 0
    finished_in_profiler: int = 0
    requeued: int = 0
    released_after_wait: int = 0  # waited > 2 x Tprof for profiling room: went unprofiled
    lost_gpu_s: float = 0.0  # GPU-seconds of profiling runs that were requeued (restarted from zero)
    inbox_wait_s: float = 0.0  # summed over all jobs: submit -> seen by lucidd
    profiling_wait_s: float = 0.0  # summed over admitted jobs: admitted -> started in profiling
    max_profiling_wait_s: int = 0
    withdrawn_from_profiling: int = 0  # admitted, no free GPUs there for 2 x Tprof: went unprofiled
    cycles: int = 0
    rekeys: int = 0
    packed: int = 0  # jobs that started on a GPU another job ran on (GPU packing)

    def as_dict(self) -> dict:
        return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


class LucidOnSlurm:
    """One replay of `jobs` on `spec` with lucidd's decisions applied through Slurm's scheduler.

    `live`: lucidd's Config (`live_config`); `slurm_policy`: a factory of the slurm baseline's
    policy taking `priority=` (SlurmBackfill.from_options gives the experiment's limit rule);
    `clock_offset`: Unix seconds of the trace's time 0 (SiteFactor is computed on the wall clock,
    as live; any offset gives the same order)."""

    def __init__(self, jobs: list[Job], spec: ClusterSpec, live, make_slurm=None, restart_s: int = 1,
                 clock_offset: int = 0, profiling_gpus: int | None = None, prof_gate: int | None = None,
                 share_speeds=None):
        self.jobs = sorted(jobs, key=lambda j: (j.submit_time, j.seq))
        self.spec = spec
        self.live = live
        self.p = live.profiler
        iv = live.daemon.interval_s
        if iv < 1 or iv != int(iv):
            raise SimulationError(f"[daemon] interval_s {iv:g}: the replay needs whole seconds >= 1")
        self.interval = int(iv)
        self.restart_s = int(restart_s)
        self.off = int(clock_offset)
        self.ppd = live.ordering.points_per_doubling
        self.order_on = live.ordering.enabled
        # 0 off, 1 nobody queued in the partition, 2 and it fits on a node now ([profiler] skip_when_free)
        self.prof_gate = (2 if live.profiler.skip_when_free else 0) if prof_gate is None else int(prof_gate)
        self.lend = bool(live.profiler.lend_idle_gpus)
        self.lucid = LucidPolicy(LucidConfig(starvation_s=live.ordering.starvation_s,
                                             aging_halflife_s=live.ordering.aging_halflife_s,
                                             starving_halflife_s=live.ordering.starving_halflife_s,
                                             starvation_node_cap=live.ordering.starvation_node_cap))
        # partition -> GPUs per node, as the daemon reads it (DecisionInput.node_gpus)
        self.node_gpus = {name: vc.gpus_per_node for name, vc in spec.vcs.items()}
        self.over_time_s = 0  # Slurm's OverTimeLimit (its default; a replayed live cycle sets the daemon's)
        self.no_gpus_for_s = None  # how long profiling has had no usable GPU (not tracked; a replay sets it)
        if make_slurm is None:
            # backfill's early stop must know the smallest limit a job brings itself
            own = [j.time_limit for j in jobs if j.time_limit]
            cfg = SlurmConfig(min_time_limit_s=min(own) if own else None)
            make_slurm = lambda priority: SlurmBackfill(cfg, priority=priority)  # noqa: E731
        packing_on = getattr(live, "packing", None) is not None and live.packing.enabled
        self.parts = {}
        for i, (name, vs) in enumerate(spec.vcs.items()):
            self.parts[name] = _Partition(i, vs, make_slurm(_site_factor_key))
            self.parts[name].policy.overrun_ok = packing_on  # a job slowed by sharing may pass its limit
        # the profiling partition spans every node
        self.prof_gpus = spec.total_gpus if profiling_gpus is None else int(profiling_gpus)
        self.stats = SlurmModeStats()
        # lucidd's state
        self.live_jobs = {}  # seq -> LiveJob
        self.recs = {}  # seq -> _Rec
        self.by_seq = {j.seq: j for j in self.jobs}
        self.arrived = []  # submitted, not yet seen by a cycle
        self.inbox = {}  # seq -> LiveJob, in first-seen order
        self.prof = {}  # seq -> LiveJob admitted to profiling and holding (or waiting for) GPUs
        self.prof_pending = []  # seqs admitted, not yet started (Slurm: priority order = job id)
        self.copies = {}  # seq -> the profiling run (a Job copy on some VC's nodes)
        self.requeued = []  # seqs requeued, to be released at a later cycle
        # A replayed job's fields do not change while it waits in the inbox, so its skip reason is
        # read once (a job waiting for profiling room is seen again at every cycle: whole Philly
        # replays ~12 million such looks).
        self._skip_seen = {}
        self._lent_runs = set()  # seqs of lent profiling runs now running
        self.series = []
        # GPU packing as lucidd applies it ([packing] enabled; docs/deploy.md "GPU packing"): a
        # profiled 1-GPU job that passes binder/live.py's test is lowered to one shard once it waits
        # in its partition; it then joins a GPU where another lowered job runs alone (Slurm's
        # first-fit), or takes a whole GPU and waits for a partner there. `share_speeds(a, b)`: the
        # pair's progress rates.
        self.pack = None
        if packing_on:
            from orchestrator.live import live_packing

            self.pack, self.pack_model = live_packing(live)
            if self.pack.gpu_memory_mib <= 0:
                from lucidd.errors import ConfigError

                # live, 0 takes the samplers' figures; a replay has no sampler to ask
                raise ConfigError("[packing] gpu_memory_mib: a replay needs it set (one GPU's memory in MiB): "
                                  "0 takes the smallest GPU the NVML samplers report, and a replay has none")
        self.share_speeds = share_speeds

    # ----- time helpers ---------------------------------------------------------------------
    def _next_cycle(self, t: int) -> int:
        """The first cycle at or after t."""
        return -(-t // self.interval) * self.interval

    def _cycle_after(self, t: int) -> int:
        """The first cycle strictly after t."""
        return (t // self.interval + 1) * self.interval

    def _want_cycle(self, c: int):
        if c not in self._cycles_set:
            self._cycles_set.add(c)
            heapq.heappush(self._cycles, c)

    # ----- Slurm's side ---------------------------------------------------------------------
    def _enqueue(self, job: Job, t: int):
        part = self.parts[job.vc]
        job.status = PENDING
        part.enqueue(job)
        part.dirty = True

    def site_factor_of(self, job: Job, now_abs: int) -> tuple[int, bool]:
        """(SiteFactor, starving) as lucidd writes it for `job` at wall-clock `now_abs`."""
        if not self.order_on:
            return 0, False
        return site_factor(self.lucid, self._ordered(job), now_abs, self.ppd, self.node_gpus.get(job.vc, 0))

    def _set_site_factor(self, job: Job, now_abs: int):
        value, starving = self.site_factor_of(job, now_abs)
        job.attrs["site_factor"] = value
        job.attrs["_starving"] = starving
        if self.order_on and not starving:
            # the one later change of the value: the first cycle after it starts starving
            after = starvation_after(self.lucid.config, job, self.node_gpus.get(job.vc, 0))
            due = self._cycle_after(job.attrs["submitted"] + after)
            heapq.heappush(self._rekeys, (due, job.seq))

    def _rekey(self, t: int):
        """The cycle at t writes the new SiteFactor of every job that started starving."""
        now = t + self.off
        while self._rekeys and self._rekeys[0][0] <= t:
            _, seq = heapq.heappop(self._rekeys)
            job = self.by_seq[seq]
            if job.status != PENDING:
                continue
            if job.attrs.get("_in_part"):
                part = self.parts[job.vc]
                part.pending.remove(job)
                self._set_site_factor(job, now)
                part.pending.add(job)
                part.dirty = True
            else:  # released after its requeue, startable a second later: Slurm has the new value then
                self._set_site_factor(job, now)
            self.stats.rekeys += 1

    def _ordered(self, job: Job) -> Job:
        """The job as the daemon's `live_job` builds it: wall-clock submission, its estimate."""
        sub = job.attrs["submitted"] + self.off
        j = Job(job.seq, job.vc, job.gpu_num, sub, 0, job.seq, user=job.user, name=job.name,
                time_limit=job.time_limit)
        j.attrs["submitted"] = sub
        j.estimate = within_limit(job.estimate, job.time_limit)  # as the daemon's `_order` caps it
        return j

    def _finish_main(self, job: Job, t: int):
        part = self.parts[job.vc]
        partner = job.partner
        if partner is not None:  # its partner goes on alone, at full speed, on the GPU both held
            self._progress(job, t)  # its time shared, up to its end
            self._progress(partner, t)
            job.partner = partner.partner = None
            partner.rate = 1.0
            job.attrs.pop("_shadow", None)
            partner.attrs.pop("_shadow", None)
            self._schedule_end(partner)
        else:
            self.busy -= job.gpu_num
        part.vc.release(job)
        part.running.remove(job)
        part.dirty = True
        job.status = DONE
        job.end_time = t
        self.done += 1

    def _start_main(self, part: _Partition, d, t: int):
        job = d.job
        rank = bisect.bisect_left(part.pending.keys, job.attrs["_qkey"]) + 1  # among the jobs still pending
        part.vc.allocate(job, d.layout)
        self.busy += job.gpu_num
        self._run(part, job, t)
        how = ("started by Slurm's main scheduler in priority order" if d.reason == "priority order" else
               "backfilled by Slurm: ends by its time limit before every reservation")
        sf = job.attrs["site_factor"]
        head = f"{'starvation guard, ' if job.attrs.get('_starving') else ''}queue rank {rank}"
        job.attrs["decision"] = (
            f"{head} (SiteFactor {sf:,}: {self.lucid.priority_text(self._ordered(job), t + self.off)}), "
            f"{how}; not packed: " + ("lowered to one shard (GPU packing), it took a whole GPU, which a later "
                                      "lowered job may share" if job.attrs.get("_lowered") else
                                      "GPU packing is off ([packing] enabled = false)" if self.pack is None else
                                      "it keeps a GPU of its own (GPU packing: not lowered)"))

    def _run(self, part: _Partition, job: Job, t: int, rate: float = 1.0):
        """Slurm starts `job` in its partition at t, on GPUs already given to it, at `rate` of its speed."""
        part.pending.remove(job)
        self.queued -= 1
        job.status = RUNNING
        job.attrs["_main_start"] = job.start_time = t
        part.running.append(job)
        job.attrs["_work"], job.attrs["_at"], job.rate = float(job.duration), t, float(rate)
        self._schedule_end(job)

    # ----- GPU packing -----------------------------------------------------------------------
    def _progress(self, job: Job, t: int):
        """Bring a running main job's remaining work (seconds at full speed) up to t."""
        a = job.attrs
        a["_work"] = max(0.0, a["_work"] - (t - a["_at"]) * job.rate)
        if job.partner is not None:
            job.shared_s += t - a["_at"]
        a["_at"] = t

    def _schedule_end(self, job: Job):
        a = job.attrs
        # at full speed exactly as before packing existed (durations may be fractional); while shared,
        # whole seconds, as the standalone engine's ticks
        end = a["_at"] + (a["_work"] if job.rate == 1.0 else max(0, math.ceil(a["_work"] / job.rate - 1e-9)))
        a["_end"] = end
        heapq.heappush(self._heap, (end, job.seq, 0, job))

    def _may_share(self, job: Job) -> bool:
        """binder/live.py's test, on the job's workload figures as its profiling run would give them."""
        a = job.attrs
        if "_may_share" not in a:
            from binder.live import packing_test

            prof = job.profile or {}
            a["_may_share"] = bool(job.gpu_num == 1 and prof
                                   and packing_test(_Figures(prof), self.pack, self.pack_model)[2] is None)
        return a["_may_share"]

    def _lowerable(self, part: _Partition, job: Job) -> bool:
        """What lucidd lowers to one shard once it waits in `part`: profiled and requeued, and it passes
        binder/live.py's test and its time-limit rule (its estimate, slowed by sharing, ends within its limit)."""
        from binder.live import limit_blocker

        return bool(job.attrs.get("profiled")) and self.recs[job.seq].profile == "released" \
            and self._may_share(job) and limit_blocker(job.estimate, part.policy.limit(job), self.pack) is None

    def _lower(self, part: _Partition) -> bool:
        """lucidd's cycle: each lowerable job that waits in its partition (so that partition waits for
        GPUs) is lowered to one shard; it stays so (it waits for GPUs while it waits). True when any was."""
        lowered = False
        for job in part.pending:
            if not job.attrs.get("_lowered") and self._lowerable(part, job):
                job.attrs["_lowered"] = lowered = True
        return lowered

    def _join(self, part: _Partition, t: int):
        """Slurm's side of packing: a lowered waiting job starts on a GPU where a lowered job runs alone,
        when the main scheduler would reach it (first in the queue) or backfill would let it (it ends by
        its limit before that job's limit: the GPU is held no longer)."""
        alone = [r for r in part.running if r.attrs.get("_lowered") and r.partner is None]
        if not alone:
            return
        policy = part.policy
        first = True
        for job in list(part.pending):
            if not alone:
                break
            if job.attrs.get("_lowered"):
                lim = policy.limit(job)
                ok = [r for r in alone if first or t + lim <= r.start_time + policy.limit(r)]
                if ok:
                    owner = max(ok, key=lambda r: r.start_time + policy.limit(r))
                    alone.remove(owner)
                    self._start_joined(part, job, owner, t, first)
            first = False

    def _start_joined(self, part: _Partition, job: Job, owner: Job, t: int, first: bool):
        part.vc.allocate_shared(job, owner)
        part.dirty = True
        self._progress(owner, t)
        rj, ro = self.share_speeds(job, owner) if self.share_speeds else (1.0, 1.0)
        job.partner, owner.partner = owner, job
        job.was_shared = owner.was_shared = True
        self._run(part, job, t, rj)
        owner.rate = float(ro)
        self._schedule_end(owner)
        # backfill plans the shared GPU free at the later of the two limits: the earlier one is left out
        policy = part.policy
        later = max((job, owner), key=lambda r: r.start_time + policy.limit(r))
        (owner if later is job else job).attrs["_shadow"] = True
        self.stats.packed += 1
        sf = job.attrs["site_factor"]
        job.attrs["packed_with"] = owner.job_id
        job.attrs["decision"] = (
            f"packed with job {owner.job_id}: lowered to one shard (GPU packing) and started by Slurm "
            f"{'in priority order' if first else 'as backfill (it ends by its limit before its partner)'} on its "
            f"GPU (SiteFactor {sf:,}; rates {rj:.2f} / {ro:.2f})")

    # ----- profiling partition --------------------------------------------------------------
    def _start_profiling(self, t: int):
        """PriorityTier=2: admitted jobs take the best-fitting node anywhere, before any partition; a
        job admitted on borrowed GPUs only on the nodes of the partitions lucidd lent it (ExcNodeList
        excludes the others)."""
        if not self.prof_pending:
            return
        left = []
        for seq in self.prof_pending:
            job = self.by_seq[seq]
            g = job.gpu_num
            best = None
            allowed = job.attrs.get("_lent_to")
            for part in (self.parts.values() if allowed is None else (self.parts[n] for n in allowed)):
                gpn = part.vc.gpus_per_node
                if g > gpn:
                    continue
                for node, f in enumerate(part.vc.free):
                    if g <= f and (best is None or f < best[0]):
                        best = (f, part, node)
                        if f == g:
                            break
                if best is not None and best[0] == g:
                    break
            if best is None:
                left.append(seq)
                continue
            _, part, node = best
            copy = Job(job.job_id, part.name, g, job.submit_time, job.duration, job.seq,
                       time_limit=job.time_limit)  # the user's limit holds in profiling too
            part.vc.allocate(copy, ((node, g),))
            self.busy += g
            self.queued -= 1
            copy.status = RUNNING
            copy.start_time = t
            copy.attrs["original"] = job
            part.running.append(copy)
            self.copies[seq] = copy
            lj = self.live_jobs[seq]
            lj.state, lj.start_time = "RUNNING", t + self.off
            lj.node_names = (f"{part.name}:{node}",)
            if self.recs[seq].lent:
                self._lent_runs.add(seq)
            job.attrs["profiler_start"] = t
            job.attrs["profiler_node"] = f"{part.name}:{node}"
            wait = t - job.attrs["_admitted"]
            self.stats.profiling_wait_s += wait
            self.stats.max_profiling_wait_s = max(self.stats.max_profiling_wait_s, wait)
            heapq.heappush(self._heap, (t + job.duration, job.seq, 1, copy))
            self._want_cycle(self._next_cycle(t + self.p.tprof_s))  # lucidd checks Tprof at its cycles
            if self.p.long_tprof_s > self.p.tprof_s:  # ... and the long runs' Tprof
                self._want_cycle(self._next_cycle(t + self.p.long_tprof_s))
        self.prof_pending = left

    def _end_profiling_run(self, copy: Job, t: int):
        part = self.parts[copy.vc]
        self.busy -= copy.gpu_num
        part.vc.release(copy)
        part.running.remove(copy)
        part.dirty = True
        copy.status = DONE
        seq = copy.seq
        del self.copies[seq]
        self.prof.pop(seq, None)
        self._lent_runs.discard(seq)

    # ----- lucidd's cycle -------------------------------------------------------------------
    def decide(self, t: int):
        """The daemon's decisions at the cycle at t: (plan, requeued jobs to release now)."""
        now = t + self.off
        recs = self.recs
        # jobs Slurm shows for the first time: registered in the inbox
        for job in self.arrived:
            lj = self.live_jobs[job.seq]
            recs[job.seq].first_seen = now
            self.inbox[job.seq] = lj
            self.stats.inbox_wait_s += t - job.submit_time
        self.arrived = []
        # requeued jobs whose requeue is a whole second old: to their partition, starting now
        releasing = [s for s in self.requeued if now >= recs[s].requeued_at + 1]
        if releasing:
            gone = set(releasing)
            self.requeued = [s for s in self.requeued if s not in gone]
        queued, free = self._gate_view()
        plan = plan_profiling(self.p, self.interval, now, list(self.inbox.values()), list(self.prof.values()),
                              recs, self.prof_gpus, skip=self._skip, queued=queued, free=free,
                              lendable=self._lendable_view(), busy_nodes=self._busy_nodes(),
                              node_wait_s=self._node_wait_view(t), over_time_s=self.over_time_s,
                              no_gpus_for_s=self.no_gpus_for_s)
        return plan, releasing

    def _skip(self, j, r):
        seen = self._skip_seen
        if j.job_id not in seen:
            seen[j.job_id] = profiling_skip_reason(self.p, j, r)
        return seen[j.job_id]

    def _reclaim_due(self, t: int) -> int | None:
        """The cycle at which lucidd requeues a lent run for its partition's waiting jobs, None when no
        run is due: with `reclaim_lent` the next cycle, for any lent run on a partition someone waits
        in; with `keep_lent_while_idle`, for such a run, the first cycle both past its Tprof and when
        the oldest job waiting there has waited as long since submission."""
        if self.p.reclaim_lent:
            if any(self.parts[self.copies[s].vc].pending for s in self._lent_runs):
                return self._cycle_after(t)
            return None
        if not self.p.keep_lent_while_idle:
            return None
        limit = lent_tprof(self.p)
        waits = self._node_wait_view(t)
        due = None
        for s in self._lent_runs:
            copy = self.copies[s]
            if not self.parts[copy.vc].pending:
                continue
            at = max(copy.start_time, t - waits.get(f"{copy.vc}:0")) + limit  # t - wait: the oldest's submission
            due = at if due is None else min(due, at)
        if due is None:
            return None
        return self._cycle_after(t) if due <= t else self._next_cycle(due)

    def _node_wait_view(self, t: int):
        return _NodeWaits(self.parts, t)

    def _busy_nodes(self):
        """Nodes ("partition:index", as profiling runs name theirs) of partitions someone waits in."""
        return _BusyNodes(self.parts)

    def _idle_parts(self) -> list[str]:
        return [name for name, part in self.parts.items() if not part.pending]

    def _lendable_view(self) -> tuple[int, int]:
        """What the daemon computes for lending (DecisionInput.lendable_gpus, .lendable_node_gpus): the
        free GPUs on the nodes of partitions nobody waits in, and the most on one such node."""
        if not self.lend:
            return 0, 0
        gpus = most = 0
        for name in self._idle_parts():
            part = self.parts[name]
            gpus += sum(part.vc.free)
            most = max(most, max(part.vc.free, default=0))
        return gpus, most

    def _gate_view(self) -> tuple[dict | None, dict | None]:
        """What the profiling gate reads (DecisionInput.queued, .free_gpus): jobs pending per
        partition, most free GPUs on one node of each."""
        if not self.prof_gate:
            return None, None
        queued = {name: len(part.pending) for name, part in self.parts.items()}
        free = {name: max(part.vc.free, default=0) for name, part in self.parts.items()} if self.prof_gate == 2 else None
        return queued, free

    def _cycle(self, t: int):
        now = t + self.off
        self.stats.cycles += 1
        recs = self.recs
        if self.pack is not None:
            for part in self.parts.values():
                if self._lower(part):
                    part.dirty = True  # Slurm looks at a changed request
        plan, releasing = self.decide(t)
        # apply, in the daemon's order: requeue, release requeued jobs, profile, release
        for seq, reason in plan.requeue:
            copy = self.copies[seq]
            job = self.by_seq[seq]
            lost = t - copy.start_time
            self._end_profiling_run(copy, t)
            recs[seq].profile, recs[seq].requeued_at = "requeued", now
            self.live_jobs[seq].state = "PENDING"
            self.requeued.append(seq)
            self.queued += 1
            job.attrs["profiler_end"] = t
            self.stats.requeued += 1
            self.stats.lost_gpu_s += lost * job.gpu_num
            self._want_cycle(self._cycle_after(t))
        # a run whose own time limit ends it within Tprof + grace (traces with limits); never for a
        # missed cycle (a replay misses none): the run goes on to its end, counted finished in profiling
        for seq, reason in plan.abandon:
            recs[seq].profile = "abandoned"
        for seq in releasing:
            job = self.by_seq[seq]
            recs[seq].profile = "released"
            self._set_site_factor(job, now)
            job.attrs["_ready"] = t + self.restart_s
            heapq.heappush(self._ready, (t + self.restart_s, seq))
        lent_to = tuple(self._idle_parts()) if plan.lend else ()
        lent = set(plan.lend)
        for seq, reason in plan.profile:
            lj = self.inbox.pop(seq)
            lj.partition = PROFILING
            recs[seq].profile = "admitted"
            self.prof[seq] = lj
            job = self.by_seq[seq]
            job.attrs["profiled"] = True
            job.attrs["profile_reason"] = reason
            job.attrs["_admitted"] = t
            job.attrs["_lent_to"] = lent_to if seq in lent else None
            recs[seq].lent = seq in lent
            self.prof_pending.append(seq)
            self.stats.profiled += 1
        if plan.profile:
            self.prof_pending.sort()
        for seq, reason in plan.release:
            job = self.by_seq[seq]
            if seq in self.inbox:
                lj = self.inbox.pop(seq)
            else:  # admitted, never started in profiling: withdrawn to its partition
                lj = self.prof.pop(seq)
                job.attrs["profiled"] = False
                self.stats.withdrawn_from_profiling += 1
            lj.partition = recs[seq].target_partition
            recs[seq].profile = "skipped"
            job.attrs["profile_reason"] = reason
            if "for profiling room" in reason:
                self.stats.released_after_wait += 1
            self._set_site_factor(job, now)
            job.attrs["_in_part"] = True
            self._enqueue(job, t)
        self.prof_pending = [seq for seq in self.prof_pending if seq in self.prof]  # less the withdrawn
        # jobs still waiting for profiling room, or admitted and not yet started there: look again when
        # their wait passes 2 x Tprof (any older one left this cycle)
        # (the earliest to come is enough: that cycle asks again for the next)
        wait = profiling_room_wait(self.p) - self.off
        due = [c for c in (self._cycle_after(recs[seq].first_seen + wait) for seq in (*self.prof_pending, *self.inbox))
               if c > t]
        if due:
            self._want_cycle(min(due))

    # ----- the loop ------------------------------------------------------------------------
    def _init_state(self):
        self._lent_runs = set()
        self._skip_seen = {}
        self._heap = []  # (time, seq, kind 0 main / 1 profiling run, job)
        self._cycles, self._cycles_set = [], set()
        self._rekeys = []
        self._ready = []  # (time, seq): released requeued jobs, startable then
        self.done = 0
        self.busy = 0  # GPUs held (main jobs and profiling runs)
        self.queued = 0  # submitted, neither running nor done
        for job in self.jobs:
            job.reset()
            job.attrs["submitted"] = job.submit_time
            job.attrs["_lent_to"] = None
            # every column is written whether or not a job used it, so jobs_<policy>.csv has the same
            # header on every replay (profiler_node was missing where nothing was profiled)
            job.attrs.update(profiled=False, profiler_finished=False, profiler_start=None, profiler_end=None,
                             profiler_node=None, packed_with=None, share_score=None)
            gpn = self.parts[job.vc].vc.gpus_per_node if job.vc in self.parts else 8
            self.live_jobs[job.seq] = LiveJob(job_id=job.seq, name=job.name, user=job.user, partition="inbox",
                                              gpus=job.gpu_num, nodes=max(1, -(-job.gpu_num // gpn)),
                                              submit_time=job.submit_time + self.off,
                                              time_limit_s=job.time_limit)
            self.recs[job.seq] = _Rec(None, job.submit_time + self.off, job.vc, job.estimate)
            if job.vc not in self.parts:
                raise SimulationError(f"job {job.job_id} names VC '{job.vc}', which the cluster config lacks")

    def run(self, on_progress=None) -> SlurmModeStats:
        jobs, n = self.jobs, len(self.jobs)
        self._init_state()
        heap, ready, cycles = self._heap, self._ready, self._cycles
        i = 0
        t = jobs[0].submit_time if jobs else 0
        parts = list(self.parts.values())
        while self.done < n:
            before = self.done
            # 1. ends: main jobs, and profiling runs that end before lucidd requeues them
            while heap and heap[0][0] <= t:
                end, seq, kind, job = heapq.heappop(heap)
                if job.status != RUNNING:
                    continue  # a requeued profiling run
                if kind == 0 and job.attrs.get("_end", end) != end:
                    continue  # its end moved (it started or stopped sharing a GPU)
                if kind == 0:
                    self._finish_main(job, end)
                    if self.lend and self.inbox and not self.parts[job.vc].pending:
                        self._want_cycle(self._next_cycle(end))  # GPUs nobody waits for: lendable next cycle
                    continue
                self._end_profiling_run(job, end)
                orig = job.attrs["original"]
                orig.status = DONE
                orig.end_time = end
                orig.attrs["profiler_end"] = end
                orig.attrs["profiler_finished"] = True
                # a lent run, or one kept past Tprof as one of the oldest, had long_tprof_s (the row's
                # profile_reason says so; this said Tprof: a review)
                ran = end - job.attrs.get("profiler_start", orig.attrs.get("profiler_start", end))
                limit = (self.p.long_tprof_s if self.recs[seq].lent or ran > self.p.tprof_s else self.p.tprof_s)
                orig.attrs["decision"] = f"finished inside the profiler's {max(limit, self.p.tprof_s)}s limit"
                self.recs[seq].profile = "finished"
                self.stats.finished_in_profiler += 1
                self.done += 1
                if self.inbox:  # capacity freed: the next cycle may admit
                    self._want_cycle(self._next_cycle(t))
            # 2. new jobs: they wait in the inbox for the next cycle
            while i < n and jobs[i].submit_time <= t:
                self.arrived.append(jobs[i])
                self.queued += 1
                self._want_cycle(self._next_cycle(jobs[i].submit_time))
                i += 1
            # 3. released requeued jobs become startable in their partition
            while ready and ready[0][0] <= t:
                _, seq = heapq.heappop(ready)
                job = self.by_seq[seq]
                job.attrs["_in_part"] = True
                if self.pack is not None and len(self.parts[job.vc].pending) and self._lowerable(self.parts[job.vc], job):
                    job.attrs["_lowered"] = True  # lowered before its move: its partition waits for GPUs
                self._enqueue(job, t)
            # 4. lucidd's cycle (a cycle that only re-keys starving jobs needs nothing else)
            if self._rekeys and self._rekeys[0][0] <= t:
                self._rekey(t)
            if cycles and cycles[0] <= t:
                while cycles and cycles[0] <= t:
                    self._cycles_set.discard(heapq.heappop(cycles))
                self._cycle(t)
            # 5. Slurm: profiling (PriorityTier=2) first, then each partition that changed
            self._start_profiling(t)
            for part in parts:
                if not part.dirty:
                    continue
                part.dirty = False
                if not len(part.pending):
                    continue
                running = part.running
                if self.pack is not None:
                    self._join(part, t)
                    if not len(part.pending):
                        continue
                    running = [r for r in part.running if not r.attrs.get("_shadow")]
                view = SchedulingView(now=t, pending=part.pending, running=running,
                                      cluster=ClusterView(part.name, part.vc.gpus_per_node, part.vc.free))
                for d in part.policy.schedule(view):
                    self._start_main(part, d, t)
                if self.pack is not None and len(part.pending):
                    self._join(part, t)  # Slurm's same pass: a job lowered to one shard joins one just started
                if self.lend and self.inbox and not part.pending:
                    self._want_cycle(self._cycle_after(t))  # its last waiting job started: its free GPUs are lendable
            if self._lent_runs:
                due = self._reclaim_due(t)
                if due is not None:
                    self._want_cycle(due)  # the cycle at which lucidd reclaims lent GPUs
            self.series.append((t, self.busy, self.queued))
            if on_progress and self.done != before:
                on_progress(self.done - before)
            # 6. the next moment anything can change
            nxt = []
            if heap:
                nxt.append(heap[0][0])
            if i < n:
                nxt.append(jobs[i].submit_time)
            if cycles:
                nxt.append(cycles[0])
            if ready:
                nxt.append(ready[0][0])
            rk = self._rekeys
            while rk and self.by_seq[rk[0][1]].status != PENDING:
                heapq.heappop(rk)  # started before it would have starved
            if rk:
                nxt.append(rk[0][0])
            if not nxt:
                if self.done < n:
                    stuck = [j.job_id for p in parts for j in p.pending][:5] + self.prof_pending[:5]
                    raise SimulationError(f"lucid on slurm: {n - self.done} job(s) can never start (first: {stuck})")
                break
            t = max(t, min(nxt))
        self._finish_jobs()
        return self.stats

    def _finish_jobs(self):
        for job in self.jobs:
            a = job.attrs
            if a.get("profiler_finished"):
                job.start_time = a["profiler_start"]
                job.queue = a["profiler_start"] - job.submit_time
            else:
                job.start_time = a["_main_start"]
                job.queue = a["_main_start"] - job.submit_time
                if a.get("profiled"):  # it ran in profiling, then waited again after the requeue
                    job.queue -= a["profiler_end"] - a["profiler_start"]
            a.pop("original", None)

    def series_frame(self) -> pd.DataFrame:
        if not self.series:
            return pd.DataFrame(columns=["time", "busy_gpus", "queued_jobs"])
        df = pd.DataFrame(self.series, columns=["time", "busy_gpus", "queued_jobs"])
        return df.drop_duplicates("time", keep="last").reset_index(drop=True)


class _Figures:
    """A trace job's workload figures as the NVML sampler would give them for its profiling run."""

    def __init__(self, prof: dict):
        from binder.speeds import _num

        self.gpu_util, self.gmem_util, self.gmem_mib = (_num(prof.get(k)) for k in ("gpu_util", "gmem_util", "gmem"))
        self.util_samples = 10 ** 6 if self.gpu_util is not None else 0


def _site_factor_key(job):
    """Slurm's order in a partition: SiteFactor, higher first; ties by original submission, then job id."""
    return (-job.attrs["site_factor"], job.attrs["submitted"], job.seq)


# What a cycle recorded before a key existed meant: no starving size preference, no skip, the
# capacity's defaults and no width limit, no lending (the keys every record has are not here).
_RECORD_DEFAULTS = {"starving_halflife_s": 0, "skip_when_free": False, "capacity_gpus": 0, "burst_capacity_gpus": 0,
                    "burst_queue": 10, "max_job_share": 1.0, "lend_idle_gpus": False, "long_tprof_s": 0,
                    "long_share": 0.0, "reclaim_lent": False, "room_wait_s": 0, "starvation_node_cap": 1,
                    "keep_lent_while_idle": False}


def replay_cycle(recorded: dict, live=None) -> dict:
    """Feed one recorded live cycle (`LucidDecider.record`) through this mode's decision code.

    `live`: the daemon's config (its [profiler] exemptions are not in the record); without it,
    lucidd's defaults with the recorded Tprof, Nprof, profiling capacity and ordering values. Returns the
    profiling decisions (profile in admission order, release and requeue sorted) and the
    SiteFactor of every recorded waiting job and every job released this cycle (from the inbox, or
    withdrawn from profiling), keyed by job id as text: the same shape as the record's decisions."""
    c = recorded["config"]
    if live is None:
        live = live_config({opt: c.get(key, _RECORD_DEFAULTS.get(key)) for opt, (_, key, _, _) in LIVE_OPTIONS.items()})
    now = int(recorded["now"])
    entries = [("inbox", d) for d in recorded["inbox"]] + [("profiling", d) for d in recorded["profiling"]] + \
        [("waiting", d) for d in recorded["waiting"]]
    jobs, parts = [], {}
    for _, d in entries:
        vc = d.get("target_partition") or d["partition"]
        parts.setdefault(vc, 0)
        parts[vc] = max(parts[vc], -(-int(d["gpus"]) // 8))
        submitted = int(d["original_submit"] if d.get("original_submit") is not None else now)
        j = Job(d["job_id"], vc, d["gpus"], submitted, 0, int(d["job_id"]), user=d.get("user") or "",
                name=d.get("name") or "", time_limit=d.get("time_limit_s"))
        j.estimate = within_limit(d.get("estimate_s"), j.time_limit)
        jobs.append(j)
    spec = ClusterSpec({vc: VCSpec(vc, max(1, n), 8) for vc, n in parts.items()})
    sim = LucidOnSlurm(jobs, spec, live, profiling_gpus=recorded["profiling_gpus"])
    sim.node_gpus = dict(recorded.get("node_gpus") or {})  # as the daemon saw them (none: starvation_s)
    sim.over_time_s = recorded.get("over_time_limit_s", 0)  # None: UNLIMITED (absent before 2 December 2026)
    sim.no_gpus_for_s = recorded.get("profiling_gpus_gone_s")
    sim._init_state()
    if sim.prof_gate:  # the partitions' queues and free GPUs as the daemon saw them
        queued, free = dict(recorded.get("queued") or {}), dict(recorded.get("free_gpus") or {})
        sim._gate_view = lambda: (queued, free)
    lendable = tuple(recorded.get("lendable") or (0, 0))
    sim._lendable_view = lambda: lendable if sim.lend else (0, 0)
    busy = frozenset(recorded.get("busy_nodes") or ())
    sim._busy_nodes = lambda: busy
    waits = recorded.get("node_wait_s")  # None in a record from before the key: busy counts as waited for
    sim._node_wait_view = lambda t: waits
    for kind, d in entries:
        seq = int(d["job_id"])
        lj = sim.live_jobs[seq]
        lj.partition, lj.state, lj.start_time = d["partition"], d["state"], d.get("start_time")
        lj.nodes, lj.user, lj.account = d.get("nodes") or 1, d.get("user") or "", d.get("account") or ""
        lj.requeue, lj.comment, lj.array_pending = d.get("requeue", True), d.get("comment") or "", \
            bool(d.get("array_pending"))
        lj.array_job_id = d.get("array_job_id") or 0
        lj.restart_count = d.get("restart_count") or 0
        lj.node_names = tuple(d.get("node_names") or ())
        # (absent from a record made before 2 December 2026: a job waiting for GPUs, not held)
        lj.reason, lj.dependency = d.get("reason") or "", d.get("dependency") or ""
        if d.get("priority") is not None:
            lj.priority = int(d["priority"])
        r = sim.recs[seq]
        r.first_seen = d.get("first_seen") if d.get("first_seen") is not None else now
        r.profile = d.get("profile") or "pending"
        r.profile_start = d.get("profile_start")
        r.lent = bool(d.get("lent"))
        if kind == "inbox":
            sim.inbox[seq] = lj
        elif kind == "profiling":
            sim.prof[seq] = lj
    plan, _ = sim.decide(now)
    released = {jid for jid, _ in plan.release}
    factors = {}
    for kind, d in entries:
        if kind == "waiting" or int(d["job_id"]) in released:
            factors[str(d["job_id"])] = sim.site_factor_of(sim.by_seq[int(d["job_id"])], now)[0]
    return {"profile": [jid for jid, _ in plan.profile], "lend": list(plan.lend), "release": sorted(released),
            "requeue": sorted(jid for jid, _ in plan.requeue), "site_factors": factors}
