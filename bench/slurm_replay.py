"""Replay a trace window on a real Slurm cluster and compare what Slurm did with the simulator.

Each job of the window becomes a time-compressed sleep job (`sbatch --wrap 'sleep S'`), submitted
at its scaled submit time, with its modelled time limit scaled and rounded up to whole minutes
(Slurm's unit). After the last job ends the tool reads `sacct --json`, converts every time back
to trace seconds, runs the simulator on the same jobs and cluster (the `slurm` policy with the same
limits, bf_window and bf_max_job_test as the cluster's slurm.conf; fifo and qssf for reference)
and prints the two side by side: average JCT, average and p99 queueing delay, per-job start shift
and the share of jobs starting within one trace-hour of the prediction. docs/slurm-replay.md has
the tables, the commands and the slurm.conf they came from.

    .venv/bin/python bench/slurm_replay.py plan   WINDOW --nodes 4 --compression 120     # prediction only
    .venv/bin/python bench/slurm_replay.py run    WINDOW --nodes 4 --compression 120 --out DIR
    .venv/bin/python bench/slurm_replay.py report DIR            # the comparison again, from DIR's files

WINDOW is `--trace FILE [--vc VC] --start S (--end E | --jobs N) [--max-duration-h H]`; --start
and --end take trace seconds or dates (as `lucidctl simulate`). Slurm is reached through
SLURM_CONF and PATH (lucidd.backends.slurm.SlurmRunner). The partition (--partition, default
`main`) must start jobs without lucidd: scripts/testcluster.sh with LUCIDD_TC_LUA=0. With
`--live`, jobs are submitted through lucidd's inbox (lucidd running on the cluster) and the
comparison adds the simulator's `lucid` policy when it is installed.

Several VCs, each its own partition on its own nodes: `--vc A,B --nodes 2,2 --partition pa,pb`
(in that order; the partitions must not share a node). Each VC's jobs are submitted to its
partition, and the simulator replays the same VCs as partitions of those sizes, with lucidd's
profiling partition over all of them: where lucidd lends one partition's idle GPUs to another's
profiling runs (`[profiler] lend_idle_gpus`), the comparison checks it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lucidd.backends.slurm import SlurmRunner, json_int, json_time  # noqa: E402
from lucidd.cluster import ClusterSpec, VCSpec  # noqa: E402
from lucidd.policies.slurm_backfill import LimitRule, parse_limit_rule  # noqa: E402

GPUS_PER_NODE = 8
CPUS_PER_GPU = 4  # the test cluster's nodes: 32 CPUs, 8 GPUs
TRACE_HOUR = 3600
UNFINISHED = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "RESIZING"}


# ----- window --------------------------------------------------------------------------------------

@dataclasses.dataclass
class WindowSpec:
    trace: str
    vc: str | None = None
    start: str | None = None
    end: str | None = None
    jobs: int | None = None
    max_duration_h: float | None = None
    fmt: str | None = None


def parse_vcs(vc, nodes):
    """(--vc, --nodes) -> node count: an int for one partition (one VC, or all merged), or
    {vc: nodes} for several VCs, each its own partition ('A,B' with '2,2')."""
    names = [v.strip() for v in str(vc or "").split(",") if v.strip()]
    counts = [c.strip() for c in str(nodes).split(",") if c.strip()]
    try:
        counts = [int(c) for c in counts]
    except ValueError:
        raise SystemExit(f"--nodes {nodes!r}: whole node counts, one per VC ('2,2')") from None
    if not counts or any(c < 1 for c in counts):
        raise SystemExit(f"--nodes {nodes!r}: at least one node per partition")
    if len(names) <= 1:
        if len(counts) != 1:
            raise SystemExit(f"--nodes {nodes!r} names {len(counts)} partitions; --vc names {len(names) or 'no'} VC")
        return counts[0]
    if len(counts) != len(names):
        raise SystemExit(f"--vc names {len(names)} VCs, --nodes {len(counts)} node counts: one per VC")
    if len(set(names)) != len(names):
        raise SystemExit(f"--vc {vc!r} names a VC twice")
    return dict(zip(names, counts))


def nodes_text(nodes) -> str:
    if isinstance(nodes, dict):
        return " + ".join(f"{v}: {n}" for v, n in nodes.items()) + " nodes"
    return f"{nodes} nodes"


def select_window(frame: pd.DataFrame, nodes, *, vc=None, jobs=None, max_duration_s=None,
                  gpus_per_node: int = GPUS_PER_NODE) -> tuple[pd.DataFrame, list]:
    """The jobs to replay from a loaded (and start/end-windowed) canonical trace frame.

    Keeps one VC (or all), the first `jobs` by submission, drops jobs larger than the cluster,
    rounds multi-node requests up to whole nodes (`-N k --gres=gpu:8` is what Slurm can be asked
    for), caps durations at `max_duration_s`. Returns the frame (vc 'all', seq 0..n-1, in
    submission order) and notes saying what was changed. With `nodes` a {vc: nodes} dict (several
    VCs, each its own partition) it keeps those VCs, each job sized against its own VC, and the vc
    column keeps their names."""
    notes = []
    w = frame.sort_values(["submit_time", "seq"], kind="stable")
    several = isinstance(nodes, dict)
    if several:
        missing = [v for v in nodes if not (w["vc"] == v).any()]
        if missing:
            raise SystemExit(f"no job of VC {missing[0]!r} in the window")
        w = w[w["vc"].isin(list(nodes))]
    elif vc not in (None, "", "all"):
        w = w[w["vc"] == vc]
        if w.empty:
            raise SystemExit(f"no job of VC {vc!r} in the window")
    if jobs is not None:
        w = w.head(int(jobs))
    w = w.copy()
    cap = w["vc"].map(nodes).fillna(0).astype(int) * gpus_per_node if several else nodes * gpus_per_node
    big = w["gpu_num"] > cap
    if big.any():
        what = "its partition's" if several else f"the cluster's {cap}"
        notes.append(f"{int(big.sum())} job(s) asking for more than {what} GPUs dropped")
        w = w[~big].copy()
    odd = (w["gpu_num"] > gpus_per_node) & (w["gpu_num"] % gpus_per_node != 0)
    if odd.any():
        notes.append(f"{int(odd.sum())} multi-node job(s) rounded up to whole nodes of {gpus_per_node} GPUs")
        w.loc[odd, "gpu_num"] = -(-w.loc[odd, "gpu_num"] // gpus_per_node) * gpus_per_node
    if max_duration_s is not None:
        long = w["duration"] > max_duration_s
        if long.any():
            notes.append(f"{int(long.sum())} duration(s) capped at {max_duration_s / 3600:g} h")
            w.loc[long, "duration"] = int(max_duration_s)
    if w.empty:
        raise SystemExit("the window holds no job")
    if not several:
        w["vc"] = "all"
    w["seq"] = np.arange(len(w), dtype=np.int64)
    return w.reset_index(drop=True), notes


def load_window(spec: WindowSpec, nodes) -> tuple[pd.DataFrame, list]:
    from lucidd.traces import load_trace

    loaded = load_trace(spec.trace, spec.fmt, start=spec.start, end=spec.end)
    # Limits come from --limit-rule on both sides (the sbatch -t and the prediction): a trace's own
    # time_limit column (import-sacct) is set aside here, and `build` gives each job the limit it is
    # submitted with, so the two cannot differ by Slurm's minute rounding.
    loaded.jobs = loaded.jobs.drop(columns="time_limit", errors="ignore")
    max_s = None if spec.max_duration_h is None else int(round(spec.max_duration_h * 3600))
    return select_window(loaded.jobs, nodes, vc=spec.vc, jobs=spec.jobs, max_duration_s=max_s)


# ----- scaling ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ScaledLimitRule(LimitRule):
    """A base LimitRule as the replay asks Slurm for it: the limit divided by the compression,
    rounded up to whole minutes (Slurm's unit), and scaled back to trace seconds."""

    base: LimitRule = dataclasses.field(default_factory=LimitRule)
    compression: float = 1.0

    def minutes(self, duration) -> int:
        return minutes_limit(self.base.limit(duration), self.compression)

    def limit(self, duration) -> int:
        lim = int(round(self.minutes(duration) * 60 * self.compression))
        assert lim >= duration, f"scaled limit {lim} s below the duration {duration} s"
        return lim

    @property
    def min_limit(self) -> int:
        return int(round(minutes_limit(self.base.min_limit, self.compression) * 60 * self.compression))

    def describe(self) -> str:
        return f"{self.base.describe()} h, / {self.compression:g} rounded up to whole minutes"


@dataclasses.dataclass(frozen=True)
class OffsetLimitRule(LimitRule):
    """For the robustness check: every job runs `offset` seconds longer than its trace duration
    (the replay's dead time) while keeping the limit its trace duration gives."""

    base: LimitRule = dataclasses.field(default_factory=LimitRule)
    offset: int = 0

    def limit(self, duration) -> int:
        return max(self.base.limit(max(duration - self.offset, 0)), int(math.ceil(duration)))

    @property
    def min_limit(self) -> int:
        return self.base.min_limit


def minutes_limit(limit_s, compression: float) -> int:
    """Slurm's `-t` in minutes for a trace-time limit: limit / compression, rounded up, at least 1."""
    return max(1, int(math.ceil(limit_s / compression / 60 - 1e-9)))


def plan_jobs(window: pd.DataFrame, compression: float, rule: LimitRule, sleep_trim_s: float = 0.0) -> pd.DataFrame:
    """Per job: real offset from the replay's start (s), sleep (s), Slurm limit (min), nodes.

    A sleep is kept half a second short of its limit so Slurm never times it out."""
    t0 = int(window["submit_time"].min())
    out = pd.DataFrame({
        "seq": window["seq"].to_numpy(),
        "job_id": window["job_id"].astype(str).to_numpy(),
        "gpu_num": window["gpu_num"].to_numpy(),
        "submit_time": window["submit_time"].to_numpy(),
        "duration": window["duration"].to_numpy(),
        "vc": window["vc"].astype(str).to_numpy(),
    })
    out["offset_s"] = (out["submit_time"] - t0) / compression
    out["limit_min"] = [minutes_limit(rule.limit(d), compression) for d in out["duration"]]
    sleep = out["duration"] / compression - sleep_trim_s
    out["sleep_s"] = np.minimum(np.maximum(sleep, 0.0), out["limit_min"] * 60 - 0.5).round(3)
    out["nodes"] = np.maximum(1, -(-out["gpu_num"] // GPUS_PER_NODE))
    return out


def live_tprofs(cfg) -> tuple:
    """The Tprofs (real seconds) a live lucidd with this config requeues runs at: `tprof_s`, and
    `long_tprof_s` for lent runs and the oldest long ones."""
    return cfg.profiler.tprof_s, cfg.profiler.long_tprof_s


def keep_off_tprof(window: pd.DataFrame, tprofs_real_s, compression: float, margin_s: float) -> tuple[pd.DataFrame, int]:
    """The window with every duration that ends within `margin_s` real seconds of one of a live
    lucidd's Tprofs (`tprofs_real_s`) moved to `margin_s` from it, on the side it was on; and how
    many moved.

    Why: at Tprof lucidd requeues a run it sees still running, so a job shorter than Tprof ends in
    profiling and a longer one is requeued. Compressed C times, the margin between a job's end and
    Tprof shrinks C times, below what Slurm's whole-second clock and lucidd's once-an-interval
    reconcile resolve: live run 6 (60x) requeued four jobs that ended 0.02-0.1 real s before Tprof,
    which uncompressed would have ended 1-6 s before a 600 s Tprof (docs/lucid.md). The simulator
    replays the moved durations too, so both sides run the same jobs."""
    tprofs = sorted({float(t) * compression for t in tprofs_real_s if t})
    band = float(margin_s) * compression
    if not tprofs or band <= 0:
        return window, 0
    out = window.copy()
    d = out["duration"].to_numpy(dtype=float, copy=True)
    before = d.copy()
    for t in tprofs:
        below = (d > t - band) & (d < t)
        above = (d >= t) & (d < t + band)
        d[below] = max(t - band, 0.0)  # a Tprof under the margin: such jobs end at once
        d[above] = t + band
    moved = int((d != before).sum())
    out["duration"] = np.round(d).astype(out["duration"].dtype) if moved else out["duration"]
    return out, moved


def sbatch_argv(row, partition: str | None, name_prefix: str = "replay", comment: str | None = None) -> list:
    """The sbatch command line of one planned job (one node: --gres=gpu:N; more: -N k, 8 GPUs each).
    CPUs follow the GPUs (4 per GPU, the node's ratio), so Slurm's CPU-based node choice tracks GPUs."""
    g = int(row["gpu_num"])
    argv = ["sbatch", "--parsable", "-J", f"{name_prefix}-{int(row['seq'])}", "-o", "/dev/null",
            "-t", str(int(row["limit_min"]))]
    if partition:
        argv += ["-p", partition]
    if comment:
        argv += [f"--comment={comment}"]
    if g <= GPUS_PER_NODE:
        argv += [f"--gres=gpu:{g}", "-c", str(CPUS_PER_GPU * g)]
    else:
        argv += ["-N", str(int(row["nodes"])), "--ntasks-per-node=1", "-c", str(CPUS_PER_GPU * GPUS_PER_NODE),
                 f"--gres=gpu:{GPUS_PER_NODE}"]
    argv += ["--wrap", f"sleep {float(row['sleep_s']):.3f}"]
    return argv


# ----- the cluster -----------------------------------------------------------------------------------

def sched_params(text: str) -> dict:
    """SchedulerParameters 'bf_interval=1,bf_window=6,...' -> {'bf_interval': '1', ...}."""
    out = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part or part == "(null)":
            continue
        k, _, v = part.partition("=")
        out[k.strip()] = v.strip()
    return out


def model_options(params: dict, compression: float, rule: LimitRule) -> dict:
    """The slurm policy's options for a cluster with these SchedulerParameters at this compression."""
    bf_window_min = int(params.get("bf_window", 1440))
    return {"limit_rule": rule, "bf_window_s": int(bf_window_min * 60 * compression),
            "bf_max_job_test": int(params.get("bf_max_job_test", 500))}


def read_cluster(runner: SlurmRunner, partition: str) -> dict:
    conf = {}
    for line in runner.run(["scontrol", "show", "config"]).splitlines():
        k, sep, v = line.partition("=")
        if sep:
            conf[k.strip()] = v.strip()
    out = runner.run(["sinfo", "-h", "-p", partition, "-o", "%D %G %c"]).split()
    if len(out) < 3:
        raise SystemExit(f"partition {partition!r}: sinfo shows no nodes")
    nodes, gres = int(out[0]), out[1]
    keys = ("SLURM_VERSION", "SchedulerType", "SchedulerParameters", "SelectType", "SelectTypeParameters",
            "PriorityType", "PriorityWeightAge", "PriorityMaxAge", "PriorityCalcPeriod", "Epilog", "SLURM_CONF")
    return {"nodes": nodes, "gres": gres, "cpus_per_node": int(out[2]),
            "config": {k: conf.get(k) for k in keys}}


def check_idle(runner: SlurmRunner) -> None:
    busy = runner.run(["squeue", "-h", "-t", "PD,R,CG,CF", "-o", "%i"]).split()
    if busy:
        raise SystemExit(f"the cluster is not idle ({len(busy)} job(s) queued or running): a replay needs it alone")


def submit_all(runner: SlurmRunner, plan: pd.DataFrame, partition, comment=None, lead_s: float = 3.0,
               log=print) -> tuple[float, pd.DataFrame]:
    """Submit every planned job at T0 + offset (T0: a whole second, `lead_s` ahead); `partition`
    is one name, or {vc: partition} for a window of several VCs. Returns T0 and the plan with
    slurm_id, the wall time sbatch was called and its lag behind the target."""
    t0 = math.ceil(time.time()) + lead_s
    ids, called, lag = [], [], []
    n = len(plan)
    next_note = time.time() + 30
    for i, row in enumerate(plan.to_dict("records")):
        target = t0 + row["offset_s"]
        wait = target - time.time()
        if wait > 0:
            time.sleep(wait)
        now = time.time()
        part = partition[row["vc"]] if isinstance(partition, dict) else partition
        out = runner.run(sbatch_argv(row, part, comment=comment))
        ids.append(int(out.strip().split(";")[0]))
        called.append(now)
        lag.append(now - target)
        if time.time() > next_note:
            log(f"  submitted {i + 1}/{n} (replay time {now - t0:,.0f} s)")
            next_note = time.time() + 30
    plan = plan.copy()
    plan["slurm_id"] = ids
    plan["called_at"] = called
    plan["submit_lag_s"] = np.round(lag, 3)
    return t0, plan


def wait_done(runner: SlurmRunner, ids, timeout_s: float, log=print) -> None:
    mine = set(int(i) for i in ids)
    end = time.time() + timeout_s
    next_note = time.time() + 30
    while True:
        lines = runner.run(["squeue", "-h", "-t", "PD,R,CG,CF,S", "-o", "%i %t"]).split("\n")
        left = {}
        for line in lines:
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit() and int(parts[0]) in mine:
                left[int(parts[0])] = parts[1]
        if not left:
            return
        if time.time() > end:
            runner.run(["scancel", *map(str, left)])
            raise SystemExit(f"timed out after {timeout_s:.0f} s with {len(left)} job(s) left (cancelled)")
        if time.time() > next_note:
            states = pd.Series(list(left.values())).value_counts().to_dict()
            log(f"  waiting: {len(left)} job(s) left {states}")
            next_note = time.time() + 30
        time.sleep(1.0)


def read_sacct(runner: SlurmRunner, ids, since: float, settle_s: float = 60.0) -> dict:
    """`sacct --json --duplicates` for these job ids, once slurmdbd has every one of them ended."""
    ids = [str(i) for i in ids]
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))
    end = time.time() + settle_s
    while True:
        jobs = []
        for k in range(0, len(ids), 400):
            data = runner.run_json(["sacct", "--json", "--duplicates", "--allusers", "-S", start,
                                    "-j", ",".join(ids[k:k + 400])])
            jobs += data.get("jobs", [])
        runs = sacct_runs({"jobs": jobs}, since)
        settled = all(int(i) in runs and runs[int(i)]["state"] not in UNFINISHED and runs[int(i)]["end"]
                      for i in ids)
        if settled or time.time() > end:
            return {"jobs": jobs}
        time.sleep(1.0)


# ----- results ---------------------------------------------------------------------------------------

def sacct_runs(data: dict, since: float | None = None) -> dict:
    """slurm id -> {submit, start, end, state, runs, partition, nodes, flags} over all runs of the job
    (lucidd's profiling requeues a job once: submit of the first run, start of the first run that
    started, end and state of the last). Records submitted before `since` are an earlier job with
    the same id (a restarted controller reuses ids; slurmdbd keeps them all) and are skipped."""
    by_id = {}
    for rec in data.get("jobs", []):
        jid = json_int(rec.get("job_id"))
        if jid is None:
            continue
        t = rec.get("time") or {}
        if since is not None and (json_time(t.get("submission")) or 0) < since:
            continue
        state = rec.get("state") or {}
        by_id.setdefault(jid, []).append({
            "submit": json_time(t.get("submission")), "start": json_time(t.get("start")),
            "end": json_time(t.get("end")),
            "state": (state.get("current") if isinstance(state, dict) else str(state)) or "",
            "partition": rec.get("partition") or "", "nodes": rec.get("nodes") or "",
            "flags": ",".join(f for f in (rec.get("flags") or []) if f.startswith("STARTED_ON")),
        })
    out = {}
    for jid, runs in by_id.items():
        runs.sort(key=lambda r: (r["start"] or math.inf, r["submit"] or 0))
        started = [r for r in runs if r["start"]]
        last = runs[-1]
        earlier = sum((r["end"] or 0) - r["start"] for r in started[:-1] if r["end"])
        out[jid] = {
            "submit": min(r["submit"] for r in runs if r["submit"]) if any(r["submit"] for r in runs) else None,
            "earlier_runs_s": earlier,
            "start": started[0]["start"] if started else None,
            "last_start": started[-1]["start"] if started else None,
            "end": last["end"], "state": last["state"], "runs": len(runs),
            "partition": last["partition"], "nodes": last["nodes"], "flags": last["flags"],
            "first_partition": started[0]["partition"] if started else "",
            "first_nodes": started[0]["nodes"] if started else "",
        }
    return out


def real_results(plan: pd.DataFrame, data: dict, compression: float, since: float | None = None) -> pd.DataFrame:
    """What Slurm did, in trace seconds: queue and JCT measured from Slurm's own submit time and
    scaled by the compression; start = the trace submit time + that queue. `since`: the replay's
    first second (records of earlier jobs with the same ids are ignored)."""
    runs = sacct_runs(data, since)
    rows = []
    for row in plan.to_dict("records"):
        r = runs.get(int(row["slurm_id"]))
        if r is None or not r["start"] or not r["end"] or not r["submit"]:
            raise SystemExit(f"sacct has no finished record of job {row['slurm_id']} (trace job {row['job_id']})")
        # a job lucidd profiled and requeued: its start is its last run's, its queue excludes the
        # profiling run (as the simulator's lucid counts them)
        queue = (r["last_start"] - r["submit"] - r["earlier_runs_s"]) * compression
        jct = (r["end"] - r["submit"]) * compression
        rows.append({
            "seq": row["seq"], "job_id": row["job_id"], "slurm_id": row["slurm_id"], "gpu_num": row["gpu_num"],
            "submit_time": row["submit_time"], "duration": row["duration"],
            "real_queue_s": queue, "real_jct_s": jct,
            "real_start": row["submit_time"] + (r["last_start"] - r["submit"]) * compression,
            "real_run_s": (r["end"] - r["last_start"]) * compression, "state": r["state"], "runs": r["runs"],
            "nodes": r["nodes"], "started_on": r["flags"].replace("STARTED_ON_", "").lower(),
            "first_partition": r["first_partition"], "first_nodes": r["first_nodes"],
            "submit_lag_s": row.get("submit_lag_s"),
        })
    return pd.DataFrame(rows)


def cluster_spec(nodes) -> ClusterSpec:
    """One VC 'all' of `nodes` x 8 GPUs, or one VC per entry of a {vc: nodes} dict (each a
    partition of its own nodes; the simulator's lucid puts its profiling partition over all)."""
    parts = nodes if isinstance(nodes, dict) else {"all": int(nodes)}
    return ClusterSpec(vcs={v: VCSpec(v, int(n), GPUS_PER_NODE) for v, n in parts.items()}, source=nodes_text(nodes))


def simulate(window: pd.DataFrame, nodes, policies, options: dict) -> dict:
    """policy -> per-job results frame, on one VC of `nodes` x 8 GPUs (or the VCs of a
    {vc: nodes} dict)."""
    from lucidd.experiment import Experiment, known_policies

    spec = cluster_spec(nodes)
    exp = Experiment(trace=window.copy(), spec=spec, path="replay window", options=dict(options))
    known = known_policies()
    out = {}
    for p in policies:
        if p not in known:
            print(f"(policy {p} is not installed here: skipped)")
            continue
        out[p] = exp.run(p).jobs
    return out


def robustness(window: pd.DataFrame, nodes: int, options: dict, compression: float,
               dead_s=(0.1, 0.25, 0.5), tick: bool = True) -> list:
    """How far the slurm prediction moves under what the replay itself does to the jobs' timing,
    as (what, avg JCT change %, share of jobs starting within 1 trace-hour of the unperturbed
    prediction):

    * every job holds its GPUs `dead_s` real seconds longer than its duration (launching it,
      noticing its end and starting the next cost a replay that much; limits unchanged);
    * `tick`: Slurm's clock counts whole seconds (one real second is `compression` trace seconds)
      and its backfill runs once per real second: submits rounded down to whole real seconds and
      decisions taken only at them.

    A window whose prediction moves by more than the tolerance under these cannot be reproduced
    within it at this compression, whatever the model: near-ties (two jobs whose limits end less
    than a real second apart) go either way."""
    from lucidd.policies.slurm_backfill import SlurmBackfill

    base = simulate(window, nodes, ["slurm"], options)["slurm"].set_index("job_id")

    def moved(r):
        r = r.set_index("job_id").loc[base.index]
        shift = (r["start_time"] - base["start_time"]).abs()
        return 100.0 * (r["jct_s"].mean() / base["jct_s"].mean() - 1), 100.0 * float((shift <= TRACE_HOUR).mean())

    out = []
    for d in dead_s:
        off = int(round(d * compression))
        w = window.copy()
        w["duration"] = w["duration"] + off
        opts = dict(options, limit_rule=OffsetLimitRule(base=options["limit_rule"], offset=off))
        out.append((f"each job {d:g} s real ({off:,} trace s) longer", *moved(simulate(w, nodes, ["slurm"], opts)["slurm"])))
    if tick:
        t0 = int(window["submit_time"].min())
        c = int(round(compression))
        w = window.copy()
        w["submit_time"] = t0 + (w["submit_time"] - t0) // c * c
        before = SlurmBackfill.period
        SlurmBackfill.period = c
        try:
            r = simulate(w, nodes, ["slurm"], options)["slurm"]
        finally:
            SlurmBackfill.period = before
        out.append((f"decisions at whole real seconds ({c} trace s)", *moved(r)))
    return out


def lucid_options(config_path: str, compression: float) -> dict:
    """The simulator's lucid options for a live lucidd with this config, in trace seconds: every
    duration of lucidd's config (Tprof, the reconcile interval, starvation, aging) times the
    compression; a requeued job restarts about a real second later (restart_s)."""
    from lucidd.live.config import load_config
    from orchestrator.slurm_mode import options_from_config

    cfg = load_config(config_path)
    opts = options_from_config(cfg, compression)
    opts["prof_gate"] = 2 if cfg.profiler.skip_when_free else 0
    opts["restart_s"] = int(round(compression))
    return opts


def lucidd_estimates(config_path: str, plan: pd.DataFrame, compression: float) -> dict:
    """trace job id -> the estimate lucidd gave the job (its database), in trace seconds."""
    from lucidd.live.config import load_config
    from lucidd.live.store import Store

    cfg = load_config(config_path)
    rows = Store(cfg.database.url).jobs([int(i) for i in plan["slurm_id"]])
    by_slurm = dict(zip(plan["slurm_id"].astype(int), plan["job_id"].astype(str)))
    return {by_slurm[int(jid)]: float(r.estimate_s) * compression for jid, r in rows.items()
            if r.estimate_s and int(jid) in by_slurm}


def simulate_with_estimates(window, nodes, policies, options, estimates: dict, fallback_s: float):
    """simulate(), the lucid policies using these duration estimates (what the live daemon used)
    instead of the simulator's own rolling model. A job lucidd never estimated (it finished inside
    Tprof in profiling, so it was never ordered) gets `fallback_s`, lucidd's estimate for a job it
    knows nothing about; the simulator profiles it too and it ends there, whatever the value."""
    import orchestrator.simulation as osim

    own = osim.duration_estimates

    def given(exp):
        ids = exp.trace["job_id"].astype(str)
        return ids.map(estimates).fillna(fallback_s).astype(float).set_axis(exp.trace.index)

    osim.duration_estimates = given
    try:
        return simulate(window, nodes, policies, options)
    finally:
        osim.duration_estimates = own


def compare(real: pd.DataFrame, sims: dict) -> list:
    """Rows of the comparison table: Slurm, then each simulated policy against it."""
    def stats(jct, queue):
        return {"jobs": len(jct), "avg_jct_s": float(np.mean(jct)), "avg_queue_s": float(np.mean(queue)),
                "p99_queue_s": float(np.percentile(queue, 99))}

    rows = [{"source": "Slurm (sacct)", **stats(real["real_jct_s"], real["real_queue_s"])}]
    by_seq = real.set_index("seq")
    for policy, df in sims.items():
        df = df.copy()
        df["seq"] = df["job_id"].map(dict(zip(real["job_id"], real["seq"])))
        df = df.set_index("seq").loc[by_seq.index]
        shift = by_seq["real_start"] - df["start_time"]
        row = {"source": f"sim {policy}", **stats(df["jct_s"], df["queue_s"])}
        row["jct_vs_slurm_pct"] = 100.0 * (row["avg_jct_s"] / rows[0]["avg_jct_s"] - 1)
        row["shift_mean_s"] = float(shift.mean())
        row["shift_abs_p50_s"] = float(shift.abs().median())
        row["shift_abs_p95_s"] = float(np.percentile(shift.abs(), 95))
        row["within_1h_pct"] = 100.0 * float((shift.abs() <= TRACE_HOUR).mean())
        rows.append(row)
    return rows


def format_rows(rows: list) -> str:
    cols = [("source", "", "{}"), ("jobs", "jobs", "{:,}"), ("avg_jct_s", "avg JCT s", "{:,.0f}"),
            ("avg_queue_s", "avg queue s", "{:,.0f}"), ("p99_queue_s", "p99 queue s", "{:,.0f}"),
            ("jct_vs_slurm_pct", "JCT vs Slurm", "{:+.2f} %"), ("shift_mean_s", "mean start shift s", "{:+,.0f}"),
            ("shift_abs_p50_s", "p50 |shift| s", "{:,.0f}"), ("shift_abs_p95_s", "p95 |shift| s", "{:,.0f}"),
            ("within_1h_pct", "start within 1 h", "{:.1f} %")]
    lines = ["| " + " | ".join(h for _, h, _ in cols) + " |",
             "| --- |" + " ---: |" * (len(cols) - 1)]
    for r in rows:
        cells = [f.format(r[k]) if k in r and r[k] is not None else "" for k, _, f in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def diagnostics(real: pd.DataFrame, plan: pd.DataFrame, compression: float) -> list:
    """Lines on how the replay itself went (submitter lag, Slurm's overhead per job, states)."""
    lines = []
    lag = plan["submit_lag_s"] if "submit_lag_s" in plan else None
    if lag is not None:
        lines.append(f"submitter lag behind the scaled submit time: mean {lag.mean():.3f} s, max {lag.max():.3f} s "
                     f"(real seconds)")
    over = (real["real_run_s"] - real["duration"]) / compression
    lines.append(f"run time in sacct minus the trace duration: mean {over.mean():+.2f} s real "
                 f"({over.mean() * compression:+,.0f} trace s; whole-second timestamps)")
    quick = real[real["real_start"] - real["submit_time"] <= compression]
    lines.append(f"jobs started within one real second of their submission: {len(quick)} of {len(real)}")
    states = real["state"].value_counts().to_dict()
    lines.append(f"states: {states}; started by: {real['started_on'].value_counts().to_dict()}")
    if (real["runs"] > 1).any():
        lines.append(f"jobs with more than one run (requeued): {int((real['runs'] > 1).sum())}")
    return lines


def tprof_race(real: pd.DataFrame, plan: pd.DataFrame, tprofs_s, margin_s: float = 1.0) -> list:
    """Lines on the jobs whose sleep ends within `margin_s` real seconds of a Tprof of the live
    lucidd (`tprofs_s`, real seconds): whether lucidd requeues one or sees it end in profiling is a
    race of sub-second phases (whole-second timestamps, one reconcile per interval) that the
    simulator, which runs every job exactly its duration, does not model. Live run 6 lost four
    such jobs to it (docs/lucid.md)."""
    if "sleep_s" not in plan:
        return []
    tprofs = sorted({float(t) for t in tprofs_s if t})
    sleep = plan.set_index("job_id")["sleep_s"].astype(float)
    near = [j for j, v in sleep.items() if any(abs(v - t) < margin_s for t in tprofs)]
    if not near:
        return []
    r = real[real["job_id"].isin(near)]
    requeued = r[r["runs"] > 1]
    text = ", ".join(f"{t:g}" for t in tprofs)
    return [f"jobs whose sleep ends within {margin_s:g} real s of Tprof ({text} s): {len(near)}, of which "
            f"{len(requeued)} were requeued live (a race the simulator does not model; their real JCT "
            f"{requeued['real_jct_s'].sum():,.0f} trace s in all)"]


def hostnames(text: str) -> list:
    """'gpu[1-2,4]' or 'gpu3' (sacct's node list of one job) -> ['gpu1', 'gpu2', 'gpu4']."""
    out = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?", text or ""):
        stem, ranges = m.group(1), m.group(2)
        if ranges is None:
            out.append(stem)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{stem}{i:0{width}d}")
    return out


def vc_lines(real: pd.DataFrame, sims: dict, window: pd.DataFrame, partitions: dict, owned: dict | None) -> list:
    """Lines for a window of several VCs: average JCT per VC (Slurm and each simulated policy), and
    the profiling runs that ran on another VC's nodes (lucidd lending one partition's idle GPUs),
    real (sacct: the first run was in `profiling`, on a node of another VC's partition) and
    simulated (the run's node belongs to another VC)."""
    vc_of = dict(zip(window["job_id"].astype(str), window["vc"].astype(str)))
    r = real.assign(vc=real["job_id"].astype(str).map(vc_of))
    lines = []
    for vc, part in partitions.items():
        mine = r[r["vc"] == vc]
        if mine.empty:
            continue
        parts = [f"Slurm {mine['real_jct_s'].mean():,.0f}"]
        for p, df in sims.items():
            d = df[df["job_id"].astype(str).isin(mine["job_id"].astype(str))]
            parts.append(f"sim {p} {d['jct_s'].mean():,.0f}")
        lines.append(f"VC {vc} (partition {part}, {len(mine)} jobs): avg JCT s: " + ", ".join(parts))
    if owned:
        node_part = {n: p for p, names in owned.items() for n in names}
        part_vc = {p: v for v, p in partitions.items()}
        # a run in none of the VCs' partitions: lucidd's profiling partition
        first = r["first_partition"].fillna("").astype(str)
        prof = r[first.str.len().gt(0) & ~first.isin(list(partitions.values()))]
        away = sum(1 for row in prof.itertuples()
                   if any(part_vc.get(node_part.get(n)) not in (None, row.vc) for n in hostnames(row.first_nodes)))
        text = [f"real {away} of {len(prof)} profiled"]
        for p, df in sims.items():
            if "profiler_node" not in df:
                continue
            ran = df[df["profiler_node"].notna()]
            other = int((ran["profiler_node"].astype(str).str.split(":").str[0] != ran["vc"].astype(str)).sum())
            text.append(f"sim {p} {other} of {len(ran)}")
        lines.append("profiling runs on another VC's nodes: " + ", ".join(text))
    return lines


def start_lag(real: pd.DataFrame, sim: pd.DataFrame, compression: float) -> list:
    """Lines on which side the slurm prediction errs: how many simulated starts are earlier than,
    equal to (within one sacct second) or later than Slurm's, and Slurm's own start latency,
    i.e. the real queue of the jobs the simulator starts the moment they are submitted (in real
    seconds; sacct counts whole seconds). A one-sided shift of a second or two per start is
    Slurm's scheduling latency at this compression, not a difference in policy."""
    sim = sim.set_index("job_id")
    r = real.set_index("job_id")
    shift = (r["real_start"] - sim.loc[r.index, "start_time"]) / compression  # real seconds, + = Slurm later
    tie = shift.abs() < 1
    lines = [f"simulated start vs Slurm's: {int((shift >= 1).sum())} earlier, {int(tie.sum())} within one real "
             f"second, {int((shift <= -1).sum())} later"]
    instant = sim.loc[r.index, "queue_s"] == 0
    if instant.any():
        q = r.loc[instant, "real_queue_s"] / compression
        lines.append(f"Slurm's start latency (real queue of the {int(instant.sum())} jobs the simulator starts at "
                     f"submission): mean {q.mean():.2f} s, max {q.max():.0f} s real")
    return lines


def cmd_calibrate(args) -> int:
    """The replay's dead time per job: every GPU of the partition runs a chain of 1-GPU sleep jobs
    back to back; (last end - first start) / chain length - sleep is what each job costs beyond
    its sleep (launch, completion, Slurm starting the next). --sleep-trim-s takes it back."""
    runner = SlurmRunner(timeout_s=60)
    cluster = read_cluster(runner, args.partition)
    check_idle(runner)
    slots = cluster["nodes"] * GPUS_PER_NODE
    n = slots * args.chain
    since = time.time()
    ids = [int(runner.run(["sbatch", "--parsable", "-J", "calibrate", "-o", "/dev/null", "-p", args.partition,
                           "--gres=gpu:1", "-c", str(CPUS_PER_GPU), "-t", "5", "--wrap",
                           f"sleep {args.sleep:.3f}"]).strip().split(";")[0]) for _ in range(n)]
    wait_done(runner, ids, timeout_s=args.chain * (args.sleep + 5) + 120)
    runs = sacct_runs(read_sacct(runner, ids, since=since - 5), since - 5)
    first = min(runs[i]["start"] for i in ids)
    last = max(runs[i]["end"] for i in ids)
    dead = (last - first) / args.chain - args.sleep
    print(f"{n} jobs of {args.sleep:g} s, {args.chain} per GPU on {slots} GPUs: first start to last end "
          f"{last - first} s (whole seconds), dead time per job {dead:.2f} s")
    return 0


# ----- commands ------------------------------------------------------------------------------------------

def window_args(p):
    p.add_argument("--trace", required=True, help="trace file (any format lucidctl reads)")
    p.add_argument("--format", dest="fmt", default=None)
    p.add_argument("--vc", default=None, help="one VC of the trace (default: all, merged into one partition), "
                                              "or several, 'A,B': each its own partition (--nodes and --partition "
                                              "then name one per VC)")
    p.add_argument("--start", default=None, help="window start: trace seconds or a date")
    p.add_argument("--end", default=None, help="window end (exclusive): trace seconds or a date")
    p.add_argument("--jobs", type=int, default=None, help="at most this many jobs from --start")
    p.add_argument("--max-duration-h", type=float, default=None, help="cap durations (both sides) at H hours")
    p.add_argument("--nodes", required=True, help="nodes of 8 GPUs (the partition's node count; '2,2' with --vc A,B)")
    p.add_argument("--compression", type=float, required=True, help="trace seconds per real second, e.g. 120")
    p.add_argument("--limit-rule", default=None, help="the slurm baseline's --limit-rule (default 1,2,4,8,12,24,48,72,168)")
    p.add_argument("--sleep-trim-s", type=float, default=0.0,
                   help="real seconds taken off every sleep (default 0: sleep = duration / compression)")
    p.add_argument("--bf-window-min", type=int, default=None,
                   help="plan only: the cluster's bf_window in minutes (run/report read it from Slurm)")
    p.add_argument("--bf-max-job-test", type=int, default=None, help="plan only: the cluster's bf_max_job_test")
    p.add_argument("--policies", default="slurm,fifo,qssf", help="simulated policies to compare (default slurm,fifo,qssf)")


def build(args):
    spec = WindowSpec(trace=args.trace, vc=args.vc, start=args.start, end=args.end, jobs=args.jobs,
                      max_duration_h=args.max_duration_h, fmt=args.fmt)
    args.nodes = parse_vcs(args.vc, args.nodes)
    window, notes = load_window(spec, args.nodes)
    base = parse_limit_rule(args.limit_rule)
    rule = ScaledLimitRule(kind=base.kind, steps_s=base.steps_s, factor=base.factor, text=base.text, base=base,
                           compression=float(args.compression))
    if getattr(args, "live", False) and getattr(args, "lucidd_config", None) and args.tprof_margin_s > 0:
        from lucidd.live.config import load_config

        cfg = load_config(args.lucidd_config)
        window, moved = keep_off_tprof(window, live_tprofs(cfg), args.compression, args.tprof_margin_s)
        if moved:
            notes = [*notes, f"{moved} durations within {args.tprof_margin_s:g} real s of lucidd's Tprof moved "
                             f"to {args.tprof_margin_s:g} real s from it, on the side they were on (--tprof-margin-s)"]
    plan = plan_jobs(window, args.compression, base, args.sleep_trim_s)
    # Each job's own limit is the one it is submitted with (sbatch -t, in trace seconds): the live
    # lucidd caps its estimates at a job's TimeLimit, so the prediction's lucid must cap at the same
    # value; Slurm's engine plans with it, as it did with the rule's (the same number).
    window = window.assign(time_limit=[float(rule.limit(d)) for d in window["duration"]])
    return spec, window, notes, rule, plan


def describe(spec, window, notes, rule, plan, args, log=print):
    span_h = (window["submit_time"].max() - window["submit_time"].min()) / 3600
    log(f"window: {spec.trace} vc={spec.vc or 'all'} start={spec.start} end={spec.end} jobs={len(window)} "
        f"(submits over {span_h:.1f} trace h), {nodes_text(args.nodes)} x {GPUS_PER_NODE} GPUs, "
        f"compression {args.compression:g}x")
    for n in notes:
        log(f"  note: {n}")
    log(f"  limits: {rule.describe()}; -t minutes used: {sorted(plan['limit_min'].unique().tolist())}")
    short = int((plan["sleep_s"] < 1).sum())
    log(f"  sleeps: median {plan['sleep_s'].median():.1f} s, {short} under 1 s; GPUs/job mean {window['gpu_num'].mean():.1f}")
    if isinstance(args.nodes, dict):
        log(f"  jobs per VC: {window['vc'].value_counts().reindex(list(args.nodes)).fillna(0).astype(int).to_dict()}")


def cmd_plan(args):
    spec, window, notes, rule, plan = build(args)
    describe(spec, window, notes, rule, plan, args)
    params = {}
    if args.bf_window_min is not None:
        params["bf_window"] = args.bf_window_min
    if args.bf_max_job_test is not None:
        params["bf_max_job_test"] = args.bf_max_job_test
    opts = model_options(params, args.compression, rule)
    sims = simulate(window, args.nodes, args.policies.split(","), opts)
    for p, df in sims.items():
        span = (df["end_time"].max() - df["submit_time"].min()) / args.compression
        print(f"sim {p:8s} avg JCT {df['jct_s'].mean():10,.0f} s  avg queue {df['queue_s'].mean():10,.0f} s  "
              f"p99 queue {np.percentile(df['queue_s'], 99):10,.0f} s  replay would take {span / 60:5.1f} min")
    if "slurm" in sims:
        for what, jct, within in robustness(window, args.nodes, opts, args.compression):
            print(f"  robustness: {what} -> slurm avg JCT {jct:+.2f} %, {within:.1f} % of starts within 1 h")
    return 0


def partitions_of(args) -> str | dict:
    """--partition for this window: one name, or {vc: partition} when --vc names several VCs."""
    names = [x.strip() for x in str(args.partition).split(",") if x.strip()]
    if not isinstance(args.nodes, dict):
        if len(names) != 1:
            raise SystemExit(f"--partition {args.partition!r}: one partition for one VC")
        return names[0]
    if len(names) != len(args.nodes):
        raise SystemExit(f"--vc names {len(args.nodes)} VCs, --partition {len(names)} partitions: one per VC")
    if len(set(names)) != len(names):
        raise SystemExit(f"--partition {args.partition!r} names a partition twice")
    return dict(zip(args.nodes, names))


def check_partitions(runner: SlurmRunner, partitions: dict, nodes: dict) -> dict:
    """Each VC's partition has --nodes nodes and no two share one (the simulator gives each VC its
    own nodes). Returns partition -> its node names."""
    owned, seen = {}, {}
    for vc, part in partitions.items():
        listed = runner.run(["sinfo", "-h", "-p", part, "-o", "%N"]).strip()
        names = runner.run(["scontrol", "show", "hostnames", listed]).split() if listed else []
        if len(names) != nodes[vc]:
            raise SystemExit(f"partition {part} has {len(names)} nodes, --nodes says {nodes[vc]} for VC {vc}")
        for n in names:
            if n in seen:
                raise SystemExit(f"partitions {seen[n]} and {part} share node {n}: each VC needs its own nodes")
            seen[n] = part
        owned[part] = names
    return owned


def cmd_run(args):
    runner = SlurmRunner(timeout_s=60)
    spec, window, notes, rule, plan = build(args)
    describe(spec, window, notes, rule, plan, args)
    partition = partitions_of(args)
    first = partition if isinstance(partition, str) else next(iter(partition.values()))
    cluster = read_cluster(runner, first)
    if isinstance(partition, dict):
        cluster["partitions"] = check_partitions(runner, partition, args.nodes)
        cluster["nodes"] = sum(args.nodes.values())
    elif cluster["nodes"] != args.nodes:
        raise SystemExit(f"partition {args.partition} has {cluster['nodes']} nodes, --nodes says {args.nodes}")
    params = sched_params(cluster["config"].get("SchedulerParameters") or "")
    opts = model_options(params, args.compression, rule)
    res = int(params.get("bf_resolution", 60))
    if res * args.compression > 600:
        print(f"warning: bf_resolution={res} s is {res * args.compression:,.0f} trace s at this compression")
    if args.live and not args.lucidd_config:
        raise SystemExit("--live needs --lucidd-config (the config the running lucidd was started with)")
    sims = simulate(window, args.nodes, [p for p in args.policies.split(",") if not p.startswith("lucid")], opts)
    rob = robustness(window, args.nodes, opts, args.compression) if "slurm" in sims else []
    pred = sims.get("slurm")
    span_s = ((pred["end_time"].max() if pred is not None else window["submit_time"].max() + window["duration"].max())
              - window["submit_time"].min()) / args.compression
    print(f"predicted replay time {span_s / 60:.1f} min; cluster {cluster['nodes']} nodes, "
          f"SchedulerParameters={cluster['config'].get('SchedulerParameters')}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    check_idle(runner)
    # with lucidd's job_submit.lua (--live) each job waits in the inbox first; lucidd records the partition asked for
    comment = None
    t_start = time.time()
    t0, plan = submit_all(runner, plan, partition, comment=comment)
    print(f"  all {len(plan)} submitted; waiting")
    wait_done(runner, plan["slurm_id"], timeout_s=max(120.0, span_s * 2 + 120))
    wall = time.time() - t_start
    data = read_sacct(runner, plan["slurm_id"], since=t0 - 5)
    window.to_csv(out / "window.csv", index=False)
    plan.to_csv(out / "plan.csv", index=False)
    (out / "sacct.json").write_text(json.dumps(data))
    conf_path = cluster["config"].get("SLURM_CONF") or os.environ.get("SLURM_CONF")
    if conf_path and os.path.exists(conf_path):
        shutil.copy(conf_path, out / "slurm.conf")
    if args.live:
        shutil.copy(args.lucidd_config, out / "lucidd.toml")
        (out / "lucidd_estimates.json").write_text(json.dumps(lucidd_estimates(args.lucidd_config, plan,
                                                                                args.compression)))
    meta = {"argv": sys.argv[1:], "window": dataclasses.asdict(spec), "nodes": args.nodes,
            "robustness": [{"what": d, "jct_change_pct": round(j, 2), "within_1h_pct": round(w, 1)} for d, j, w in rob],
            "compression": args.compression, "limit_rule": args.limit_rule, "sleep_trim_s": args.sleep_trim_s,
            "tprof_margin_s": args.tprof_margin_s if args.live else None,
            "partition": partition, "live": args.live, "policies": args.policies, "t0": t0,
            "wall_s": round(wall, 1), "cluster": cluster, "notes": notes,
            "model_options": {k: (v if k != "limit_rule" else rule.describe()) for k, v in opts.items()}}
    (out / "replay.json").write_text(json.dumps(meta, indent=2))
    print(f"  replay took {wall / 60:.1f} min")
    return report(out, sims=None if args.live else sims)


def report(out: Path, sims=None) -> int:
    out = Path(out)
    meta = json.loads((out / "replay.json").read_text())
    window = pd.read_csv(out / "window.csv", dtype={"job_id": str, "user": str, "name": str, "state": str, "vc": str})
    plan = pd.read_csv(out / "plan.csv", dtype={"job_id": str, "vc": str})
    data = json.loads((out / "sacct.json").read_text())
    C = float(meta["compression"])
    base = parse_limit_rule(meta.get("limit_rule"))
    rule = ScaledLimitRule(kind=base.kind, steps_s=base.steps_s, factor=base.factor, text=base.text, base=base,
                           compression=C)
    params = sched_params(meta["cluster"]["config"].get("SchedulerParameters") or "")
    opts = model_options(params, C, rule)
    policies = meta["policies"].split(",")
    nodes = meta["nodes"] if isinstance(meta["nodes"], dict) else int(meta["nodes"])
    if sims is None:
        sims = simulate(window, nodes, [p for p in policies if not p.startswith("lucid")], opts)
    live_cfg = None
    if meta.get("live"):
        lucid = [p for p in policies if p.startswith("lucid")] or ["lucid"]
        est = json.loads((out / "lucidd_estimates.json").read_text())
        from lucidd.live.config import load_config

        live_cfg = load_config(str(out / "lucidd.toml"))
        fallback = live_cfg.ordering.default_estimate_s * C
        sims.update(simulate_with_estimates(window, nodes, lucid,
                                            {**opts, **lucid_options(str(out / "lucidd.toml"), C)}, est, fallback))
    real = real_results(plan, data, C, since=meta.get("t0", 0) - 5 if meta.get("t0") else None)
    rows = compare(real, sims)
    w = meta["window"]
    head = (f"{Path(w['trace']).parent.name}/{Path(w['trace']).name} vc={w['vc'] or 'all'} start={w['start']} "
            f"end={w['end']} jobs={len(window)}, {nodes_text(nodes)} x {GPUS_PER_NODE} GPUs, {C:g}x, "
            f"replay {meta['wall_s'] / 60:.1f} min")
    table = format_rows(rows)
    diag = diagnostics(real, plan, C)
    if "slurm" in sims:
        diag += start_lag(real, sims["slurm"], C)
    if isinstance(nodes, dict):
        diag += vc_lines(real, sims, window, meta["partition"], meta["cluster"].get("partitions"))
    if live_cfg is not None:
        diag += tprof_race(real, plan, live_tprofs(live_cfg))
    print(head)
    print(table)
    rob = meta.get("robustness")
    if (not rob or "what" not in rob[0]) and not meta.get("live") and "slurm" in sims:
        rob = [{"what": d, "jct_change_pct": round(j, 2), "within_1h_pct": round(w, 1)}
               for d, j, w in robustness(window, nodes, opts, C)]
    for r in rob or []:
        diag.append(f"robustness of the slurm prediction: {r['what']} -> avg JCT {r['jct_change_pct']:+.2f} %, "
                    f"{r['within_1h_pct']:.1f} % of starts within 1 h")
    for line in diag:
        print(f"  {line}")
    merged = real.copy()
    for p, df in sims.items():
        m = df.set_index("job_id")
        merged[f"{p}_start"] = merged["job_id"].map(m["start_time"])
        merged[f"{p}_queue_s"] = merged["job_id"].map(m["queue_s"])
    merged.to_csv(out / "jobs.csv", index=False)
    (out / "table.md").write_text(head + "\n\n" + table + "\n\n" + "\n".join(f"- {d}" for d in diag) + "\n")
    (out / "summary.json").write_text(json.dumps(rows, indent=2))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="the window, its scaled jobs and the simulator's prediction (no Slurm)")
    window_args(p)
    p = sub.add_parser("run", help="replay on Slurm, then compare")
    window_args(p)
    p.add_argument("--partition", default="main")
    p.add_argument("--out", required=True, help="directory for the replay's files")
    p.add_argument("--live", action="store_true",
                   help="lucidd runs on the cluster (its job_submit.lua routes every job through the inbox): "
                        "compare with the simulator's lucid policy as well")
    p.add_argument("--lucidd-config", default=None, help="with --live: the running lucidd's config file")
    p.add_argument("--tprof-margin-s", type=float, default=1.0,
                   help="with --live: move a duration that ends within this many real seconds of one of "
                        "lucidd's Tprofs to this far from it, on its side, in both the replay and the "
                        "simulation (default 1; 0: off). Compression shrinks the margin below Slurm's "
                        "whole-second clock, so such a job's fate is otherwise a race")
    p = sub.add_parser("calibrate", help="measure the dead time per job (for --sleep-trim-s)")
    p.add_argument("--partition", default="main")
    p.add_argument("--chain", type=int, default=10, help="jobs per GPU, back to back (default 10)")
    p.add_argument("--sleep", type=float, default=3.0, help="each job's sleep in seconds (default 3)")
    p = sub.add_parser("report", help="compare again from a replay directory")
    p.add_argument("dir")
    args = ap.parse_args(argv)
    if args.cmd == "plan":
        return cmd_plan(args)
    if args.cmd == "run":
        return cmd_run(args)
    if args.cmd == "calibrate":
        return cmd_calibrate(args)
    return report(Path(args.dir))


if __name__ == "__main__":
    sys.exit(main())
