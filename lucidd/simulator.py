"""Discrete-event, deterministic trace replay: the SimBackend of the scheduling core.

The engine owns time and cluster state; a policy (lucidd.policies.base.Policy) only sees plain
data and returns decisions, exactly as it will on a live cluster. Time advances from event to
event (arrivals, completions, the policy's own periodic or requested decision points), never
second by second; docs/simulator.md explains why that yields the same decisions as the Lucid
artifact's one-second loop.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from .cluster import ClusterSpec, VirtualCluster
from .errors import LucidError
from .jobs import DONE, PENDING, RUNNING, Job, ticks_to_finish
from .policies.base import ClusterView, Policy, Preempt, SchedulingView, Share, Start


class SimulationError(LucidError):
    pass


class _SortedJobs:
    """Pending jobs in a policy's static key order, kept sorted incrementally."""

    __slots__ = ("keys", "jobs", "key")

    def __init__(self, key):
        self.key = key
        self.keys = []
        self.jobs = []

    def add(self, job):
        k = self.key(job)
        job.attrs["_qkey"] = k
        i = bisect.bisect_right(self.keys, k)
        self.keys.insert(i, k)
        self.jobs.insert(i, job)

    def remove(self, job):
        k = job.attrs["_qkey"]
        i = bisect.bisect_left(self.keys, k)
        while self.jobs[i] is not job:
            i += 1
        del self.keys[i]
        del self.jobs[i]

    def __iter__(self):
        return iter(self.jobs)

    def __len__(self):
        return len(self.jobs)


@dataclass
class SimHooks:
    """Optional plain-data providers for policies that need more than jobs and GPUs."""

    context: Callable[[int, str], dict] | None = None  # (now, vc) -> dict passed as view.context
    share_speeds: Callable[[Job, Job], tuple[float, float]] | None = None  # co-located progress rates
    on_decisions: Callable[[int, str, list], None] | None = None  # decision log (for explain)


class VCSimulation:
    """Replays one VC's jobs under one policy."""

    def __init__(self, vc: VirtualCluster, jobs: list[Job], policy: Policy, hooks: SimHooks | None = None):
        self.vc = vc
        self.jobs = jobs
        self.policy = policy
        self.hooks = hooks or SimHooks()
        self.now = jobs[0].submit_time if jobs else 0
        self.pending: list[Job] = []
        self.sorted_pending = _SortedJobs(policy.pending_key) if policy.pending_key is not None else None
        self.running: list[Job] = []
        self._heap: list = []
        self.done = 0
        self.events: list[tuple[int, int, int]] = []  # (time, busy_gpus, queued) per decision point

    # ----- progress accounting -------------------------------------------------------------
    def _sync(self, job: Job, t: int) -> None:
        """Bring remain/attained of a running job up to time t."""
        elapsed = t - job.progress_at
        if elapsed <= 0:
            return
        ticks = min(elapsed, ticks_to_finish(job.remain, job.rate))
        job.remain -= ticks * job.rate
        job.attained += ticks * job.gpu_num
        if job.partner is not None:
            job.shared_s += elapsed
        job.progress_at = t

    def _schedule_completion(self, job: Job) -> None:
        job.version += 1
        end = job.progress_at + ticks_to_finish(job.remain, job.rate) + self.policy.release_lag
        heapq.heappush(self._heap, (end, job.seq, job.version, job))

    def _set_rate(self, job: Job, rate: float, t: int) -> None:
        self._sync(job, t)
        job.rate = rate
        self._schedule_completion(job)

    # ----- state transitions ---------------------------------------------------------------
    def _enqueue(self, job: Job) -> None:
        job.status = PENDING
        self.pending.append(job)
        if self.sorted_pending is not None:
            self.sorted_pending.add(job)

    def _dequeue(self, job: Job) -> None:
        self.pending.remove(job)
        if self.sorted_pending is not None:
            self.sorted_pending.remove(job)

    def _start(self, job: Job, t: int) -> None:
        if job.status != PENDING:
            raise SimulationError(f"policy {self.policy.name} started job {job.job_id}, which is not pending")
        self._dequeue(job)
        if job.start_time is None:
            job.start_time = t
            job.queue = t - job.submit_time
        else:
            job.queue += t - job.last_stop
        job.status = RUNNING
        job.progress_at = t
        self.running.append(job)

    def _unpair(self, job: Job, t: int) -> None:
        partner = job.partner
        if partner is not None:
            job.partner = None
            partner.partner = None
            job.rate = 1.0
            if partner.status == RUNNING:
                self._set_rate(partner, 1.0, t)

    def _finish(self, job: Job, t: int) -> None:
        self._sync(job, t)
        self._unpair(job, t)
        self.vc.release(job)
        self.running.remove(job)
        job.status = DONE
        job.end_time = t
        job.remain = 0.0
        self.done += 1

    def _preempt(self, job: Job, t: int) -> None:
        if job.status != RUNNING:
            raise SimulationError(f"policy {self.policy.name} preempted job {job.job_id}, which is not running")
        self._sync(job, t)
        self._unpair(job, t)
        self.vc.release(job)
        self.running.remove(job)
        job.version += 1  # drop its pending completion event
        job.preemptions += 1
        job.last_stop = t
        job.remain += self.policy.preemption_overhead(job)
        self._enqueue(job)

    def _apply(self, decisions: Iterable, t: int) -> None:
        for d in decisions:
            if isinstance(d, Preempt):
                self._preempt(d.job, t)
            elif isinstance(d, Start):
                job = d.job
                try:
                    self.vc.allocate(job, d.layout)
                except ValueError as exc:
                    raise SimulationError(f"policy {self.policy.name}: {exc}") from None
                self._start(job, t)
                self._schedule_completion(job)
            elif isinstance(d, Share):
                job, partner = d.job, d.partner
                if partner.status != RUNNING or partner.partner is not None or partner.gpu_num != job.gpu_num:
                    raise SimulationError(f"policy {self.policy.name}: job {job.job_id} cannot share with {partner.job_id}")
                try:
                    self.vc.allocate_shared(job, partner)
                except ValueError as exc:
                    raise SimulationError(f"policy {self.policy.name}: {exc}") from None
                self._start(job, t)
                speeds = self.hooks.share_speeds(job, partner) if self.hooks.share_speeds else (1.0, 1.0)
                job.partner, partner.partner = partner, job
                job.was_shared = partner.was_shared = True
                job.rate = float(speeds[0])
                self._schedule_completion(job)
                self._set_rate(partner, float(speeds[1]), t)
            else:
                raise SimulationError(f"policy {self.policy.name} returned an unknown decision {d!r}")

    # ----- main loop -----------------------------------------------------------------------
    def run(self, on_progress: Callable[[int], None] | None = None) -> None:
        jobs, policy, n = self.jobs, self.policy, len(self.jobs)
        period = policy.period
        i = 0
        dirty = False
        wake = None
        t = self.now
        heap = self._heap
        while self.done < n:
            finished_before = self.done
            # 1. release jobs whose work is done
            while heap and heap[0][0] <= t:
                end, _, version, job = heapq.heappop(heap)
                if version != job.version or job.status != RUNNING:
                    continue
                self._finish(job, end)
                dirty = True
            # 2. admit jobs submitted by now
            new_jobs = []
            while i < n and jobs[i].submit_time <= t:
                job = jobs[i]
                i += 1
                self._enqueue(job)
                new_jobs.append(job)
                dirty = True
            # 3. decide
            wake_due = wake is not None and wake <= t
            decide = (dirty or wake_due) if period is None else (t % period == 0 and (dirty or wake_due))
            if decide:
                if policy.tracks_progress:
                    for job in self.running:
                        self._sync(job, t)
                view = SchedulingView(
                    now=t,
                    pending=self.sorted_pending if self.sorted_pending is not None else self.pending,
                    running=self.running,
                    cluster=ClusterView(self.vc.name, self.vc.gpus_per_node, self.vc.free),
                    new_jobs=new_jobs,
                    context=self.hooks.context(t, self.vc.name) if self.hooks.context else None,
                )
                decisions = policy.schedule(view)
                if decisions:
                    self._apply(decisions, t)
                    if self.hooks.on_decisions:
                        self.hooks.on_decisions(t, self.vc.name, decisions)
                dirty = False
                wake = policy.wakeup_after(view)
            if decide or new_jobs or self.done != finished_before:
                self.events.append((t, self.vc.busy_gpus(), len(self.pending)))
            if on_progress and self.done != finished_before:
                on_progress(self.done - finished_before)
            # 4. next point in time where something can change
            while heap and (heap[0][2] != heap[0][3].version or heap[0][3].status != RUNNING):
                heapq.heappop(heap)  # drop stale completion events
            candidates = []
            if heap:
                candidates.append(heap[0][0])
            if i < n:
                candidates.append(jobs[i].submit_time)
            if period is not None and (dirty or wake is not None):
                nxt = t + 1 if dirty else max(t + 1, wake)
                candidates.append(-(-nxt // period) * period)
            elif period is None and wake is not None and wake > t:
                candidates.append(wake)
            if not candidates:
                if self.done < n:
                    stuck = ", ".join(str(j.job_id) for j in self.pending[:5])
                    raise SimulationError(
                        f"VC {self.vc.name}: policy {policy.name} left {len(self.pending)} job(s) waiting with nothing "
                        f"running and nothing arriving (first: {stuck}); the jobs can never start"
                    )
                break
            t = max(t, min(candidates))
        self.now = t


@dataclass
class SimulationResult:
    policy: str
    jobs: pd.DataFrame  # one row per job
    series: pd.DataFrame  # cluster-wide busy GPUs and queued jobs over time
    total_gpus: int
    extra: dict = field(default_factory=dict)


def job_time_limit(limit) -> int | None:
    """A trace job's time limit in whole seconds, None when unknown. As the user gave it: a job may
    have run past it (Slurm's OverTimeLimit, the kill grace), and Slurm's engine then plans with the
    duration it ran (`SlurmBackfill.limit`), while an estimate is capped at the limit itself, as
    live (capping at the duration would hand the scheduler the truth)."""
    if limit is None or limit != limit:  # NaN: no limit known
        return None
    return max(int(math.ceil(limit)), 1)


def jobs_from_frame(df: pd.DataFrame) -> list[Job]:
    """Turn a canonical trace frame (lucidd.traces) into Job objects, in (submit_time, seq) order."""
    df = df.sort_values(["submit_time", "seq"], kind="stable")
    profile_cols = [c for c in ("model", "dataset", "batchsize", "amp", "speed", "gpu_util", "gmem_util", "gmem") if c in df]
    cols = {c: df[c].tolist() for c in ("job_id", "vc", "gpu_num", "submit_time", "duration", "seq")}
    opt = {c: (df[c].tolist() if c in df else None) for c in ("user", "name", "cpu_num", "state")}
    profiles = df[profile_cols].to_dict("records") if profile_cols else None
    limits = df["time_limit"].tolist() if "time_limit" in df else None
    out = []
    for k in range(len(df)):
        out.append(Job(
            cols["job_id"][k], cols["vc"][k], cols["gpu_num"][k], cols["submit_time"][k], cols["duration"][k],
            cols["seq"][k],
            user=opt["user"][k] if opt["user"] is not None else "",
            name=opt["name"][k] if opt["name"] is not None else "",
            cpu_num=opt["cpu_num"][k] if opt["cpu_num"] is not None else 0,
            state=opt["state"][k] if opt["state"] is not None else "",
            profile=profiles[k] if profiles is not None else None,
            time_limit=job_time_limit(limits[k]) if limits is not None else None,
        ))
    return out


def simulate(jobs: list[Job], spec: ClusterSpec, policy_factory: Callable[[str], Policy],
             hooks: SimHooks | None = None, on_progress: Callable[[int], None] | None = None,
             policy_name: str | None = None) -> SimulationResult:
    """Replay `jobs` on `spec`, one independent VC at a time (VCs are static partitions)."""
    for job in jobs:
        job.reset()
    by_vc: dict[str, list[Job]] = {}
    for job in jobs:
        by_vc.setdefault(job.vc, []).append(job)
    series_parts = []
    name = policy_name
    for vc_name, vc_jobs in by_vc.items():
        if vc_name not in spec.vcs:
            raise SimulationError(f"job {vc_jobs[0].job_id} names VC '{vc_name}', which the cluster config lacks")
        vc_jobs.sort(key=lambda j: (j.submit_time, j.seq))
        policy = policy_factory(vc_name)
        name = name or policy.name
        sim = VCSimulation(VirtualCluster(spec.vcs[vc_name]), vc_jobs, policy, hooks)
        sim.run(on_progress)
        if sim.events:
            ev = np.asarray(sim.events, dtype=np.int64)
            series_parts.append(pd.DataFrame({"time": ev[:, 0], "vc": vc_name, "busy_gpus": ev[:, 1], "queued_jobs": ev[:, 2]}))
    return SimulationResult(name or "policy", results_frame(jobs), merge_series(series_parts), spec.total_gpus)


def results_frame(jobs: list[Job]) -> pd.DataFrame:
    df = pd.DataFrame({
        "job_id": [j.job_id for j in jobs],
        "vc": [j.vc for j in jobs],
        "user": [j.user for j in jobs],
        "gpu_num": [j.gpu_num for j in jobs],
        "submit_time": [j.submit_time for j in jobs],
        "duration": [j.duration for j in jobs],
        "start_time": [j.start_time for j in jobs],
        "end_time": [j.end_time for j in jobs],
        "queue_s": [j.queue for j in jobs],
        "preemptions": [j.preemptions for j in jobs],
        "shared": [j.was_shared for j in jobs],
        "shared_s": [round(j.shared_s) for j in jobs],
        "estimate_s": [j.estimate for j in jobs],
    })
    df["jct_s"] = df["end_time"] - df["submit_time"]
    for key in sorted({k for j in jobs for k in j.attrs if not k.startswith("_")}):
        df[key] = [j.attrs.get(key) for j in jobs]
    return df.sort_values(["submit_time", "job_id"], kind="stable").reset_index(drop=True)


def merge_series(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Cluster-wide step series: per VC values carried forward, summed over VCs."""
    if not parts:
        return pd.DataFrame(columns=["time", "busy_gpus", "queued_jobs"])
    wide = []
    for p in parts:
        p = p.drop_duplicates("time", keep="last").set_index("time")[["busy_gpus", "queued_jobs"]]
        wide.append(p)
    times = sorted(set().union(*[p.index for p in wide]))
    total = None
    for p in wide:
        r = p.reindex(times).ffill().fillna(0)
        total = r if total is None else total + r
    total = total.reset_index().rename(columns={"index": "time"})
    return total.astype({"busy_gpus": "int64", "queued_jobs": "int64"})
