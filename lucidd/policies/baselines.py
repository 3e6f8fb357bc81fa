"""Baseline policies with the Lucid artifact's semantics (docs/simulator.md has the details).

FIFO, SJF and QSSF keep a strict queue order and stop at the first job that does not fit (no
backfill). SRTF and Tiresias are preemptive: each decision point they rank every job, admit jobs
in rank order while the VC's GPU quota lasts, and preempt running jobs that fall outside it.
"""

from __future__ import annotations

from .base import Policy, Preempt, SchedulingView, Start, greedy_in_order
from .slurm_backfill import SlurmBackfill  # Slurm's own scheduler (age priority + backfill)


def artifact_preemption_overhead(job) -> int:
    """Checkpoint + cold start after a preemption: 40 s up to 8 GPUs, 60 s above (artifact)."""
    return 40 if job.gpu_num <= 8 else 60


class FIFO(Policy):
    name = "fifo"

    @staticmethod
    def pending_key(job):
        return (job.submit_time, job.seq)

    def schedule(self, view):
        return greedy_in_order(view, view.pending)


class SJF(Policy):
    """Shortest job first with oracle (true) durations."""

    name = "sjf"

    @staticmethod
    def pending_key(job):
        return (job.duration, job.seq)

    def schedule(self, view):
        return greedy_in_order(view, view.pending)


class QSSF(Policy):
    """Quasi-shortest-service-first: estimated duration x GPUs, smallest first (Helios, SC'21).

    As in the artifact, a decision point whose queue holds only jobs submitted at that very
    second orders them by GPU count instead (their estimates are not consulted yet).
    """

    name = "qssf"

    @staticmethod
    def pending_key(job):
        return (job.estimate * job.gpu_num, job.gpu_num, job.seq)

    def schedule(self, view):
        if len(view.new_jobs) == len(view.pending):
            order = sorted(view.new_jobs, key=lambda j: (j.gpu_num, j.seq))
            return greedy_in_order(view, order)
        return greedy_in_order(view, view.pending)


class _QuotaPreemptive(Policy):
    """Shared mechanics of SRTF and Tiresias: rank, fill the GPU quota, preempt the rest."""

    release_lag = 1
    tracks_progress = True

    def preemption_overhead(self, job):
        return artifact_preemption_overhead(job)

    def ranked(self, view: SchedulingView) -> list:
        raise NotImplementedError

    def schedule(self, view):
        quota = view.cluster.total_gpus
        to_start, to_stop = [], []
        for job in self.ranked(view):
            if job.gpu_num <= quota:
                quota -= job.gpu_num
                if job.status == "pending":
                    to_start.append(job)
            elif job.status == "running":
                to_stop.append(job)
        decisions = []
        cluster = view.cluster
        for job in to_stop:
            cluster.give_back(job)
            decisions.append(Preempt(job, reason="outside the GPU quota at its rank"))
        for job in to_start:
            layout = cluster.place(job.gpu_num)
            if layout is None:  # fits the quota but not consolidated placement: wait
                continue
            cluster.take(layout)
            decisions.append(Start(job, layout))
        return decisions


class SRTF(_QuotaPreemptive):
    """Shortest remaining time first, preemptive, oracle durations."""

    name = "srtf"

    def ranked(self, view):
        return sorted([*view.pending, *view.running], key=lambda j: j.remain)


class Tiresias(_QuotaPreemptive):
    """2D-LAS (Tiresias, NSDI'19): two queues split at `threshold` attained GPU-seconds, FIFO
    inside each, re-evaluated every `period` seconds."""

    name = "tiresias"

    def __init__(self, threshold: float = 18000, period: int = 60):
        self.threshold = threshold
        self.period = period

    def ranked(self, view):
        jobs = [*view.running, *view.pending]
        high = [j for j in jobs if j.attained <= self.threshold]
        low = [j for j in jobs if j.attained > self.threshold]
        high.sort(key=lambda j: j.submit_time)
        low.sort(key=lambda j: j.submit_time)
        return high + low

    def wakeup_after(self, view):
        """A running job crossing into the low queue can change the ranking."""
        soonest = None
        for job in view.running:
            if job.attained <= self.threshold:
                t = view.now + int((self.threshold - job.attained) // job.gpu_num) + 1
                if soonest is None or t < soonest:
                    soonest = t
        return soonest


BASELINES = {"fifo": FIFO, "sjf": SJF, "qssf": QSSF, "srtf": SRTF, "tiresias": Tiresias, "slurm": SlurmBackfill}
