"""Lucid in the simulator: models + profiler + binder + orchestrator on a replayed trace.

Registers two families with lucidd.experiment so `lucidctl simulate --policies` knows them.

Lucid as lucidd runs it on Slurm (orchestrator/slurm_mode.py; what an admin gets):
  lucid             lucidd's profiling partition and SiteFactor order, Slurm's backfill starts jobs
  lucid-noprofiler  the same with `[profiler] enabled = false`
  lucid-oracle      true durations instead of estimates
  lucid-nopacking   `lucid` without GPU packing (the same run unless the replayed config turns packing on)
Lucid's own engine, as the paper's artifact runs it (never backfills, places jobs itself, packs,
dedicated Cprof profiling nodes):
  lucid-standalone             profiler, EBM duration estimates, packing
  lucid-standalone-noprofiler  no profiling partition (all nodes serve the main queue)
  lucid-standalone-nopacking   never shares GPUs
  lucid-standalone-oracle      true durations instead of estimates
Every model is trained only on data that precedes what it predicts (docs/lucid.md).
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pandas as pd

from binder.pairing import BinderConfig
from binder.speeds import PairSpeeds, estimated_pair_speed, time_sliced_pair_speed
from lucidd.experiment import POLICY_BUILDERS, Experiment
from lucidd.jobs import within_limit
from lucidd.simulator import SimHooks, SimulationResult, results_frame, simulate
from profiler.lgf import ProfilerConfig, carve_profiling_nodes, run_profiler

from .policy import LucidConfig, LucidPolicy

WORKLOAD_KEY = ["model", "dataset", "batchsize", "amp"]


def _option(exp: Experiment, name, default):
    v = exp.options.get(name)
    return default if v is None else v


def option_defaults(spec, variant: str = "lucid-standalone") -> dict:
    """The value each Lucid option (`lucidctl simulate` flag) takes when not given, from the
    components' own config defaults; the simulation runner and the tuner both read it.

    `variant`: the Lucid replayed. `lucid*` (as lucidd runs it on Slurm) orders jobs with lucidd's
    own `[ordering]` defaults, which differ from lucid-standalone's engine."""
    out = {"tprof": ProfilerConfig.time_limit, "nprof": ProfilerConfig.max_gpus,
           "cprof": default_profiler_nodes(spec), "gss": BinderConfig.gss,
           "starvation_s": LucidConfig.starvation_s, "aging_halflife_s": LucidConfig.aging_halflife_s}
    if not variant.startswith("lucid-standalone"):
        from lucidd.live.config import config_from_dict

        from .slurm_mode import options_from_config

        # every lucidd key a replay reads ([profiler], [ordering]), and profiling on
        out.update({k: v for k, v in options_from_config(config_from_dict({})).items() if k != "interval_s"})
    return out


# ----- model inputs, computed once per experiment and shared by the variants ----------------

def _with_prior(exp: Experiment) -> tuple[pd.DataFrame, int]:
    """The trace preceded by the jobs submitted before the window (models learn from both; the
    rolling refits still never train on a job that had not ended by the refit time), and the
    number of prior rows to drop from the result."""
    if exp.prior is None or not len(exp.prior):
        return exp.trace, 0
    cache = exp.options.setdefault("_cache", {})
    if "with_prior" not in cache:  # the duration and demand models both read it
        cols = [c for c in exp.trace.columns if c in exp.prior.columns]
        cache["with_prior"] = pd.concat([exp.prior[cols], exp.trace[cols]], ignore_index=True)
    return cache["with_prior"], len(exp.prior)


def duration_estimates(exp: Experiment) -> pd.Series:
    cache = exp.options.setdefault("_cache", {})
    if "estimates" not in cache:
        from models.duration import rolling_estimates

        both, skip = _with_prior(exp)
        frame, models = rolling_estimates(both, exp.origin, return_models=True)
        fit_s = frame.attrs.get("fit_seconds", 0)
        frame = frame.iloc[skip:].set_axis(exp.trace.index)
        cache["estimates"] = frame
        cache["duration_models"] = models  # {version: DurationModel}, kept for `lucidctl explain`
        srcs = frame["source"].astype(str)
        n_fb = int((~srcs.str.startswith("ebm")).sum())
        prior = f", trained with {skip:,} earlier jobs" if skip else ""
        exp.notes.append(f"duration model: {len(frame) - n_fb} EBM estimates, {n_fb} fallback "
                         f"(first week / new users){prior}, fit {fit_s:.1f}s")
    return cache["estimates"]["estimate"].astype(float)


def demand_forecast(exp: Experiment):
    """t -> forecast GPU-job arrivals per 10 min over the next hour, made without future data."""
    cache = exp.options.setdefault("_cache", {})
    if "forecast" not in cache:
        from models.throughput import bin_arrivals, rolling_forecasts

        bins = bin_arrivals(_with_prior(exp)[0], exp.origin)
        series = rolling_forecasts(bins)
        times = series.index.to_numpy(dtype=np.int64)
        values = series.to_numpy(dtype=float)
        bin_s = int(times[1] - times[0]) if len(times) > 1 else 600

        def forecast(t: int):
            k = int(np.searchsorted(times, t - bin_s + 1))  # the bin containing t
            k = min(max(k, 0), len(values) - 1)
            return float(values[k])

        cache["forecast"] = forecast
    return cache["forecast"]


def packing_classes(exp: Experiment) -> pd.Series:
    """Sharing score per trace row (NaN: unknown -> never packed)."""
    cache = exp.options.setdefault("_cache", {})
    if "classes" in cache:
        return cache["classes"]
    from models.packing import PackingModel, labels_from_colocation

    trace = exp.trace
    have = all(c in trace for c in ("gpu_util", "gmem_util", "gmem", "amp"))
    if not have:
        exp.notes.append("no workload columns (GPU util/memory): jobs get no packing class and are never packed")
        cache["classes"] = pd.Series(np.nan, index=trace.index)
        return cache["classes"]
    coloc, profiles = exp.options.get("colocation"), exp.options.get("profiles")
    profile_table = pd.read_csv(profiles) if profiles else None
    # Labels come from measured co-located speeds (thresholds 0.95/0.85, as the paper defines
    # them); a profile table's own `label` column is used only without measurements (on Venus the
    # artifact's published labels pack worse: avg JCT 15,981 s vs 15,243 s, docs/lucid.md).
    use_published = _option(exp, "labels", "measured") == "published" or not coloc
    if coloc and profile_table is not None and not use_published:
        labelled = labels_from_colocation(pd.read_csv(coloc), profile_table)
        labelled = labelled.dropna(subset=["label"])
        source = f"co-location measurements {os.path.basename(coloc)}"
    elif profile_table is not None and "label" in profile_table:
        labelled = profile_table.dropna(subset=["label"])
        source = f"labelled profiles {os.path.basename(profiles)}"
    else:
        labelled = synthetic_labels(trace)
        source = "utilisation-based interference estimate (no measurement table given)"
    usable = labelled.get("label", pd.Series(dtype=float)).notna() & \
        labelled.reindex(columns=["gpu_util", "gmem_util", "gmem", "amp"]).notna().all(axis=1)
    if not usable.any():
        exp.notes.append(f"packing model ({source}): no labelled workload with all of gpu_util, gmem_util, "
                         "gmem, amp: jobs get no packing class and are never packed")
        cache["classes"] = pd.Series(np.nan, index=trace.index)
        return cache["classes"]
    # One class only (a one-job trace, or every workload labelled alike): no tree to learn, every
    # job gets that class.
    model = PackingModel().fit(labelled, allow_constant=True)
    constant = (f"; {int(usable.sum())} labelled workload(s) are too few or too alike to learn a tree from, so "
                "every job gets the most common class") if model.evaluation_.get("constant") else ""
    cache["packing_model"] = model
    cache["packing_source"] = source
    feats = trace[["gpu_util", "gmem_util", "gmem", "amp"]].apply(pd.to_numeric, errors="coerce")
    classes = pd.Series(model.predict(feats).astype(float), index=trace.index)
    cache["classes"] = classes
    counts = classes.value_counts().to_dict()
    exp.notes.append(f"packing model ({source}): classes Tiny/Medium/Jumbo = "
                     f"{int(counts.get(0.0, 0))}/{int(counts.get(1.0, 0))}/{int(counts.get(2.0, 0))}{constant}")
    return classes


def synthetic_labels(trace: pd.DataFrame, thresholds=(0.95, 0.85)) -> pd.DataFrame:
    """Label each distinct workload of the trace by its mean estimated co-located speed."""
    w = trace.dropna(subset=["gpu_util"]).groupby(WORKLOAD_KEY, dropna=False)[["gpu_util", "gmem_util", "gmem"]] \
        .mean().reset_index()
    utils = w["gpu_util"].to_numpy(dtype=float)
    means = []
    for u in utils:
        means.append(float(np.mean([estimated_pair_speed(u, v)[0] for v in utils])))
    w["coloc_speed_mean"] = means
    w["label"] = np.where(w["coloc_speed_mean"] < thresholds[1], 2, np.where(w["coloc_speed_mean"] < thresholds[0], 1, 0))
    return w


# ----- the runner -----------------------------------------------------------------------------

def run_lucid(exp: Experiment, jobs, on_progress, variant: str) -> SimulationResult:
    """Lucid's own engine (`lucid-standalone*`): the paper artifact's scheduler."""
    trace = exp.trace
    use_profiler = not variant.endswith("-noprofiler")
    packing = not variant.endswith("-nopacking")
    oracle = variant.endswith("-oracle")

    est = trace["duration"].astype(float) if oracle else duration_estimates(exp)
    classes = packing_classes(exp) if packing else pd.Series(np.nan, index=trace.index)
    forecast = demand_forecast(exp)
    est_by_id = dict(zip(trace["job_id"], est))
    cls_by_id = dict(zip(trace["job_id"], classes))
    for j in jobs:
        j.estimate = within_limit(max(1.0, float(est_by_id[j.job_id])), j.time_limit)
        c = cls_by_id[j.job_id]
        j.share_score = None if c != c else int(c)
        j.attrs["share_score"] = j.share_score
        # every column on every replay, used or not, so jobs_<policy>.csv keeps one header
        j.attrs.update(decision=None, packed_with=None, profiler_start=None, profiler_end=None)

    spec = exp.spec
    defaults = option_defaults(spec)
    pcfg = ProfilerConfig(
        time_limit=int(_option(exp, "tprof", defaults["tprof"])),
        # capped at the profiling nodes' GPUs where nobody asked for more (lucidd/cli.py)
        max_gpus=min(int(_option(exp, "nprof", defaults["nprof"])),
                     int(_option(exp, "standalone_nprof_cap", 10 ** 9))),
        nodes=int(_option(exp, "cprof", defaults["cprof"])),
        gpus_per_node=next(iter(spec.vcs.values())).gpus_per_node,
        scaling=bool(_option(exp, "profiler_scaling", True)),
    )
    outcomes, pstats = ({}, {"profiled": 0, "finished_in_profiler": 0, "borrowed_node_s": 0})
    main_jobs = jobs
    if use_profiler and pcfg.nodes > 0:
        try:
            spec = carve_profiling_nodes(spec, pcfg.nodes, trace)
        except ValueError as exc:
            use_profiler = False
            exp.notes.append(f"{variant}: profiler off, {exc}")
    if use_profiler and pcfg.nodes > 0:
        outcomes, pstats = run_profiler(jobs, pcfg, forecast)
        main_jobs = []
        for j in jobs:
            o = outcomes[j.job_id]
            if o.profiled and o.finished:
                continue
            if o.profiled:  # requeued to the main cluster when its Tprof slice ended
                j.attrs["submitted"] = j.submit_time
                j.submit_time = o.end
            main_jobs.append(j)
    if on_progress and len(jobs) > len(main_jobs):
        on_progress(len(jobs) - len(main_jobs))

    gss = int(_option(exp, "gss", defaults["gss"]))
    config = LucidConfig(packing=packing and gss > 0, binder=replace(BinderConfig(), gss=max(gss, 0)),
                         starvation_s=int(_option(exp, "starvation_s", defaults["starvation_s"])),
                         aging_halflife_s=int(_option(exp, "aging_halflife_s", defaults["aging_halflife_s"])),
                         pack_first=bool(int(_option(exp, "pack_first", LucidConfig.pack_first))),
                         lazy_pack_first=bool(int(_option(exp, "lazy_pack_first", LucidConfig.lazy_pack_first))),
                         guard_one=bool(int(_option(exp, "guard_one", LucidConfig.guard_one))),
                         backfill_grace_s=int(_option(exp, "backfill_grace_s", LucidConfig.backfill_grace_s)))
    speeds = PairSpeeds.from_csv(exp.options["colocation"]) if exp.options.get("colocation") else PairSpeeds()

    def record(now, vc, decisions):
        for d in decisions:
            d.job.attrs["decision"] = d.reason
            partner = getattr(d, "partner", None)
            if partner is not None:
                d.job.attrs["packed_with"] = partner.job_id
                if partner.attrs.get("packed_with") is None:
                    partner.attrs["packed_with"] = d.job.job_id

    hooks = SimHooks(context=lambda t, vc: {"forecast": forecast(t)}, share_speeds=speeds, on_decisions=record)
    main = simulate(main_jobs, spec, lambda vc: LucidPolicy(config), hooks=hooks, on_progress=on_progress,
                    policy_name=variant) if main_jobs else None

    # Put every job back on its own clock: submitted once, waited in both queues.
    for j in jobs:
        o = outcomes.get(j.job_id)
        if o is None or not o.profiled:
            j.attrs["profiled"] = False
            j.attrs["profiler_finished"] = False
            continue
        j.attrs["profiled"] = True
        j.attrs["profiler_finished"] = o.finished
        j.attrs["profiler_start"] = o.start
        j.attrs["profiler_end"] = o.end
        if o.finished:
            j.start_time, j.end_time, j.queue = o.start, o.end, o.queue
            j.attrs["decision"] = f"finished inside the profiler's {pcfg.time_limit}s limit"
        else:
            j.submit_time = j.attrs.pop("submitted")
            j.queue += o.queue
    frame = results_frame(jobs)
    extra = {"summary": {"profiler_finished": pstats["finished_in_profiler"]}, "profiler": pstats,
             "pairs_measured": speeds.used_measured, "pairs_estimated": speeds.used_estimate}
    series = main.series if main is not None else pd.DataFrame(columns=["time", "busy_gpus", "queued_jobs"])
    # the profiling nodes' runs are GPU work too (their GPUs are in the total): without them a
    # run whose jobs all end in the profiler showed gpu_util 0
    runs = [(o.start, o.end, j.gpu_num) for j in jobs for o in [outcomes.get(j.job_id)]
            if o is not None and o.profiled and o.start is not None and o.end is not None and o.end > o.start]
    # Queued jobs from every wait, not the main cluster's queue alone: the timeline showed none for
    # a run whose summary had the longest queueing of all (waits for the profiling nodes, an admin
    # trial). A profiled job waits for the profiler, then (requeued) for the main cluster.
    waits = []
    for j in jobs:
        o = outcomes.get(j.job_id)
        if o is not None and o.profiled and o.start is not None:
            waits.append((j.submit_time, o.start))
            if not o.finished and o.end is not None and j.start_time is not None:
                waits.append((o.end, j.start_time))
        elif j.start_time is not None:
            waits.append((j.submit_time, j.start_time))
    return SimulationResult(variant, frame, with_queue(with_runs(series, runs), waits), exp.spec.total_gpus, extra)


def with_queue(series: pd.DataFrame, waits) -> pd.DataFrame:
    """`series` with its queued_jobs replaced by the number of jobs waiting, from waits [(from, to)]."""
    waits = [(a, b) for a, b in waits if b > a]
    deltas = pd.DataFrame([(a, 1) for a, _ in waits] + [(b, -1) for _, b in waits], columns=["time", "d"])
    queued = deltas.groupby("time")["d"].sum().cumsum() if len(deltas) else pd.Series(dtype="int64")
    times = sorted(set(series["time"]).union(queued.index))
    if not times:
        return series
    busy = series.drop_duplicates("time", keep="last").set_index("time")["busy_gpus"].reindex(times).ffill().fillna(0)
    q = queued.reindex(times).ffill().fillna(0)
    return pd.DataFrame({"time": times, "busy_gpus": busy.to_numpy().astype("int64"),
                         "queued_jobs": q.to_numpy().astype("int64")})


def with_runs(series: pd.DataFrame, runs) -> pd.DataFrame:
    """The busy-GPU step series plus runs [(start, end, gpus)] that it does not hold (queued_jobs as
    in `series`)."""
    if not runs:
        return series
    from lucidd.simulator import merge_series

    deltas = pd.DataFrame([(s, g) for s, _, g in runs] + [(e, -g) for _, e, g in runs], columns=["time", "d"])
    busy = deltas.groupby("time")["d"].sum().cumsum()
    runs_series = pd.DataFrame({"time": busy.index, "busy_gpus": busy.to_numpy(), "queued_jobs": 0})
    return merge_series([series, runs_series])


def default_profiler_nodes(spec) -> int:
    """About 1.5 % of the nodes (2 of Venus' 135, as the artifact used), at least one."""
    return max(1, round(spec.total_nodes * 0.015))


def run_lucid_on_slurm(exp: Experiment, jobs, on_progress, variant: str) -> SimulationResult:
    """Lucid as lucidd runs it (`lucid*`): orchestrator/slurm_mode.py."""
    from lucidd.policies.slurm_backfill import SlurmBackfill

    from .slurm_mode import LIVE_OPTIONS, LucidOnSlurm, live_config

    trace = exp.trace
    est = trace["duration"].astype(float) if variant.endswith("-oracle") else duration_estimates(exp)
    est_by_id = dict(zip(trace["job_id"], est))
    for j in jobs:
        j.estimate = within_limit(max(1.0, float(est_by_id[j.job_id])), j.time_limit)
    opts = {k: exp.options.get(k) for k in (*LIVE_OPTIONS, "cprof", "interval_s")}
    opts["profiling"] = not variant.endswith("-noprofiler") and bool(_option(exp, "profiling", True))
    # GPU packing as lucidd applies it, where the replayed config turns it on (not for -nopacking)
    opts["packing"] = None if variant.endswith("-nopacking") else exp.options.get("packing")
    live = live_config(opts)
    speeds = None
    if live.packing.enabled:
        # shards give no MPS: unmeasured pairs are time-sliced (binder/speeds.py)
        kw = {"estimate": time_sliced_pair_speed}
        speeds = (PairSpeeds.from_csv(exp.options["colocation"], **kw) if exp.options.get("colocation")
                  else PairSpeeds(**kw))
    options = exp.slurm_options()

    def make_slurm(priority):
        policy = SlurmBackfill.from_options(options)
        policy.pending_key = priority
        return policy

    offset = int(pd.Timestamp(exp.origin).timestamp()) if exp.origin is not None else 0
    sim = LucidOnSlurm(jobs, exp.spec, live, make_slurm, restart_s=int(_option(exp, "restart_s", 1)),
                       clock_offset=offset, prof_gate=None if exp.options.get("prof_gate") is None else int(exp.options["prof_gate"]),
                       share_speeds=speeds)
    stats = sim.run(on_progress)
    frame = results_frame(jobs)
    extra = {"summary": {"profiler_finished": stats.finished_in_profiler}, "profiler": stats.as_dict()}
    return SimulationResult(variant, frame, sim.series_frame(), exp.spec.total_gpus, extra)


for _name in ("lucid-standalone", "lucid-standalone-noprofiler", "lucid-standalone-nopacking",
              "lucid-standalone-oracle"):
    POLICY_BUILDERS[_name] = (lambda n: (lambda exp, jobs, on_progress: run_lucid(exp, jobs, on_progress, n)))(_name)
for _name in ("lucid", "lucid-noprofiler", "lucid-nopacking", "lucid-oracle"):
    POLICY_BUILDERS[_name] = (lambda n: (lambda exp, jobs, on_progress: run_lucid_on_slurm(exp, jobs, on_progress,
                                                                                          n)))(_name)
