"""Elastic experiments: a DL2 workload on a cluster under named policies (CLI, bench and tests)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from . import data
from .engine import ElasticCluster, ElasticRun, simulate_elastic
from .policies import ELASTIC_BASELINES, OptimusOracle
from .workload import WorkloadConfig, generate

#: observation noise the benchmark and `lucidctl simulate --workload dl2` use (docs/elastic.md)
SPEED_NOISE = 0.02
LOSS_NOISE = 0.05


def elastic_policy_names() -> list[str]:
    from .rigid import EVENT_POLICIES

    return [*ELASTIC_BASELINES, "optimus-oracle", "optimus", "dl2", "rigid-fifo", *(f"event-{p}" for p in EVENT_POLICIES)]


@dataclass
class ElasticExperiment:
    """Traces of the dl2 workload on one elastic cluster."""

    traces: list
    cluster: ElasticCluster
    speeds: object
    consts: object
    workload: WorkloadConfig
    seed: int
    options: dict = field(default_factory=dict)

    @property
    def shapes(self) -> dict:
        """Rigid shape (bundles) per model (lucidd.elastic.rigid)."""
        from .rigid import rigid_shapes

        return rigid_shapes(self.speeds, self.consts.models, self.cluster.max_tasks)

    def make_policy(self, name: str):
        if name == "rigid-fifo":
            from .rigid import RigidFIFO

            return RigidFIFO(self.shapes)
        if name in ELASTIC_BASELINES:
            return ELASTIC_BASELINES[name]()
        if name == "optimus-oracle":
            return OptimusOracle(self.speeds, slot_s=self.cluster.slot_s)
        if name == "optimus":
            from .optimus import OptimusOnline

            prior = float(np.mean(self.consts.epoch_fractions[: self.workload.num_types])) * self.workload.max_epochs
            return OptimusOnline(slot_s=self.cluster.slot_s, prior_epochs=prior,
                                 placement=self.options.get("optimus_placement", "optimus"))
        if name == "dl2":
            from .dl2 import load_policy

            return load_policy(self.options.get("dl2_model"), self)
        raise ConfigError(f"unknown elastic policy '{name}'; known: {', '.join(elastic_policy_names())}")

    def run(self, name: str, trace_index: int = 0) -> ElasticRun:
        """One trace under an elastic (or rigid-fifo) policy on the slot engine."""
        trace = self.traces[trace_index]
        shapes = self.shapes
        return simulate_elastic(trace, self.make_policy(name), self.cluster, self.speeds,
                                seed=self.seed + trace_index, speed_noise=SPEED_NOISE, loss_noise=LOSS_NOISE,
                                rigid_shapes={s.job_id: (shapes[s.model],) * 2 for s in trace})

    def result(self, name: str, trace_index: int = 0):
        """A SimulationResult named `name`: `event-P` runs policy P of the event-driven simulator on
        the rigid shapes, anything else the slot engine."""
        if name.startswith("event-"):
            from .rigid import run_event_policies

            r = run_event_policies(self.traces[trace_index], self.shapes, self.speeds, self.cluster,
                                   policies=(name[len("event-"):],))
            res = next(iter(r.values()))
            res.policy = name
            return res
        return self.run(name, trace_index).result(name)

    def avg_jct_slots(self, name: str, trace_index: int = 0) -> float:
        if name.startswith("event-"):
            r = self.result(name, trace_index)
            return float(r.jobs["jct_s"].mean()) / self.cluster.slot_s
        return self.run(name, trace_index).avg_jct_slots()


def make_elastic_experiment(data_dir=None, nodes: int = 96, num_jobs: int = 60, max_arrivals: int = 3,
                            arrivals: str = "google", max_epochs: int = 30000, max_tasks: int = 16,
                            slot_s: float = 1200.0, seed: int = 9973, n_traces: int = 1, **options) -> ElasticExperiment:
    speeds, consts, _ = data.load(data_dir)
    wl = WorkloadConfig(num_jobs=num_jobs, max_arrivals=max_arrivals, arrivals=arrivals, max_epochs=max_epochs)
    if nodes < 1 or max_tasks < 1 or not slot_s > 0:
        raise ConfigError("nodes, max tasks and the slot length must be positive")
    cluster = ElasticCluster(nodes=nodes, max_tasks=max_tasks, slot_s=float(slot_s))
    traces = generate(consts, speeds, wl, seed=seed, n_traces=n_traces)
    return ElasticExperiment(traces, cluster, speeds, consts, wl, seed, dict(options))


def optimus_fit_errors(run: ElasticRun, speeds) -> dict:
    """Per job type: the speed model's one-slot-ahead error (|predicted - true| / true at the shape
    the job then ran, each slot) and the remaining-epochs estimate's error (|estimated - true| /
    true remaining), from the Decision.info an OptimusOnline run recorded. Shapes whose true speed
    is below 1 % of the type's best (DL2's failed measurements, interpolated as 0) are left out and
    counted."""
    spec = {s.job_id: s for s in run.specs}
    progress = defaultdict(float)
    sp_err, rem_err, skipped = defaultdict(list), defaultdict(list), defaultdict(int)
    best = {}
    for slot, info in run.decisions_info:
        for jid, (p, w, pred) in info.get("predicted", {}).items():
            s = spec[jid]
            if s.model not in best:
                best[s.model] = float(speeds.grid(s.model, run.cluster.max_tasks, run.cluster.max_tasks).max())
            true = speeds.speed(s.model, p, w)
            if true < 0.01 * best[s.model]:
                skipped[s.model] += 1
                continue
            sp_err[s.model].append(abs(pred - true / s.epoch_size) / (true / s.epoch_size))
    # remaining-epoch errors need the progress at decision time: recorded as (estimate, progress)
    for slot, info in run.decisions_info:
        for jid, (est, done) in info.get("remaining_at", {}).items():
            s = spec[jid]
            true_rem = s.num_epochs - done
            if true_rem > 0:
                rem_err[s.model].append(abs(est - true_rem) / true_rem)
    return {m: {"speed_mape": float(np.mean(v)), "speed_n": len(v), "skipped": skipped.get(m, 0),
                "remaining_mape": float(np.mean(rem_err[m])) if rem_err.get(m) else float("nan")}
            for m, v in sp_err.items()}
