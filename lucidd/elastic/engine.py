"""The slot engine of the elastic mode.

Time advances in slots of `slot_s` seconds (DL2: 20 minutes). At the start of each slot the
jobs that arrive in it join, and the policy, given a `SlotView` (plain data, the slot index as
the time), returns an `Allocation` per job: the nodes of its parameter servers and of its
workers. Every slot starts from an empty cluster, as in DL2's simulator (a job keeps no tasks
from one slot to the next unless the policy gives them again). The engine checks the allocation
against every node's CPU and GPU slots and the per-job task limit, then advances each job with at
least one PS and one worker by speed(PS, workers) x slot_s / epoch_size epochs; a job that reaches
its epoch count inside the slot ends at the exact fraction of the slot (DL2's FINE_GRAIN_JCT).

Results use the event-driven simulator's job state model and output: one `lucidd.jobs.Job` per
job (submit = arrival slot x slot_s, start = first slot with tasks, end, queue = seconds with no
tasks before the end, preemptions = times a job lost all its tasks), the same per-job columns and
summary.csv columns (docs/elastic.md lists the extra per-job columns).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import LucidError
from ..jobs import DONE, PENDING, RUNNING, Job
from ..simulator import SimulationResult, results_frame
from .data import SpeedTable
from .workload import ElasticJob


class ElasticError(LucidError):
    pass


@dataclass(frozen=True)
class ElasticCluster:
    """Identical nodes with `cpu_slots` and `gpu_slots` resource slots each (DL2: 8 and 8; a GPU is
    4 slots, so a node has 2 GPUs). `max_tasks` caps a job's PS and its workers (DL2's
    MAX_NUM_WORKERS, 16)."""

    nodes: int = 96
    cpu_slots: int = 8
    gpu_slots: int = 8
    gpu_slots_per_gpu: int = 4
    max_tasks: int = 16
    slot_s: float = 1200.0

    @property
    def capacity(self) -> tuple:
        return (self.cpu_slots, self.gpu_slots)

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpu_slots // self.gpu_slots_per_gpu

    def describe(self) -> str:
        return (f"{self.nodes} nodes x ({self.cpu_slots} CPU, {self.gpu_slots} GPU slots = "
                f"{self.gpu_slots // self.gpu_slots_per_gpu} GPUs), slot {self.slot_s:g} s, "
                f"at most {self.max_tasks} PS and {self.max_tasks} workers per job")


@dataclass(frozen=True)
class Allocation:
    """A job's tasks for one slot: the node index of each parameter server and of each worker."""

    ps_nodes: tuple = ()
    worker_nodes: tuple = ()

    @property
    def ps(self) -> int:
        return len(self.ps_nodes)

    @property
    def workers(self) -> int:
        return len(self.worker_nodes)


@dataclass
class JobView:
    """What a policy sees of one uncompleted job. `num_epochs` is the declared length (DL2's
    heuristics and its state use it); Optimus with online fitting does not read it, only the
    observations: `speeds` ((ps, workers, observed epochs/s) per slot run) and `losses`
    (epoch numbers and observed losses so far, when the policy asks for them)."""

    job_id: int
    jtype: int
    model: str
    arrival_slot: int
    num_epochs: float
    epoch_size: int
    worker_demand: tuple
    ps_demand: tuple
    batch_size: int
    progress: float  # epochs done
    ps: int  # tasks in the previous slot
    workers: int
    slots_run: int  # slots with at least one PS and one worker
    speeds: tuple = ()
    profile: tuple = ()  # (ps, workers, observed epochs/s) of the short pre-run at arrival (Optimus')
    loss_epochs: np.ndarray | None = None
    loss_values: np.ndarray | None = None

    @property
    def remaining_fraction(self) -> float:
        return 1.0 - self.progress / self.num_epochs


@dataclass
class SlotView:
    slot: int
    cluster: ElasticCluster
    jobs: list  # JobView, in arrival order (arrival slot, job id)
    new_jobs: tuple = ()  # ids of the jobs that arrived in this slot
    completed: int = 0  # jobs done so far
    total_jobs: int = 0


@dataclass
class Decision:
    """A policy's answer for one slot: allocations by job id, and optional plain-data notes."""

    allocations: dict
    info: dict | None = None


class ElasticPolicy:
    """Base class. `allocate(view)` returns a Decision (or a dict job_id -> Allocation); it must be
    a function of the view and the policy's fixed parameters (no clock, no I/O)."""

    name = "elastic"
    needs_losses = False  # the engine records per-epoch losses only for policies that read them

    def allocate(self, view: SlotView):
        raise NotImplementedError

    def describe(self) -> str:
        return self.name


class _State:
    __slots__ = ("spec", "job", "progress", "ps", "workers", "slots_run", "speeds", "loss_e", "loss_v", "rng", "profile",
                 "task_slots", "ps_sum", "w_sum", "gpu_slot_s", "peak_gpus")

    def __init__(self, spec: ElasticJob, job: Job, seed: int):
        self.spec = spec
        self.job = job
        self.progress = 0.0
        self.ps = 0
        self.workers = 0
        self.slots_run = 0
        self.speeds = []
        self.loss_e = []
        self.loss_v = []
        self.rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(spec.job_id), 11])
        self.ps_sum = 0.0
        self.w_sum = 0.0
        self.gpu_slot_s = 0.0
        self.peak_gpus = 0
        self.profile = None


@dataclass
class ElasticRun:
    """Slot-by-slot replay of one elastic trace under one policy (also driven step by step by the
    DL2 trainer)."""

    specs: list
    policy: ElasticPolicy
    cluster: ElasticCluster
    speeds: SpeedTable
    seed: int = 0
    speed_noise: float = 0.0  # relative s.d. of the observed speeds a policy sees (progress uses the true one)
    loss_noise: float = 0.05  # relative s.d. of the per-epoch loss a policy sees
    max_slots: int = 1000  # DL2's MAX_TS_LEN
    #: configurations of the short pre-run each job gets at arrival (Optimus profiles a new job on a
    #: few (PS, workers) pairs for some steps; the cost is not charged, as the Optimus paper finds it
    #: small). None: `profile_grid(cluster.max_tasks)`, 9 shapes spread over the range a policy may
    #: allocate (a pre-run on small shapes only left the fit to extrapolate: docs/elastic.md)
    profile_configs: tuple | None = None
    rigid_shapes: dict | None = None  # job id -> (ps, workers), for Job.gpu_num / duration columns
    series: list = field(default_factory=list)
    slot: int = 0

    def __post_init__(self):
        if self.profile_configs is None:
            self.profile_configs = profile_grid(self.cluster.max_tasks)
        specs = sorted(self.specs, key=lambda s: (s.arrival_slot, s.job_id))
        if len({s.job_id for s in specs}) != len(specs):
            raise ElasticError("job ids must be unique within a trace")
        self.specs = specs
        self.states = {}
        for seq, s in enumerate(specs):
            ps, w = (self.rigid_shapes or {}).get(s.job_id, (1, 1))
            rate = self.speeds.speed(s.model, ps, w) / s.epoch_size
            dur = int(np.ceil(s.num_epochs / rate)) if rate > 0 else 0
            job = Job(str(s.job_id), "all", w * s.worker_demand[1] // self.cluster.gpu_slots_per_gpu,
                      int(round(s.arrival_slot * self.cluster.slot_s)), dur, seq, name=s.model)
            job.attrs.update({"model": s.model, "job_type": s.jtype + 1, "epochs": s.num_epochs})
            self.states[s.job_id] = _State(s, job, self.seed)
        self._next = 0  # index of the next spec to arrive
        self.active: list[_State] = []
        self.done = 0
        self.decisions_info = []

    @property
    def finished(self) -> bool:
        return self.done == len(self.specs)

    def view(self) -> SlotView:
        # admit arrivals of this slot
        new = []
        while self._next < len(self.specs) and self.specs[self._next].arrival_slot <= self.slot:
            st = self.states[self.specs[self._next].job_id]
            s = st.spec
            st.profile = tuple((p, w, self._observe(st, self.speeds.speed(s.model, p, w) / s.epoch_size))
                               for p, w in self.profile_configs)
            self.active.append(st)
            new.append(st.spec.job_id)
            self._next += 1
        losses = self.policy.needs_losses
        jobs = []
        for st in self.active:
            s = st.spec
            jobs.append(JobView(
                s.job_id, s.jtype, s.model, s.arrival_slot, s.num_epochs, s.epoch_size, s.worker_demand, s.ps_demand,
                s.batch_size, st.progress, st.ps, st.workers, st.slots_run, tuple(st.speeds), st.profile,
                np.concatenate(st.loss_e) if losses and st.loss_e else (np.empty(0) if losses else None),
                np.concatenate(st.loss_v) if losses and st.loss_v else (np.empty(0) if losses else None)))
        return SlotView(self.slot, self.cluster, jobs, tuple(new), self.done, len(self.specs))

    def apply(self, allocations: dict) -> dict:
        """Check and run one slot with `allocations`; returns {job_id: epochs progressed} (DL2's
        per-job progress in the slot, from which its reward is made)."""
        c = self.cluster
        T = c.slot_s
        t0 = self.slot * T
        used = np.zeros((c.nodes, 2), dtype=np.int64)
        by_id = {st.spec.job_id: st for st in self.active}
        for jid, a in allocations.items():
            st = by_id.get(jid)
            if st is None:
                raise ElasticError(f"policy {self.policy.name}: slot {self.slot}: job {jid} is not waiting or running")
            if a.ps > c.max_tasks or a.workers > c.max_tasks:
                raise ElasticError(f"policy {self.policy.name}: slot {self.slot}: job {jid} gets {a.ps} PS and "
                                   f"{a.workers} workers (at most {c.max_tasks} each)")
            for nodes, dem in ((a.ps_nodes, st.spec.ps_demand), (a.worker_nodes, st.spec.worker_demand)):
                for n in nodes:
                    if not 0 <= n < c.nodes:
                        raise ElasticError(f"policy {self.policy.name}: job {jid} placed on node {n} of {c.nodes}")
                    used[n, 0] += dem[0]
                    used[n, 1] += dem[1]
        over = np.nonzero((used[:, 0] > c.cpu_slots) | (used[:, 1] > c.gpu_slots))[0]
        if len(over):
            raise ElasticError(f"policy {self.policy.name}: slot {self.slot}: node {int(over[0])} over capacity "
                               f"({int(used[over[0], 0])} CPU, {int(used[over[0], 1])} GPU slots)")
        progressed = {}
        finished = []
        queued = 0
        for st in self.active:
            a = allocations.get(st.spec.job_id)
            p, w = (a.ps, a.workers) if a is not None else (0, 0)
            job = st.job
            if p > 0 and w > 0:
                s = st.spec
                rate = self.speeds.speed(s.model, p, w) * T / s.epoch_size  # epochs in a whole slot
                if job.start_time is None:
                    job.start_time = int(round(t0))
                    job.status = RUNNING
                elif job.status == PENDING:
                    job.status = RUNNING
                before = st.progress
                frac = 1.0
                if before + rate > s.num_epochs:
                    frac = (s.num_epochs - before) / rate
                    gained = s.num_epochs - before
                    st.progress = float(s.num_epochs)
                else:
                    gained = rate
                    st.progress = before + rate
                progressed[s.job_id] = gained
                st.speeds.append((p, w, self._observe(st, rate / T)))
                if self.policy.needs_losses:
                    ks = np.arange(np.floor(before) + 1, np.floor(st.progress) + 1)
                    if len(ks):
                        vals = s.loss(ks) * (1.0 + self.loss_noise * st.rng.standard_normal(len(ks)))
                        st.loss_e.append(ks)
                        st.loss_v.append(vals)
                st.slots_run += 1
                st.ps_sum += p * frac
                st.w_sum += w * frac
                gpus = (w * s.worker_demand[1] + p * s.ps_demand[1]) / c.gpu_slots_per_gpu
                st.gpu_slot_s += gpus * frac * T
                st.peak_gpus = max(st.peak_gpus, int(gpus))
                if st.progress >= s.num_epochs:
                    job.end_time = round(t0 + frac * T, 3)
                    finished.append(st)
            else:
                if job.status == RUNNING:  # lost all its tasks (or kept a PS or worker alone)
                    job.preemptions += 1
                    job.status = PENDING
                job.queue += T
                queued += 1
            st.ps, st.workers = p, w
        busy = int(used[:, 1].sum()) / c.gpu_slots_per_gpu
        self.series.append((int(round(t0)), busy, queued))
        for st in finished:
            self._finish(st)
        self.slot += 1
        return progressed

    def _observe(self, st: _State, value: float) -> float:
        if self.speed_noise:
            return value * (1.0 + self.speed_noise * float(st.rng.standard_normal()))
        return value

    def _finish(self, st: _State) -> None:
        job = st.job
        job.status = DONE
        job.remain = 0.0
        n = max(st.slots_run, 1)
        job.attrs.update({"avg_ps": round(st.ps_sum / n, 3), "avg_workers": round(st.w_sum / n, 3),
                          "gpu_s": round(st.gpu_slot_s, 1), "peak_gpus": st.peak_gpus})
        self.active.remove(st)
        self.done += 1

    def step(self) -> SlotView:
        """One slot under `self.policy`; returns the view it decided on."""
        view = self.view()
        d = self.policy.allocate(view)
        allocations = d.allocations if isinstance(d, Decision) else d
        if isinstance(d, Decision) and d.info is not None:
            self.decisions_info.append((self.slot, d.info))
        self.apply(allocations)
        return view

    def run(self) -> "ElasticRun":
        while not self.finished:
            if self.slot >= self.max_slots:
                left = ", ".join(str(st.spec.job_id) for st in self.active[:5])
                raise ElasticError(f"policy {self.policy.name}: {len(self.specs) - self.done} job(s) unfinished after "
                                   f"{self.max_slots} slots (first: {left})")
            self.step()
        return self

    # ----- results ---------------------------------------------------------------------------
    def jobs(self) -> list[Job]:
        return [self.states[s.job_id].job for s in self.specs]

    def avg_jct_slots(self) -> float:
        js = self.jobs()
        return float(np.mean([(j.end_time - j.submit_time) / self.cluster.slot_s for j in js]))

    def result(self, name: str | None = None) -> SimulationResult:
        if not self.finished:
            raise ElasticError("the run has not finished")
        frame = results_frame(self.jobs())
        frame["job_id"] = frame["job_id"].astype(int)
        frame = frame.sort_values(["submit_time", "job_id"], kind="stable").reset_index(drop=True)
        series = pd.DataFrame(self.series, columns=["time", "busy_gpus", "queued_jobs"])
        return SimulationResult(name or self.policy.name, frame, series, self.cluster.total_gpus,
                                extra={"avg_jct_slots": self.avg_jct_slots()})


def profile_grid(max_tasks: int) -> tuple:
    """Optimus' pre-run shapes: PS and workers each at 1, ~1/4 and ~5/8 of the most tasks a job may
    have (1, 4, 10 for DL2's 16), all 9 pairs. Chosen among nine grids on the seed-2 traces (never
    the benchmark's), by the online speed fit's worst per-type error (docs/elastic.md)."""
    levels = {1, max(1, round(max_tasks / 4)), max(1, round(max_tasks * 10 / 16))}
    if len(levels) < 3:
        levels.add(max(1, max_tasks))  # tiny clusters: at least two levels where there is room
    levels = sorted(levels)
    return tuple((p, w) for p in levels for w in levels)


def simulate_elastic(specs: list, policy: ElasticPolicy, cluster: ElasticCluster, speeds: SpeedTable, **kw) -> ElasticRun:
    """Replay one trace under one policy to the end."""
    return ElasticRun(list(specs), policy, cluster, speeds, **kw).run()
