"""DL2's workload generator: 8 job types, Google-trace / Poisson / uniform arrivals, job lengths.

The generator makes the same random draws, in the same order, as DL2's `trace.py` does from
numpy's global generator, here from a `numpy.random.RandomState(seed)`:
per trace, the Poisson pattern (if any), an offset `randint(5)` into the arrival pattern, then per
job its type `randint(0, 8)`, its length draw `randint(90, 110)` (only when lengths vary) and one
`rand()` (DL2's epoch-estimate error, zero by default). With the same seed, `generate(...)` yields
DL2's traces job for job, so results can be compared trace by trace with DL2's own simulator.

Arrivals: the number of jobs arriving in slot t is min(peak, pattern[(t + offset) % len]), the
pattern being DL2's "Google_Trace" counts for that peak (from the Google cluster trace, 75 slots),
a Poisson(peak) draw per slot, or `peak` every slot. Lengths: job type k runs
int(fraction_k x max_epochs) epochs (DL2's FIX_JOB_LEN, the default), else that times
randint(90, 110) / 100. Each job also gets, from its own generator (seed, job id), a convergence
curve for Optimus (docs/elastic.md): loss(k) = 1 / (b0 k + b1) + b2, with its loss gap down to
`CONVERGENCE_GAP` of the initial gap exactly at its last epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .data import SpeedTable, WorkloadConstants

ARRIVAL_PATTERNS = ("google", "poisson", "uniform")
#: A job has converged when loss - b2 <= CONVERGENCE_GAP x (loss(0) - b2) (a user-set threshold
#: that Optimus knows; its remaining-epoch estimate solves the fitted curve for it).
CONVERGENCE_GAP = 0.02


@dataclass(frozen=True)
class ElasticJob:
    """One job of an elastic trace: what is known at submission (DL2's Job, without its state)."""

    job_id: int
    jtype: int  # 0-based index into DL2's 8 job types
    model: str
    arrival_slot: int
    num_epochs: float  # epochs to run (DL2's real_num_epochs; equal to the declared count)
    epoch_size: int  # a slot of T s advances the job by speed x T / epoch_size epochs
    worker_demand: tuple  # (cpu slots, gpu slots) of one worker
    ps_demand: tuple  # (cpu slots, gpu slots) of one parameter server
    batch_size: int  # total batch size of the measured points (Optimus' M)
    loss_curve: tuple  # (b0, b1, b2): loss(k) = 1/(b0 k + b1) + b2

    def loss(self, k):
        b0, b1, b2 = self.loss_curve
        return 1.0 / (b0 * np.asarray(k, float) + b1) + b2


@dataclass(frozen=True)
class WorkloadConfig:
    """DL2's trace parameters. Defaults: parameters.py without LARGE_SCALE (60 jobs, at most 3
    arrivals per slot, Google-trace arrivals, 30,000 max epochs, fixed job lengths)."""

    num_jobs: int = 60
    max_arrivals: int = 3
    arrivals: str = "google"
    max_epochs: int = 30000
    fixed_length: bool = True
    num_types: int = 8

    def check(self, consts: WorkloadConstants) -> None:
        if self.arrivals not in ARRIVAL_PATTERNS:
            raise ConfigError(f"arrival pattern '{self.arrivals}': must be one of {', '.join(ARRIVAL_PATTERNS)}")
        if self.arrivals == "google" and self.max_arrivals not in consts.google_arrivals:
            raise ConfigError(f"Google-trace arrivals exist for peaks {sorted(consts.google_arrivals)}, "
                              f"not {self.max_arrivals}")
        if self.num_jobs < 1 or self.max_arrivals < 1 or self.max_epochs < 1:
            raise ConfigError("jobs, arrivals per slot and max epochs must be at least 1")
        if not 1 <= self.num_types <= consts.num_types:
            raise ConfigError(f"job types: 1 to {consts.num_types}")


def _pattern(cfg: WorkloadConfig, consts: WorkloadConstants, rs: np.random.RandomState):
    if cfg.arrivals == "uniform":
        return [cfg.max_arrivals] * 100
    if cfg.arrivals == "poisson":
        return list(rs.poisson(cfg.max_arrivals, 100))
    return list(consts.google_arrivals[cfg.max_arrivals])


def _loss_curve(seed: int, trace_index: int, job_id: int, num_epochs: float) -> tuple:
    r = np.random.default_rng([int(seed) & 0xFFFFFFFF, trace_index, job_id, 7])
    b2 = float(r.uniform(0.05, 0.5))  # the loss floor
    b1 = 1.0 / float(r.uniform(1.0, 3.0))  # initial gap 1/b1 above the floor
    b0 = b1 * (1.0 / CONVERGENCE_GAP - 1.0) / max(float(num_epochs), 1.0)
    return (b0, b1, b2)


def generate(consts: WorkloadConstants, speeds: SpeedTable, cfg: WorkloadConfig = WorkloadConfig(),
             seed: int = 9973, n_traces: int = 1) -> list[list[ElasticJob]]:
    """`n_traces` traces drawn one after another from one generator seeded with `seed` (as DL2
    draws its training and validation sets). Job ids start at 1 in each trace."""
    cfg.check(consts)
    rs = np.random.RandomState(seed)
    fractions = np.array(consts.epoch_fractions, dtype=float) * cfg.max_epochs
    traces = []
    for t in range(n_traces):
        pattern = _pattern(cfg, consts, rs)
        offset = rs.randint(5)
        jobs: list[ElasticJob] = []
        for ts in range(len(pattern)):
            n = min(cfg.max_arrivals, int(pattern[(ts + offset) % len(pattern)]))
            for _ in range(n):
                jtype = int(rs.randint(0, cfg.num_types))
                if cfg.fixed_length:
                    epochs = float(int(fractions[jtype]))
                else:
                    epochs = int(fractions[jtype]) * rs.randint(90, 110) / 100.0
                rs.rand()  # DL2's epoch-estimate error draw (the error itself is 0)
                jid = len(jobs) + 1
                model = consts.models[jtype]
                jobs.append(ElasticJob(
                    job_id=jid, jtype=jtype, model=model, arrival_slot=ts, num_epochs=float(epochs),
                    epoch_size=consts.epoch_sizes[jtype], worker_demand=tuple(consts.worker_demand[jtype]),
                    ps_demand=tuple(consts.ps_demand[jtype]), batch_size=speeds.batch_size.get(model, 1),
                    loss_curve=_loss_curve(seed, t, jid, epochs)))
                if len(jobs) == cfg.num_jobs:
                    break
            if len(jobs) == cfg.num_jobs:
                break
        if len(jobs) < cfg.num_jobs:
            raise ConfigError(f"the arrival pattern ends after {len(jobs)} jobs; ask for at most that many")
        traces.append(jobs)
    return traces
