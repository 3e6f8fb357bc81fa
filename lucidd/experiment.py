"""Glue for trace replays: trace + cluster + policies -> results on disk.

Used by `lucidctl simulate`, the benchmarks and the tests, so all three run the same path.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from .cluster import ClusterSpec, check_trace_fits, load_vc_config, scale_cluster, size_cluster_from_trace
from .errors import ConfigError
from .estimates import history_estimates, load_estimates
from .jobs import within_limit
from .metrics import SUMMARY_COLUMNS, summarize
from .policies.baselines import BASELINES
from .simulator import SimHooks, SimulationResult, jobs_from_frame, simulate

DEFAULT_POLICIES = ("fifo", "sjf", "qssf", "srtf", "tiresias", "slurm")

#: Extra policies registered by other components (the Lucid orchestrator adds lucid & ablations).
#: name -> callable(Experiment) returning (policy_factory, SimHooks | None, prepared jobs list)
POLICY_BUILDERS: dict[str, Callable] = {}


def known_policies() -> list[str]:
    _load_plugins()
    return [*BASELINES, *POLICY_BUILDERS]


def _load_plugins():
    try:  # the Lucid policy lives in its own component; the simulator works without it
        import orchestrator.simulation  # noqa: F401
    except ImportError:
        pass


@dataclass
class Experiment:
    """One trace on one cluster, ready to be replayed under several policies."""

    trace: pd.DataFrame
    spec: ClusterSpec
    path: str = "trace"
    origin: pd.Timestamp | None = None
    estimates: dict | None = None  # job_id -> seconds, from a file; otherwise history-based
    options: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)  # human-readable remarks to print (fallbacks used...)
    # Jobs submitted before the simulated window (same trace, same clock): models may learn from
    # them, nothing replays them. Empty when the whole trace is simulated.
    prior: pd.DataFrame | None = None
    _history: pd.Series | None = None

    def base_estimates(self) -> pd.Series:
        """Duration estimates for QSSF: the given file where it covers a job, else history-based."""
        if self._history is None:
            hist = history_estimates(self.trace)
            if self.estimates is not None:  # (an empty file too: its every job is missing, and said so)
                given = self.trace["job_id"].astype(str).map(self.estimates)
                missing = int(given.isna().sum())
                if missing:
                    self.notes.append(f"estimates file lacks {missing} job(s): history-based estimates used for them")
                hist = given.fillna(hist)
            self._history = hist.astype(float)
        return self._history

    def slurm_options(self) -> dict:
        """The options Slurm's engine is built from (`SlurmBackfill.from_options`): the experiment's,
        plus the smallest time limit a job of the trace brings itself (its time_limit column)."""
        opts = dict(self.options)
        if "time_limit" in self.trace and self.trace["time_limit"].notna().any():
            opts["min_time_limit_s"] = int(self.trace["time_limit"].min())
        return opts

    def run(self, policy: str, on_progress=None) -> SimulationResult:
        _load_plugins()
        jobs = jobs_from_frame(self.trace)
        if policy in BASELINES:
            if policy == "qssf":
                est = self.base_estimates()
                by_id = dict(zip(self.trace["job_id"], est))
                for j in jobs:
                    j.estimate = within_limit(by_id[j.job_id], j.time_limit)
            cls = BASELINES[policy]
            make = getattr(cls, "from_options", None)  # policies with options (slurm: --limit-rule)
            options = self.slurm_options()
            factory = (lambda vc: make(options)) if make else (lambda vc: cls())
            return simulate(jobs, self.spec, factory, on_progress=on_progress, policy_name=policy)
        if policy in POLICY_BUILDERS:
            return POLICY_BUILDERS[policy](self, jobs, on_progress)
        raise ConfigError(f"unknown policy '{policy}'; known: {', '.join(known_policies())}")

    def jittered(self, seed: int, jitter_s: int = 60) -> "Experiment":
        """The same experiment with every submission moved by a whole number of seconds drawn
        uniformly from [-jitter_s, +jitter_s] (reproducible by `seed`), for telling a policy's
        systematic effect from one replay's luck: without preemption a job placed a minute earlier
        changes which GPUs are free hours later. Jobs are re-sorted by their new submission time
        (their `seq` values are handed out again in that order); the models are fitted afresh on
        the moved trace (the copy shares no cache); the jobs before the window are not moved."""
        import numpy as np

        jobs = self.trace.copy()
        rng = np.random.default_rng(seed)
        moved = jobs["submit_time"].to_numpy() + rng.integers(-jitter_s, jitter_s + 1, len(jobs))
        jobs["submit_time"] = np.maximum(moved, 0)
        if "seq" in jobs:
            seqs = np.sort(jobs["seq"].to_numpy())
            jobs = jobs.sort_values(["submit_time", "seq"], kind="stable").reset_index(drop=True)
            jobs["seq"] = seqs
        else:
            jobs = jobs.sort_values("submit_time", kind="stable").reset_index(drop=True)
        options = {k: v for k, v in self.options.items() if k != "_cache"}
        return Experiment(trace=jobs, spec=self.spec, path=self.path, origin=self.origin, estimates=self.estimates,
                          options=options, prior=self.prior)


def make_experiment(loaded, vc_config=None, nodes=None, gpus_per_node=8, estimates_path=None,
                    prior=None, scale_nodes=None) -> Experiment:
    """Build the cluster for a loaded trace and check every job fits it.

    `prior`: a LoadedTrace (or frame) of the same trace before the window; only its jobs submitted
    before the window's first job are kept, as training history for the models.
    `scale_nodes`: multiply every VC's node count (cluster.scale_cluster), after the fit check."""
    jobs = loaded.jobs
    prior_jobs = None
    if prior is not None and len(jobs):
        frame = getattr(prior, "jobs", prior)
        prior_jobs = frame[frame["submit_time"] < jobs["submit_time"].min()]
        if nodes is not None:
            prior_jobs = prior_jobs.assign(vc="all")
    if vc_config:
        spec = load_vc_config(vc_config, gpus_per_node=gpus_per_node)
    else:
        spec = size_cluster_from_trace(jobs, gpus_per_node=gpus_per_node, nodes=nodes)
        if nodes is not None:
            jobs = jobs.assign(vc="all")
    check_trace_fits(jobs, spec, loaded.path)
    notes = list(spec.notes)
    if scale_nodes is not None:  # what-if sizing; a config too small for a job was reported just above
        scaled, raised = scale_cluster(spec, scale_nodes, jobs)
        notes.append(f"--scale-nodes {float(scale_nodes):g}: {spec.total_nodes} -> {scaled.total_nodes} nodes"
                     + (f" (raised to hold the VC's largest job: {', '.join(raised[:8])}"
                        f"{' ...' if len(raised) > 8 else ''})" if raised else ""))
        spec = scaled
    prior_dropped = {why: n for why, n in (getattr(prior, "dropped", None) or {}).items() if "window" not in why}
    if prior_dropped:  # the history's bad rows are skipped, as the window's are refused: said, not silent
        notes.append("the jobs before --start that train the models: dropped "
                     + ", ".join(f"{n} {why}" for why, n in sorted(prior_dropped.items()))
                     + " (rows that could not be read)")
    est = load_estimates(estimates_path) if estimates_path else None
    return Experiment(trace=jobs, spec=spec, path=loaded.path, origin=loaded.origin, estimates=est, notes=notes,
                      prior=prior_jobs if prior_jobs is not None and len(prior_jobs) else None)


def write_results(results: list[SimulationResult], out_dir, plots: bool = True, title: str | None = None) -> pd.DataFrame:
    """summary.csv, jobs_<policy>.csv and (with `plots`) the two PNGs, `title` (the trace and the
    cluster) in their titles."""
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    for r in results:
        row = summarize(r.policy, r.jobs, r.series, r.total_gpus)
        row.update(r.extra.get("summary", {}))
        rows.append(row)
        r.jobs.to_csv(os.path.join(out_dir, f"jobs_{r.policy}.csv"), index=False)
    summary = pd.DataFrame(rows)
    extra_cols = [c for c in summary.columns if c not in SUMMARY_COLUMNS]
    summary = summary[[c for c in SUMMARY_COLUMNS if c in summary.columns] + extra_cols]
    summary.to_csv(os.path.join(out_dir, "summary.csv"), index=False)
    if plots and results:
        from .plots import plot_jct_cdf, plot_timeline

        plot_jct_cdf(results, os.path.join(out_dir, "jct_cdf.png"), title=title)
        plot_timeline(results, os.path.join(out_dir, "timeline.png"), title=title)
    return summary


def progress_bar(total: int, desc: str, enabled: bool = True):
    """A tqdm bar on stderr (progress only; results go to stdout and files)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="job", file=sys.stderr, disable=not enabled, mininterval=0.3,
                leave=False, dynamic_ncols=True)
