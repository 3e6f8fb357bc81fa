"""The policy interface shared by the simulator and the live daemon.

A policy is a pure decision function: it receives a `SchedulingView` (plain jobs, a scratch copy
of per-node free GPUs, and the current time *as data*) and returns decisions. It never reads a
clock, never calls Slurm and never mutates the view's jobs; a backend applies the decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..cluster import place_consolidated
from ..jobs import Job


@dataclass(frozen=True)
class Start:
    """Run `job` exclusively on `layout` = ((node_index, n_gpus), ...)."""

    job: Job
    layout: tuple
    reason: str = ""


@dataclass(frozen=True)
class Share:
    """Run `job` on exactly the GPUs of the running job `partner` (lazy packing)."""

    job: Job
    partner: Job
    reason: str = ""


@dataclass(frozen=True)
class Preempt:
    """Stop running `job` and put it back in the queue (checkpoint/restart cost applies)."""

    job: Job
    reason: str = ""


class ClusterView:
    """What a policy may know about one VC's GPUs: free GPUs per node.

    `free` is a private copy: a policy plans sequential placements by calling `take` / `give`
    on it without touching the real cluster.
    """

    __slots__ = ("name", "gpus_per_node", "free", "total_gpus")

    def __init__(self, name, gpus_per_node, free):
        self.name = name
        self.gpus_per_node = gpus_per_node
        self.free = list(free)
        self.total_gpus = len(self.free) * gpus_per_node

    def place(self, gpu_num: int):
        """Consolidated placement for a job of `gpu_num` GPUs on the current free counts, or None."""
        return place_consolidated(self.free, gpu_num, self.gpus_per_node)

    def take(self, layout) -> None:
        for node, n in layout:
            self.free[node] -= n

    def give_back(self, job: Job) -> None:
        """Plan as if the running `job` had released its GPUs (for preemption planning)."""
        if job.partner is not None:
            return  # its GPUs stay busy with the partner
        for node, gpus in job.alloc:
            self.free[node] += len(gpus)


@dataclass
class SchedulingView:
    now: int
    pending: Sequence[Job]  # in the policy's queue order if it declares `pending_key`, else arrival order
    running: Sequence[Job]  # in start order
    cluster: ClusterView
    new_jobs: Sequence[Job] = ()  # submitted at `now`
    context: dict | None = None  # extra plain data a backend provides (e.g. demand forecast)


class Policy:
    """Base class. Subclasses set `name` and implement `schedule`.

    Attributes the engine reads:
      pending_key(job): static sort key for the pending queue (None: keep arrival order).
        Computed once when a job enters the queue, so it must only use what is known then.
      period: schedule only at multiples of this many seconds (None: at every event).
      release_lag: seconds between a job's work reaching zero and its GPUs being released.
        The artifact's per-second loop releases remaining-time-tracked jobs one tick late;
        policies that reproduce those runs (SRTF, Tiresias) set 1.
      preemption_overhead(job): seconds of extra work a preemption costs the job.
    """

    name = "policy"
    pending_key = None
    tracks_progress = False  # the engine refreshes remain/attained of running jobs before each decision
    period: int | None = None
    release_lag = 0

    def schedule(self, view: SchedulingView) -> list:
        raise NotImplementedError

    def wakeup_after(self, view: SchedulingView) -> int | None:
        """Earliest future time the policy wants to decide again even if nothing happens."""
        return None

    def preemption_overhead(self, job: Job) -> int:
        return 0

    def describe(self) -> str:
        return self.name


def greedy_in_order(view: SchedulingView, jobs, stop_at_first_miss: bool = True) -> list:
    """Start jobs in the given order while they fit (strict order: stop at the first that doesn't)."""
    out = []
    cluster = view.cluster
    for job in jobs:
        layout = cluster.place(job.gpu_num)
        if layout is None:
            if stop_at_first_miss:
                break
            continue
        cluster.take(layout)
        out.append(Start(job, layout))
    return out
