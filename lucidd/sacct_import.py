"""Turn a cluster's own `sacct --json` history into a trace that `lucidctl simulate` replays.

`lucidctl import-sacct` (docs/traces.md, "Your own cluster's history (sacct)") reads a saved
`sacct --json` file or runs `sacct --json --allusers --duplicates` itself (through
`lucidd.backends.slurm.SlurmRunner`), and writes a trace in lucidd's generic `csv` format. With
`sinfo --json` it also writes a VC config (one row per partition the trace uses).

The rules, in the order they are applied:

* One sacct record is one run of a job allocation; job steps (nested under `steps`) are ignored.
  Each array task and each heterogeneous-job component is a job of its own (`1234_5`, `1234+0`).
* The same record twice (files of consecutive windows merged) is read once (`duplicate record`).
* Records with the same job id are runs of one job when each is the rerun of the one before: that
  one ended in a requeue state (`REQUEUED`, ...; 23.11's `["PENDING", "REQUEUED"]`) and the next
  was submitted within LOST_RERUN_S of its end, or it ended in another state (`NODE_FAIL`,
  `PREEMPTED`, `FAILED` with RequeueExit: Slurm's own requeues) and the next was submitted within
  REQUEUE_SLACK_S of its end (Slurm resubmits at the requeue). `sacct -D` lists each run of a
  requeued job, and lucidd's profiling requeues every profiled job once. They become one job:
  submit time of the **first** run, duration, GPUs and state of the **last** run, and it is
  counted as requeued. Any other record of the same id is a different job (Slurm reuses ids after
  a state reset or a wrap-around); it gets the id `ID#2`, `ID#3`, ...
* submit_time = when Slurm could first start the job (sacct's `eligible`: a dependency met, a
  `--begin` time reached), where that is later than its submission; `ineligible_s` is the wait
  before. Those waits are not the scheduler's to shorten.
* VC = the partition of the last run. When that is one of lucidd's own partitions (`inbox`,
  `profiling`: a job that finished within Tprof, or lucidd routed), the VC is the partition the
  user asked for (`lucid:partition=NAME` in the admin comment, written by lucidd's
  job_submit.lua), else the last earlier run's partition outside them, else `default_vc` when
  given, else the lucidd partition's name is kept (and counted in the report).
* duration = end - start of the last run that started (wall time, as Slurm's Elapsed). Jobs that
  never started (cancelled while pending, or refused at submission: start = end, no nodes) are
  dropped (`never started`); jobs still pending or
  running are dropped (`not finished`).
* GPUs = the allocated `gres/gpu` TRES of that run, else the requested one. Jobs with no GPU are
  dropped (`cpu-only job`) unless `keep_cpu_jobs`, which keeps them as 1-GPU jobs (the simulator
  only models GPUs; the csv format needs gpu_num >= 1) with `gpus_recorded` = 0.
* time_limit = the time limit of that run in seconds (sacct's `time.limit` minutes x 60), empty
  when it ran UNLIMITED. The simulator's Slurm plans backfill with it (instead of a modelled
  limit) and every estimate is capped at it.
* Times are written as ISO-8601 UTC (`2026-11-23T18:05:38Z`); `start`/`end` keep the jobs
  submitted in [start, end) (`outside window`).
* Names are taken as slurmdbd stored them: it turns `"` into a backtick and, depending on the
  database's character set, some non-ASCII characters into `?`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .backends.base import PARTITION_TAG, never_ran
from .backends.slurm import json_int, json_time, sacct_state, tres_gpus
from .errors import LucidError

#: lucidd's own partitions (docs/deploy.md): a job's VC is never one of these when it can be helped.
LUCID_PARTITIONS = ("inbox", "profiling")

#: states of a run that was requeued: the next record with the same job id is the same job.
REQUEUE_STATES = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "REQUEUED_HOLD"})
#: a rerun is submitted when its requeue ends the run before it (Slurm sets a new submit time then):
#: this far apart, a record that ended in another state (NODE_FAIL, PREEMPTED, FAILED with
#: RequeueExit) and the next record of its id are one job's runs
REQUEUE_SLACK_S = 5
#: a record that ended in a requeue state whose next record of its id was submitted this much later
#: is not its rerun: that rerun was lost (slurmctld's state reset) and Slurm gave the id to another job
LOST_RERUN_S = 3600
#: states of a job that has not ended yet.
UNFINISHED_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING",
                               "SIGNALING", "STAGE_OUT", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                               "REQUEUED_HOLD", "STOPPED"})

#: columns of the written trace (lucidd's generic csv format; run_start .. gpus_recorded are for people
#: and are ignored by the loader; time_limit, in seconds, empty for none, is read: Slurm's backfill
#: plans with it and estimates are capped at it).
TRACE_COLUMNS = ("job_id", "submit_time", "duration", "gpu_num", "cpu_num", "vc", "user", "name", "state",
                 "run_start", "run_end", "account", "requeues", "gpus_recorded", "time_limit", "ineligible_s")

#: default window of `--live` without --start: the last 30 days.
DEFAULT_LIVE_DAYS = 30
LIVE_WINDOW_S = 7 * 86400  # --live asks sacct for a week first,
LIVE_WINDOW_RECORDS = 40_000  # then for windows of about this many records (~250 MB of sacct's JSON)


class SacctImportError(LucidError):
    """The input is not usable sacct/sinfo output, or nothing is left to write."""


@dataclass
class ImportReport:
    """What an import did: counts for every rule, so nothing is dropped or changed silently."""

    source: str
    records: int = 0  # sacct job records read (runs; steps not counted)
    jobs: int = 0  # jobs written
    dropped: dict = field(default_factory=dict)  # reason -> jobs
    requeued: int = 0  # jobs that had more than one run (merged into one)
    extra_runs: int = 0  # runs merged away
    vc_from_request: int = 0  # last run in a lucidd partition: VC from lucid:partition= / an earlier run
    vc_default: int = 0  # ... from default_vc
    vc_lucid_left: dict = field(default_factory=dict)  # lucidd partition -> jobs that kept it as VC
    vc_no_partition: int = 0  # jobs whose records name no partition: VC "default"
    ids_reused: int = 0  # job ids that stood for more than one job
    waited_eligible: int = 0  # jobs Slurm could not start at once (dependency, --begin): submitted when eligible
    cpu_jobs_kept: int = 0
    first_submit: int | None = None  # Unix seconds
    last_submit: int | None = None
    gpu_hours: float = 0.0
    vcs: dict = field(default_factory=dict)  # vc -> jobs
    with_limit: int = 0  # jobs written with a time limit (the others ran UNLIMITED)
    no_user: int = 0  # jobs written with no user (sacct --json leaves it out for users without an association)
    as_it_ran: dict = field(default_factory=dict)  # avg JCT, avg and p99.9 queue (s) as Slurm ran the jobs
    notes: list = field(default_factory=list)

    def lines(self) -> list[str]:
        drop = ", ".join(f"{n} {r}" for r, n in self.dropped.items()) or "none"
        out = [f"{self.jobs} jobs from {self.records} sacct records of {self.source}; dropped: {drop}"]
        if self.jobs:
            out.append(f"submitted {_iso(self.first_submit)} .. {_iso(self.last_submit)}; "
                       f"{len(self.vcs)} VCs ({', '.join(f'{k}: {v}' for k, v in self.vcs.items())}); "
                       f"{self.gpu_hours:,.1f} GPU-hours")
        if self.jobs:
            out.append(f"time limits: {self.with_limit} of {self.jobs} jobs have one (time_limit; the simulator's "
                       "Slurm plans with it, and estimates are capped at it)"
                       + ("; the others ran with none (UNLIMITED), and the simulator models theirs (--limit-rule)"
                          if self.with_limit < self.jobs else ""))
        if self.as_it_ran:
            r = self.as_it_ran
            out.append(f"as Slurm ran them: avg JCT {r['avg_jct_s']:,.0f} s, avg queue {r['avg_queue_s']:,.0f} s, "
                       f"p99.9 queue {r['p999_queue_s']:,.0f} s (simulate's `slurm` row should come close on the "
                       "cluster that ran them; a job from its first submission, or when it became eligible, to its last "
                       "run's end)")
        if self.requeued:
            out.append(f"{self.requeued} requeued job(s): {self.extra_runs} earlier run(s) merged (first submit, "
                       "last run)")
        if self.vc_from_request:
            out.append(f"{self.vc_from_request} job(s) whose last run was in a lucidd partition "
                       f"({', '.join(LUCID_PARTITIONS)}) got the partition they asked for as VC")
        if self.vc_default:
            out.append(f"{self.vc_default} job(s) with no recorded partition request got the --default-vc")
        if self.vc_no_partition:
            out.append(f"{self.vc_no_partition} job(s) with no partition in their records: VC 'default' (give "
                       "--default-vc NAME to put them in a partition)")
        for part, n in self.vc_lucid_left.items():
            out.append(f"{n} job(s) ran only in lucidd's partition '{part}' with no recorded request: VC '{part}' "
                       "(give --default-vc NAME to put them in a partition)")
        if self.waited_eligible:
            out.append(f"{self.waited_eligible} job(s) could not start when submitted (a dependency, a --begin "
                       "time): submit_time is when Slurm could first start them (ineligible_s: the wait before)")
        if self.ids_reused:
            out.append(f"{self.ids_reused} job id(s) were used by more than one job (ids reset or wrapped): "
                       "the later jobs are ID#2, ID#3, ...")
        if self.no_user:
            out.append(f"{self.no_user} job(s) without a user: sacct --json leaves it out for users without an "
                       "association in slurmdbd; the duration model treats them as unknown users (--live reads "
                       "their names from sacct's text output)")
        if self.cpu_jobs_kept:
            out.append(f"{self.cpu_jobs_kept} job(s) without GPUs kept as 1-GPU jobs (gpus_recorded = 0)")
        out.extend(f"note: {n}" for n in self.notes)
        return out

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("source", "records", "jobs", "dropped", "requeued", "extra_runs",
                                           "vc_from_request", "vc_default", "vc_lucid_left", "vc_no_partition", "ids_reused", "waited_eligible",
                                           "cpu_jobs_kept", "vcs", "with_limit", "no_user", "as_it_ran", "notes")}
        d["gpu_hours"] = round(self.gpu_hours, 3)
        d["first_submit"] = _iso(self.first_submit) if self.first_submit is not None else None
        d["last_submit"] = _iso(self.last_submit) if self.last_submit is not None else None
        return d


# ----- small readers, tolerant of 22.05's plain values and newer Slurm's {"set", "number"} ----------

def _tres_count(items, kind: str) -> int:
    for item in items or []:
        if isinstance(item, dict) and item.get("type") == kind:
            return json_int(item.get("count"), 0) or 0
    return 0


_LAST_TIME = 253402300800  # 10000-01-01: later times have no calendar date (gmtime overflows)


def _iso(t) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(t)))


def _requested_partition(admin_comment: str, lucid: tuple) -> str | None:
    for word in (admin_comment or "").split():
        if word.startswith(PARTITION_TAG):
            parts = [p for p in word[len(PARTITION_TAG):].split(",") if p and p not in lucid]
            if parts:
                return parts[0]
    return None


@dataclass
class _Run:
    key: tuple  # (cluster, raw job id)
    display_id: str
    submit: int | None
    start: int | None
    end: int | None
    state: str
    partition: str
    gpus: int
    cpus: int
    user: str
    name: str
    account: str
    admin_comment: str
    order: int  # position in the file (ties)
    limit_s: int | None = None  # the run's time limit (sacct's minutes, in seconds); None: UNLIMITED
    nodes: str = ""  # the nodes it was given ("None assigned" for a run that never started)
    eligible: int | None = None  # when Slurm could first start it (dependencies met, --begin reached)


def _read_run(rec: dict, order: int) -> _Run:
    job_id = json_int(rec.get("job_id"))
    if job_id is None:
        raise ValueError("no job_id")
    display = str(job_id)
    array = rec.get("array") or {}
    array_job, task = json_int(array.get("job_id"), 0) or 0, json_int(array.get("task_id"), None)
    if array_job and task is not None:
        display = f"{array_job}_{task}"
    het = rec.get("het") or {}
    het_job, offset = json_int(het.get("job_id"), 0) or 0, json_int(het.get("job_offset"), None)
    if het_job and offset is not None:
        display = f"{het_job}+{offset}"
    t = rec.get("time") or {}
    tres = rec.get("tres") or {}
    gpus = tres_gpus(tres.get("allocated")) or tres_gpus(tres.get("requested"))
    cpus = _tres_count(tres.get("allocated"), "cpu") or _tres_count(tres.get("requested"), "cpu")
    comment = rec.get("comment") or {}
    admin = comment.get("administrator") if isinstance(comment, dict) else ""
    assoc = rec.get("association") or {}
    return _Run(key=(str(rec.get("cluster") or ""), job_id), display_id=display,
                submit=json_time(t.get("submission")), start=json_time(t.get("start")), end=json_time(t.get("end")),
                state=sacct_state(rec.get("state")), partition=str(rec.get("partition") or ""), gpus=gpus, cpus=cpus,
                user=str(rec.get("user") or assoc.get("user") or ""), name=str(rec.get("name") or ""),
                account=str(rec.get("account") or ""), admin_comment=str(admin or ""), order=order,
                limit_s=_limit_s(t.get("limit")), nodes=str(rec.get("nodes") or ""),
                eligible=json_time(t.get("eligible")))


def _limit_s(minutes) -> int | None:
    """sacct's time limit (minutes; null, or a huge NO_VAL/INFINITE number, for none) in seconds."""
    m = json_int(minutes)
    if m is None or m <= 0 or m >= 0xFFFFFFFE:
        return None
    return int(m) * 60


def _reruns(prev: _Run, nxt: _Run) -> bool:
    """Whether `nxt`, the next record of `prev`'s job id, is the same job run again."""
    gap = None if prev.end is None or nxt.submit is None else nxt.submit - prev.end
    if prev.state in REQUEUE_STATES:
        return gap is None or -REQUEUE_SLACK_S <= gap <= LOST_RERUN_S
    # Slurm's own requeue after a node failure, a preemption or a RequeueExit code records the run
    # NODE_FAIL, PREEMPTED or FAILED, and submits the rerun at its end (these were counted as a
    # reused id: one job more, and the rerun's wait lost). An id Slurm hands out again after a state
    # reset is not submitted in the second its old job ended.
    return gap is not None and prev.start is not None and abs(gap) <= REQUEUE_SLACK_S


def _group_runs(runs: list[_Run]) -> list[list[_Run]]:
    """Runs -> jobs: records of one id continue one job while each is the rerun of the one before."""
    by_key: dict = {}
    for r in runs:
        by_key.setdefault(r.key, []).append(r)
    jobs = []
    for rs in by_key.values():
        rs.sort(key=lambda r: (r.submit if r.submit is not None else math.inf,
                               r.start if r.start is not None else math.inf, r.order))
        current = [rs[0]]
        for r in rs[1:]:
            if _reruns(current[-1], r):
                current.append(r)
            else:
                jobs.append(current)
                current = [r]
        jobs.append(current)
    return jobs


def _without_duplicates(runs: list[_Run], dropped: Counter) -> list[_Run]:
    """One run per (job id, submission, start, end, state): files of consecutive windows merged
    hold the jobs that ran across the boundary in both (sacct lists every job active in a window)."""
    seen, out = set(), []
    for r in runs:
        k = (r.key, r.submit, r.start, r.end, r.state)
        if k in seen:
            dropped["duplicate record"] += 1
            continue
        seen.add(k)
        out.append(r)
    return out


def check_sacct_data(data, source: str = "sacct --json") -> list:
    """The `jobs` list of `sacct --json` output, or a SacctImportError that says what the input is."""
    if not isinstance(data, dict):
        raise SacctImportError(f"{source}: not `sacct --json` output (the JSON is a {type(data).__name__}, "
                               "expected an object with a 'jobs' list)")
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        if isinstance(data.get("nodes"), list):
            what = "it looks like `sinfo --json` output (give it as --sinfo-json)"
        elif data:
            what = f"no 'jobs' list; top-level keys: {', '.join(map(str, list(data)[:8]))}"
        else:
            what = "an empty JSON object"
        raise SacctImportError(f"{source}: not `sacct --json` output ({what})")
    # Slurm 22.05 reports an empty accounting window as error 9003 "Nothing found"; that is an empty
    # history (a new cluster, a quiet window), not a failure, and is told apart by the caller's
    # "no jobs to write".
    errors = [e for e in data.get("errors") or []
              if e and not (isinstance(e, dict) and (e.get("error_number") == 9003 or e.get("description") == "Nothing found"))]
    if not jobs and errors:
        raise SacctImportError(f"{source}: sacct reported errors and no jobs: {_one_line(json.dumps(errors))[:300]}")
    for rec in jobs[:50]:
        if isinstance(rec, dict) and "job_state" in rec and "time" not in rec:
            raise SacctImportError(f"{source}: this is `squeue --json` output (slurmctld's current jobs), not "
                                   "`sacct --json` (the accounting history)")
        if isinstance(rec, dict) and not isinstance(rec.get("time"), dict):
            raise SacctImportError(f"{source}: not `sacct --json` output (a job record without a 'time' object; "
                                   f"keys: {', '.join(map(str, list(rec)[:8]))})")
    return jobs


def _one_line(s: str) -> str:
    return " ".join(str(s).split())


def sacct_json_to_trace(data: dict, *, source: str = "sacct --json", start: int | None = None,
                        end: int | None = None, keep_cpu_jobs: bool = False,
                        lucid_partitions=LUCID_PARTITIONS, default_vc: str | None = None):
    """`sacct --json` output (parsed) -> (trace DataFrame in lucidd's csv format, ImportReport).

    `start`/`end`: Unix seconds; only jobs submitted in [start, end) are kept. The rules are in
    the module docstring and docs/traces.md. Raises SacctImportError when `data` is not sacct
    output; an empty result is not an error here (the CLI refuses to write an empty trace).
    """
    recs = check_sacct_data(data, source)
    lucid = tuple(lucid_partitions or ())
    rep = ImportReport(source=source)
    dropped = Counter()
    runs = []
    for i, rec in enumerate(recs):
        if not isinstance(rec, dict):
            dropped["unreadable record"] += 1
            continue
        try:
            runs.append(_read_run(rec, i))
        except (KeyError, TypeError, ValueError, AttributeError):
            dropped["unreadable record"] += 1
    rep.records = len(recs)
    runs = _without_duplicates(runs, dropped)
    clusters = {r.key[0] for r in runs}
    groups = _group_runs(runs)
    seen_ids = Counter()
    rows = []
    for g in sorted(groups, key=lambda g: (g[0].submit or 0, g[0].key, g[0].order)):
        first, last = g[0], g[-1]
        base_id = last.display_id if len(clusters) <= 1 else f"{last.key[0]}:{last.display_id}"
        # a job cancelled right after lucidd's requeue was written as a 0 s job, a refused sbatch as a
        # 0 s, 20-GPU one: records of runs that never happened are not runs
        started = [r for r in g if not never_ran(r.start, r.end, r.nodes)]
        submit = next((r.submit for r in g if r.submit is not None), None)
        if submit is None:
            submit = started[0].start if started else None
        if submit is None:
            dropped["no submit time"] += 1
            continue
        if (start is not None and submit < start) or (end is not None and submit >= end):
            dropped["outside window"] += 1
            continue
        if last.state in UNFINISHED_STATES or (last.start is not None and last.end is None):
            dropped["not finished"] += 1
            continue
        if not started:
            dropped["never started"] += 1
            continue
        run = started[-1]
        if run.end is None or run.end < run.start:
            dropped["bad start/end times"] += 1
            continue
        if not all(0 <= t < _LAST_TIME for t in (submit, run.start, run.end)):  # a damaged file's 1e20
            dropped["bad start/end times"] += 1
            continue
        gpus = run.gpus or last.gpus
        recorded = gpus
        if gpus <= 0:
            if not keep_cpu_jobs:
                dropped["cpu-only job"] += 1
                continue
            gpus = 1
            rep.cpu_jobs_kept += 1
        # named once written: a dropped record sharing the id (a lost rerun) gives no ID#2
        seen_ids[base_id] += 1
        job_id = base_id if seen_ids[base_id] == 1 else f"{base_id}#{seen_ids[base_id]}"
        if seen_ids[base_id] == 2:
            rep.ids_reused += 1
        # Waiting for a dependency or a --begin time is not the scheduler's: the replay submits the job
        # when Slurm could first start it (submitted at its submission, every stage of a pipeline
        # could run at once in the replay, while the history's own figures counted those waits)
        eligible = first.eligible
        ineligible = (eligible - submit if eligible is not None and submit < eligible <= started[0].start
                      else 0)
        if ineligible:
            rep.waited_eligible += 1
        vc = run.partition or last.partition
        if "," in vc:
            vc = vc.split(",")[0]
        if vc in lucid or not vc:
            asked = next((p for r in reversed(g) for p in [_requested_partition(r.admin_comment, lucid)] if p),
                         None)
            earlier = next((r.partition.split(",")[0] for r in reversed(g)
                            if r.partition and r.partition.split(",")[0] not in lucid), None)
            if asked or earlier:
                vc = asked or earlier
                rep.vc_from_request += 1
            elif default_vc:
                vc = default_vc
                rep.vc_default += 1
            elif not vc:  # sacct recorded no partition at all: not one of lucidd's
                vc = "default"
                rep.vc_no_partition += 1
            else:
                rep.vc_lucid_left[vc] = rep.vc_lucid_left.get(vc, 0) + 1
        if len(g) > 1:
            rep.requeued += 1
            rep.extra_runs += len(g) - 1
        rows.append({
            "job_id": job_id, "submit_time": _iso(submit + ineligible), "duration": int(run.end - run.start),
            "gpu_num": int(gpus), "cpu_num": int(run.cpus or last.cpus), "vc": vc, "user": last.user or first.user,
            "name": last.name or first.name, "state": last.state, "run_start": _iso(run.start),
            "run_end": _iso(run.end), "account": last.account, "requeues": len(g) - 1, "gpus_recorded": recorded,
            # the limit of the run that counted (the user's own; lucidd's moves keep it)
            "time_limit": run.limit_s if run.limit_s is not None else last.limit_s,
            "ineligible_s": int(ineligible),
            "_submit": submit + ineligible, "_end": run.end,
        })
    df = pd.DataFrame(rows, columns=[*TRACE_COLUMNS, "_submit", "_end"])
    df = df.sort_values("_submit", kind="stable").reset_index(drop=True)
    if len(df):
        rep.first_submit, rep.last_submit = int(df["_submit"].min()), int(df["_submit"].max())
        rep.gpu_hours = float((df["gpu_num"] * df["duration"]).sum()) / 3600
        rep.vcs = {str(k): int(v) for k, v in df["vc"].value_counts().sort_index().items()}
    if len(df):
        # What Slurm did with these jobs, in simulate's measures: an admin compared the simulated
        # `slurm` row with nothing (an admin trial; it was 41 % off on an oversized VC config)
        jct = (df["_end"] - df["_submit"]).to_numpy(float)
        queue = np.maximum(jct - df["duration"].to_numpy(float), 0)
        rep.as_it_ran = {"avg_jct_s": round(float(jct.mean()), 1), "avg_queue_s": round(float(queue.mean()), 1),
                         "p999_queue_s": round(float(np.percentile(queue, 99.9)), 1)}
    df = df.drop(columns=["_submit", "_end"])
    for c in ("duration", "gpu_num", "cpu_num", "requeues", "gpus_recorded", "ineligible_s"):
        df[c] = df[c].astype("int64")
    df["time_limit"] = df["time_limit"].astype("Int64")  # empty cell: no limit (UNLIMITED)
    rep.with_limit = int(df["time_limit"].notna().sum())
    rep.jobs = len(df)
    rep.no_user = int((df["user"] == "").sum()) if len(df) else 0
    order = ("unreadable record", "duplicate record", "no submit time", "outside window", "not finished",
             "never started", "bad start/end times", "cpu-only job")
    rep.dropped = {k: dropped[k] for k in order if dropped.get(k)}
    if rep.records and not any(r.gpus for r in runs):
        rep.notes.append("no record has a gres/gpu TRES: Slurm accounts GPUs only with "
                         "AccountingStorageTRES=gres/gpu in slurm.conf")
    return df, rep


# ----- VC config from sinfo ---------------------------------------------------------------------

def _nodes_of_sinfo_groups(groups: list) -> list[dict]:
    """Slurm 23.02 on: `sinfo --json` lists groups of alike nodes per partition ({"nodes": {"nodes":
    [names]}, "gres": {"total": "gpu:8"}, "partition": {"name"}}); 22.05 listed nodes with their
    partitions. The groups as 22.05's node records."""
    nodes: dict[str, dict] = {}
    for g in groups:
        if not isinstance(g, dict):
            continue
        names = g["nodes"].get("nodes") if isinstance(g.get("nodes"), dict) else None
        part = g["partition"].get("name") if isinstance(g.get("partition"), dict) else None
        gres = g["gres"].get("total") if isinstance(g.get("gres"), dict) else None
        for name in names if isinstance(names, list) else ():
            if not isinstance(name, str) or not name:
                continue
            n = nodes.setdefault(name, {"name": name, "gres": "", "partitions": []})
            n["gres"] = n["gres"] or str(gres or "")
            if isinstance(part, str) and part and part not in n["partitions"]:
                n["partitions"].append(part)
    return list(nodes.values())


def vc_config_from_sinfo(data, trace: pd.DataFrame, source: str = "sinfo --json",
                         gpus_per_node: int = 8) -> tuple[pd.DataFrame, list[str]]:
    """`sinfo --json` + the imported trace -> (VC config `vc,nodes,gpus_per_node`, notes).

    One row per VC of the trace: the partition's nodes that have GPUs, and their most common GPU
    count. A VC that is not a partition in sinfo is sized from the trace (docs/simulator.md)."""
    from .backends.slurm import gres_gpu_count
    from .cluster import size_cluster_from_trace

    if isinstance(data, dict) and isinstance(data.get("sinfo"), list) and not isinstance(data.get("nodes"), list):
        data = {"nodes": _nodes_of_sinfo_groups(data["sinfo"])}
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        what = ("it looks like `sacct --json` output" if isinstance(data, dict) and "jobs" in data
                else "no 'nodes' list, nor 23.02's 'sinfo' list")
        raise SacctImportError(f"{source}: not `sinfo --json` output ({what})")
    members: dict[str, list[int]] = {}
    node_parts: dict[str, tuple] = {}
    for rec in data["nodes"]:
        if not isinstance(rec, dict) or not isinstance(rec.get("name"), str) or not rec.get("name"):
            continue  # (a damaged file's list for a name raised TypeError: a fuzzing session)
        gpus = gres_gpu_count(str(rec.get("gres") or ""))
        listed = rec.get("partitions") or ()
        parts = (listed,) if isinstance(listed, str) else tuple(str(p) for p in listed)  # "research", not r, e, s...
        node_parts[rec["name"]] = parts
        for p in parts:
            members.setdefault(p, []).append(gpus)
    notes, rows = [], []
    vcs = sorted(trace["vc"].astype(str).unique()) if len(trace) else []
    missing = []
    for vc in vcs:
        counts = [g for g in members.get(vc, []) if g > 0]
        if not counts:
            missing.append(vc)
            continue
        common = Counter(counts).most_common()
        gpn = max(c for c, n in common if n == common[0][1])
        if len(common) > 1:
            notes.append(f"partition {vc}: nodes have {', '.join(f'{n}x{c}' for c, n in common)} GPUs; the "
                         f"simulator's VC has identical nodes, so {len(counts)} nodes of {gpn} GPUs")
        rows.append({"vc": vc, "nodes": len(counts), "gpus_per_node": gpn})
    if missing:
        # the trace's submit times are ISO text here (as the csv gets them); sizing needs seconds
        part = trace[trace["vc"].isin(missing)].copy()
        stamps = pd.to_datetime(part["submit_time"], errors="coerce", utc=True)
        part["submit_time"] = (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds().fillna(0)
        sized = size_cluster_from_trace(part, gpus_per_node=gpus_per_node)
        for vc in missing:
            v = sized.vcs[vc]
            rows.append({"vc": vc, "nodes": v.nodes, "gpus_per_node": v.gpus_per_node})
            notes.append(f"VC {vc}: no partition with GPU nodes of that name in {source}; sized from the trace "
                         f"({v.nodes} nodes of {v.gpus_per_node} GPUs)")
    cfg = pd.DataFrame(rows, columns=["vc", "nodes", "gpus_per_node"])
    shared = [n for n, parts in node_parts.items() if len(set(parts) & {r["vc"] for r in rows}) > 1]
    if shared:
        total = len({n for n, parts in node_parts.items() if set(parts) & {r["vc"] for r in rows}})
        notes.append(f"{len(shared)} node(s) belong to more than one of these partitions; the simulator's VCs do "
                     f"not share nodes, so the config has {int(cfg['nodes'].sum())} nodes for {total} real ones: "
                     "the simulated cluster is that much bigger and queues less than yours did (an admin trial: "
                     "simulated `slurm` 41 % under the history's own avg JCT); edit it to the split you want, or "
                     f"simulate with --nodes {total}")
    if len(cfg):  # a job larger than its VC would stop `simulate`; say so here
        cap = {r["vc"]: r["nodes"] * r["gpus_per_node"] for r in rows}
        big = trace[trace["gpu_num"] > trace["vc"].map(cap)]
        if len(big):
            b = big.iloc[0]
            notes.append(f"{len(big)} job(s) ask for more GPUs than their VC has (e.g. job {b['job_id']}: "
                         f"{int(b['gpu_num'])} GPUs, VC {b['vc']}: {cap[b['vc']]})")
    return cfg, notes


# ----- files and the command ----------------------------------------------------------------------

#: What import-sacct reads of a job record (_read_run, fill_missing_users): the rest (its steps,
#: above all, a third of a record with one batch step and most of one with many) is dropped as the
#: file is parsed, so a big history is not held whole in memory (a review: 100,000 jobs took 3.4 GB)
SACCT_RECORD_KEYS = frozenset(("job_id", "array", "het", "time", "tres", "comment", "association", "cluster",
                               "state", "partition", "user", "name", "account", "nodes"))


def compact_sacct_record(d: dict) -> dict:
    """json's object_hook for `sacct --json`: a job record (the only objects with both `job_id`
    and `steps`) keeps only SACCT_RECORD_KEYS; every other object is left as it is."""
    if "steps" in d and "job_id" in d:
        return {k: v for k, v in d.items() if k in SACCT_RECORD_KEYS}
    return d


def read_json_file(path, what: str = "sacct --json", object_hook=None) -> dict:
    """A JSON file as a dict, or one line naming the file and what is wrong with it. `object_hook`:
    json's, to shrink objects as they are parsed (compact_sacct_record)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise SacctImportError(f"{path}: is a directory, not a `{what}` file")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise SacctImportError(f"{path}: file not found") from None
    except OSError as exc:
        raise SacctImportError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if not raw.strip():
        raise SacctImportError(f"{path}: empty file (expected `{what}` output)")
    try:
        text = raw.decode("utf-8-sig")
        del raw  # (the bytes are not needed while the text is parsed: one copy of the file less)
        return json.loads(text, object_hook=object_hook)
    except UnicodeDecodeError as exc:
        raise SacctImportError(f"{path}: not UTF-8 text (byte {exc.start}); expected `{what}` output") from None
    except json.JSONDecodeError as exc:
        raise SacctImportError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                               f"expected `{what}` output") from None
    except (RecursionError, ValueError) as exc:  # nested past Python's depth, or a 5,000-digit number
        raise SacctImportError(f"{path}: cannot read it as JSON ({type(exc).__name__}: {str(exc)[:120]}); "
                               f"expected `{what}` output") from None


def parse_when(value, flag: str) -> int:
    """A --start/--end DATE (local time, as sacct reads it; or with an explicit offset) -> Unix seconds."""
    try:
        ts = pd.Timestamp(str(value).strip())
    except (ValueError, TypeError):
        ts = None
    if ts is None or ts is pd.NaT:
        raise SacctImportError(f"{flag} {value}: not a date/time (e.g. 2026-11-01 or 2026-11-01T08:00:00)")
    if ts.tzinfo is not None:
        return int(ts.timestamp())
    return int(time.mktime(ts.to_pydatetime().timetuple()))


def _sacct_time(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def fill_missing_users(data: dict, runner, start: int, end: int) -> int:
    """Give records without a user (sacct --json writes `user: null` for users without an
    association in slurmdbd, normal without AccountingStorageEnforce=associations: 78 of 131 jobs
    in an admin trial) the name sacct's text output shows. Returns the records filled."""
    missing = {}
    for rec in (data or {}).get("jobs") or []:
        if isinstance(rec, dict) and not (rec.get("user") or (rec.get("association") or {}).get("user")):
            missing.setdefault(str(json_int(rec.get("job_id"), "")), []).append(rec)
    if not missing:
        return 0
    text = runner.run(["sacct", "--allusers", "--duplicates", "-X", "-n", "-P", "-o", "JobIDRaw,User",
                       "--starttime", _sacct_time(start), "--endtime", _sacct_time(end)])
    filled = 0
    for line in text.splitlines():
        job_id, _, user = line.strip().partition("|")
        for rec in missing.pop(job_id, []) if user else []:
            rec["user"] = user
            filled += 1
    return filled


def _merge_window(data: dict | None, part: dict, seen: set) -> dict:
    """`sacct --json` of consecutive windows as one reply: sacct lists every job active in a window,
    so one that ran across a boundary is in both, identical; it is kept once, and not counted as a
    duplicate record (those are of the history itself). `seen`: the records' keys kept so far."""
    if not isinstance(part, dict) or not isinstance(part.get("jobs"), list):
        return part if data is None else data  # (check_sacct_data says what is wrong with it)
    if data is None:
        data = {**part, "jobs": []}
    elif part.get("errors"):
        data["errors"] = list(data.get("errors") or []) + list(part["errors"])
    for rec in part["jobs"]:
        if isinstance(rec, dict):
            key = hashlib.blake2b(json.dumps(rec, sort_keys=True, default=str).encode(), digest_size=16).digest()
            if key in seen:
                continue
            seen.add(key)
        data["jobs"].append(rec)
    return data


def live_argv(start: int, end: int) -> list:
    """The sacct command `--live` runs for a window (for the whole one: the trace's source)."""
    return ["sacct", "--json", "--allusers", "--duplicates", "--starttime", _sacct_time(start),
            "--endtime", _sacct_time(end)]



def _write_csv(df: pd.DataFrame, path: str, flag: str) -> None:
    if os.path.isdir(path):
        raise SacctImportError(f"{flag} {path}: is a directory; give a file name")
    if os.path.lexists(path) and (os.path.islink(path) or not os.path.isfile(path)):
        # written through a temporary file and renamed over it, a pipe, a device or a link would be
        # replaced by a plain file (as root, /dev/full was: a fuzzing session)
        raise SacctImportError(f"{flag} {path}: not a plain file (a pipe, a device or a link); "
                               "give the path of a file to write")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise SacctImportError(f"{flag} {path}: folder {parent} does not exist")
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        df.to_csv(tmp, index=False)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise SacctImportError(f"{flag} {path}: cannot write it ({exc.strerror or exc})") from None


def cmd_import_sacct(args, runner=None) -> int:
    """`lucidctl import-sacct`: everything but the argument parsing."""
    if bool(args.json_file) == bool(args.live):
        raise SacctImportError("import-sacct: give one of --json-file FILE (saved `sacct --json` output) "
                               "or --live (run sacct now)")
    start = parse_when(args.start, "--start") if args.start else None
    end = parse_when(args.end, "--end") if args.end else None
    if start is not None and end is not None and end <= start:
        raise SacctImportError(f"--end {args.end}: must be after --start {args.start}")
    if args.vc_config_out and not (args.sinfo_json or args.live):
        raise SacctImportError("--vc-config-out needs --sinfo-json FILE (saved `sinfo --json` output) or --live; "
                               "without it, leave --vc-config-out out and `simulate` sizes the VCs from the trace")
    if args.out == args.vc_config_out:
        raise SacctImportError(f"--out and --vc-config-out are the same file ({args.out})")
    for out_flag, out in (("--out", args.out), ("--vc-config-out", args.vc_config_out)):
        for in_flag, given in (("--json-file", args.json_file), ("--sinfo-json", args.sinfo_json)):
            if out and given and os.path.exists(given) and os.path.exists(out) and os.path.samefile(out, given):
                raise SacctImportError(f"{out_flag} {out} is the input {in_flag}: it would be overwritten")
    sinfo = read_json_file(args.sinfo_json, "sinfo --json") if args.sinfo_json else None
    if args.live:
        from .backends.slurm import SlurmRunner

        runner = runner or SlurmRunner(timeout_s=600.0)
        now = int(time.time())
        end_q = end if end is not None else now
        start_q = start if start is not None else end_q - DEFAULT_LIVE_DAYS * 86400
        if start_q >= now:
            what = (f"--start {args.start}" if start is not None else
                    f"--end {args.end}: the start it implies ({DEFAULT_LIVE_DAYS} days before, {_sacct_time(start_q)})")
            raise SacctImportError(f"{what}: in the future (now is {_sacct_time(now)}): no job has ended since")
        source = " ".join(live_argv(start_q, end_q))
        data = None
        seen = set()
        # a window at a time: one sacct call for a month of a large cluster's jobs held them all in
        # memory twice (its text and its objects) and could outrun the command's timeout. A week
        # first, then twice as long after a window of few records (years of a quiet cluster in a
        # dozen calls), half as long after a big one
        w_start, window = start_q, LIVE_WINDOW_S
        while w_start < end_q:
            w_end = min(end_q, w_start + window)
            part = runner.run_json(live_argv(w_start, w_end), object_hook=compact_sacct_record)
            fill_missing_users(part, runner, w_start, w_end)
            data = _merge_window(data, part, seen)
            n = len(part.get("jobs") or []) if isinstance(part, dict) else 0
            window = window * 2 if n < LIVE_WINDOW_RECORDS // 4 else max(3600, window // 2) \
                if n > LIVE_WINDOW_RECORDS else window
            w_start = w_end
        start = start_q
        if args.vc_config_out and sinfo is None:
            sinfo = runner.run_json(["sinfo", "--json"])
    else:
        source = args.json_file
        data = read_json_file(args.json_file, "sacct --json", object_hook=compact_sacct_record)
    trace, rep = sacct_json_to_trace(data, source=source, start=start, end=end,
                                     keep_cpu_jobs=args.keep_cpu_jobs,
                                     lucid_partitions=_partitions(args.lucid_partitions),
                                     default_vc=args.default_vc)
    if rep.jobs == 0:
        drop = ", ".join(f"{n} {r}" for r, n in rep.dropped.items()) or "none"
        extra = f"; {rep.notes[0]}" if rep.notes else ""
        raise SacctImportError(f"{source}: no jobs to write ({rep.records} sacct records; dropped: {drop}){extra}")
    vc_notes = []
    vc_cfg = None
    if args.vc_config_out:
        vc_cfg, vc_notes = vc_config_from_sinfo(sinfo, trace, args.sinfo_json or "sinfo --json")
    _write_csv(trace, args.out, "--out")
    if vc_cfg is not None:
        _write_csv(vc_cfg, args.vc_config_out, "--vc-config-out")
    if getattr(args, "json", False):
        d = rep.to_dict()
        d.update({"out": os.path.abspath(args.out), "vc_config_out": os.path.abspath(args.vc_config_out)
                  if vc_cfg is not None else None, "vc_config": vc_cfg.to_dict("records") if vc_cfg is not None
                  else None, "vc_config_notes": vc_notes})
        print(json.dumps(d, indent=2))
        return 0
    for line in rep.lines():
        print(line)
    for n in vc_notes:
        print(f"note: {n}")
    print(f"wrote {rep.jobs} jobs to {args.out}"
          + (f" and {len(vc_cfg)} VCs to {args.vc_config_out}" if vc_cfg is not None else ""))
    hint = f" --vc-config {args.vc_config_out}" if vc_cfg is not None else ""
    print(f"next: lucidctl simulate --trace {args.out} --format csv{hint} --out sim-out/")
    return 0


def _partitions(value) -> tuple:
    if value is None:
        return LUCID_PARTITIONS
    return tuple(p.strip() for p in str(value).split(",") if p.strip())


__all__ = ["sacct_json_to_trace", "vc_config_from_sinfo", "ImportReport", "SacctImportError", "read_json_file",
           "check_sacct_data", "cmd_import_sacct", "TRACE_COLUMNS", "LUCID_PARTITIONS"]
