"""The profiling partition: new jobs run briefly, least-GPUs-first, before the main cluster.

Jobs asking for at most `max_gpus` GPUs (Nprof) run on a small shared partition of `nodes`
nodes (Cprof) for at most `time_limit` seconds (Tprof). A job that ends inside Tprof (debug and
failed jobs, most of them) never reaches the main cluster; the rest are requeued there and start
over (no progress credited, as a Slurm requeue restarts an uncheckpointed job). While they run,
the live daemon samples their GPU metrics with NVML; in simulation the trace's workload columns
stand in for those samples.

Time-aware scaling: while more than `scale_up_queue` jobs wait, the partition borrows up to
`max_extra_nodes` nodes; it gives them back when fewer than `scale_down_queue` wait and the
demand forecast is low.

This is the profiler of Lucid's own engine (`lucid-standalone`, as the paper's artifact runs it).
lucidd profiles differently on a live cluster, and `lucid` replays that: a `profiling` partition
over every node, capped in GPUs rather than given nodes of its own, admission by
`orchestrator.live.plan_profiling` (still least-GPUs-first, with this module's `LeastGPUFirst`
key), requeue at Tprof by lucidd (orchestrator/slurm_mode.py, docs/simulator.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from lucidd.cluster import ClusterSpec, VCSpec, VirtualCluster
from lucidd.jobs import Job
from lucidd.policies.base import ClusterView, Policy, greedy_in_order
from lucidd.simulator import VCSimulation

PROFILING_VC = "profiling"


@dataclass(frozen=True)
class ProfilerConfig:
    time_limit: int = 200  # Tprof, seconds
    max_gpus: int = 8  # Nprof: larger jobs skip profiling
    nodes: int = 2  # Cprof: base size of the profiling partition
    gpus_per_node: int = 8
    scaling: bool = True
    max_extra_nodes: int = 1
    scale_up_queue: int = 10
    scale_down_queue: int = 5
    low_demand_arrivals: float = 40.0  # give nodes back only when the forecast is below this (jobs/10 min)


class LeastGPUFirst(Policy):
    """Strict least-GPUs-first order on the profiling partition (submission order on ties)."""

    name = "lgf-profiler"

    @staticmethod
    def pending_key(job):
        return (job.gpu_num, job.seq)

    def schedule(self, view):
        return greedy_in_order(view, view.pending)


@dataclass
class ProfileOutcome:
    job_id: object
    profiled: bool
    finished: bool  # ended inside Tprof: never reaches the main cluster
    start: int | None = None
    end: int | None = None  # when it left the profiler (finished or requeued)
    queue: int = 0


class _ScalingLGF(LeastGPUFirst):
    """LGF that first lets its partition grow or shrink (the partition's size is part of the
    backend's state; the engine owns it, this policy only asks at 10 s steps)."""

    def __init__(self, sim: "_ScalingProfiler"):
        self.sim = sim

    def schedule(self, view):
        self.sim._maybe_scale(view.now)
        view.cluster = ClusterView(view.cluster.name, view.cluster.gpus_per_node, self.sim.vc.free)
        return super().schedule(view)

    def wakeup_after(self, view):
        # While jobs wait (or a node is borrowed), look again at the next 10 s step.
        if len(self.sim.pending) > self.sim.cfg.scale_up_queue or self.sim.extra:
            return view.now + 10 - view.now % 10
        return None


class _ScalingProfiler(VCSimulation):
    """The profiling partition as a VC whose size follows its queue (checked every 10 s)."""

    def __init__(self, vc, jobs, cfg: ProfilerConfig, forecast=None):
        super().__init__(vc, jobs, LeastGPUFirst())
        if cfg.scaling:
            self.policy = _ScalingLGF(self)  # same queue order, so the sorted queue stays valid
        self.cfg = cfg
        self.forecast = forecast
        self.extra = 0
        self.node_seconds_borrowed = 0
        self._borrowed_since = None

    def run(self, on_progress=None):
        super().run(on_progress)
        if self._borrowed_since is not None:
            self.node_seconds_borrowed += (self.now - self._borrowed_since) * self.extra

    def _maybe_scale(self, now):
        cfg = self.cfg
        if now % 10 == 0 and len(self.pending) > cfg.scale_up_queue and self.extra < cfg.max_extra_nodes:
            self.vc.add_nodes(1)
            self.extra += 1
            self._borrowed_since = now if self._borrowed_since is None else self._borrowed_since
        elif (now % 100 == 0 and self.extra and len(self.pending) < cfg.scale_down_queue
              and (self.forecast is None or (self.forecast(now) or 0) <= cfg.low_demand_arrivals)):
            if self.vc.remove_idle_nodes(1):
                since = now if self._borrowed_since is None else self._borrowed_since
                self.node_seconds_borrowed += now - since
                self.extra -= 1
                self._borrowed_since = now if self.extra else None


def run_profiler(jobs: list[Job], cfg: ProfilerConfig, forecast=None) -> tuple[dict, dict]:
    """Replay the profiling stage. Returns ({job_id: ProfileOutcome}, stats)."""
    eligible = [j for j in jobs if j.gpu_num <= cfg.max_gpus]
    outcomes = {j.job_id: ProfileOutcome(j.job_id, profiled=False, finished=False) for j in jobs}
    stats = {"profiled": 0, "finished_in_profiler": 0, "borrowed_node_s": 0}
    if not eligible or cfg.nodes <= 0:
        return outcomes, stats
    # Profiling copies: they run for at most Tprof.
    copies = []
    for j in eligible:
        c = Job(j.job_id, PROFILING_VC, j.gpu_num, j.submit_time, min(j.duration, cfg.time_limit), j.seq)
        copies.append(c)
    copies.sort(key=lambda c: (c.submit_time, c.seq))
    vc = VirtualCluster(VCSpec(PROFILING_VC, cfg.nodes, cfg.gpus_per_node))
    sim = _ScalingProfiler(vc, copies, cfg, forecast)
    sim.run()
    by_id = {j.job_id: j for j in eligible}
    for c in copies:
        original = by_id[c.job_id]
        finished = original.duration <= cfg.time_limit
        outcomes[c.job_id] = ProfileOutcome(c.job_id, True, finished, c.start_time, c.end_time, c.queue)
        stats["profiled"] += 1
        stats["finished_in_profiler"] += int(finished)
    stats["borrowed_node_s"] = int(sim.node_seconds_borrowed)
    return outcomes, stats


def carve_profiling_nodes(spec: ClusterSpec, nodes: int, jobs=None) -> ClusterSpec:
    """Take the profiling partition's nodes from the VCs that miss them least, one node each:
    lowest offered load first (GPU-seconds per GPU), never a VC whose largest job would no longer
    fit. (The artifact took Venus' two nodes from two lightly loaded VCs.) Without jobs, the
    largest VCs give."""
    vcs = {k: VCSpec(v.name, v.nodes, v.gpus_per_node) for k, v in spec.vcs.items()}
    load, biggest = {}, {}
    if jobs is not None and len(jobs):
        demand = (jobs["gpu_num"] * jobs["duration"]).groupby(jobs["vc"]).sum()
        biggest = jobs.groupby("vc")["gpu_num"].max().to_dict()
        load = {k: float(demand.get(k, 0.0)) / v.gpus for k, v in vcs.items()}
    taken = 0
    while taken < nodes:
        donors = [v for v in vcs.values()
                  if (v.nodes - 1) * v.gpus_per_node >= biggest.get(v.name, 1) and v.nodes > 1]
        if not donors:
            raise ValueError(f"cannot take {nodes} profiling node(s) without leaving a VC too small for its jobs")
        donor = min(donors, key=lambda v: (load.get(v.name, 0.0) * v.nodes / max(v.nodes - 1, 1), -v.nodes, v.name))
        donor.nodes -= 1
        if donor.name in load:
            load[donor.name] = load[donor.name] * (donor.nodes + 1) / donor.nodes
        taken += 1
    return ClusterSpec(vcs, source=spec.source + f" minus {nodes} profiling node(s)")
