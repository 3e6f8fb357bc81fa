"""Summary figures of a simulation run (the columns of summary.csv)."""

from __future__ import annotations

import numpy as np
import pandas as pd

SUMMARY_COLUMNS = [
    "policy", "jobs", "avg_jct_s", "avg_queue_s", "p999_queue_s", "p50_jct_s", "p99_jct_s", "makespan_s",
    "preemptions", "profiler_finished", "packed_jobs", "gpu_util",
]


def offered_load(trace: pd.DataFrame, total_gpus: int) -> float:
    """GPU-seconds asked over the cluster's GPUs x the submission span: above 1, work arrives faster
    than the cluster can do it, and the queue grows until the submissions stop."""
    if not len(trace) or total_gpus <= 0:
        return 0.0
    span = float(trace["submit_time"].max() - trace["submit_time"].min()) or 1.0
    return float((trace["gpu_num"] * trace["duration"]).sum()) / (total_gpus * span)


def busy_gpu_seconds(series: pd.DataFrame, until: int) -> float:
    """Integrate the cluster-wide busy-GPU step series up to `until`."""
    if series is None or series.empty:
        return 0.0
    t = series["time"].to_numpy(dtype=np.int64)
    b = series["busy_gpus"].to_numpy(dtype=float)
    nxt = np.append(t[1:], max(until, int(t[-1])))
    return float(np.sum(b * np.clip(nxt - t, 0, None)))


def summarize(policy: str, jobs: pd.DataFrame, series: pd.DataFrame | None, total_gpus: int) -> dict:
    """Averages over all jobs; percentiles use linear interpolation (numpy's default), as the
    reference results do."""
    jct = jobs["jct_s"].to_numpy(dtype=float)
    queue = jobs["queue_s"].to_numpy(dtype=float)
    first = int(jobs["submit_time"].min()) if len(jobs) else 0
    last = int(jobs["end_time"].max()) if len(jobs) else 0
    makespan = last - first
    busy = busy_gpu_seconds(series, last)
    return {
        "policy": policy,
        "jobs": int(len(jobs)),
        "avg_jct_s": round(float(jct.mean()), 1) if len(jct) else 0.0,
        "avg_queue_s": round(float(queue.mean()), 1) if len(queue) else 0.0,
        "p999_queue_s": round(float(np.percentile(queue, 99.9)), 1) if len(queue) else 0.0,
        "p50_jct_s": round(float(np.percentile(jct, 50)), 1) if len(jct) else 0.0,
        "p99_jct_s": round(float(np.percentile(jct, 99)), 1) if len(jct) else 0.0,
        "makespan_s": makespan,
        "preemptions": int(jobs["preemptions"].sum()) if "preemptions" in jobs else 0,
        "profiler_finished": int(jobs["profiler_finished"].fillna(False).astype(bool).sum()) if "profiler_finished" in jobs else 0,
        "packed_jobs": int(jobs["shared"].sum()) if "shared" in jobs else 0,
        "gpu_util": round(busy / (total_gpus * makespan), 4) if total_gpus and makespan > 0 else 0.0,
    }


def format_table(rows: list[dict], columns=None) -> str:
    """Plain-text table for the terminal."""
    columns = columns or ["policy", "jobs", "avg_jct_s", "avg_queue_s", "p999_queue_s", "p50_jct_s", "p99_jct_s",
                          "makespan_s", "preemptions", "gpu_util"]
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(columns, widths)))]
    for row in cells:
        lines.append("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:,.0f}"
    if isinstance(v, (int, np.integer)):
        return f"{v:,}"
    return str(v)
