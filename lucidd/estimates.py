"""Duration estimates for estimate-driven policies (QSSF; Lucid uses models.duration).

Two sources, both safe against peeking at the future:
- `history_estimates`: the user's mean duration over their jobs that had already ended when the
  job was submitted (same GPU count first, then any), falling back to the mean of ended jobs
  with the same GPU count, then of all ended jobs, then a constant.
- `load_estimates`: a file of precomputed estimates (ours: `job_id,estimate_s`; the Lucid
  artifact's: `job_id,priority`, where, as the artifact does, negative values become 1000 s).
"""

from __future__ import annotations

import heapq
import os
from collections import defaultdict

import pandas as pd

from .csvfiles import RowWidthError, read_table, row_line
from .errors import TraceError

#: Estimate used before any job has ended (one hour).
COLD_START_ESTIMATE_S = 3600.0


def history_estimates(jobs: pd.DataFrame) -> pd.Series:
    """Estimate per job (indexed like `jobs`) from jobs ended before its submission.

    "Ended" means submit_time + duration <= this job's submit_time (the earliest a job could
    have ended); docs/simulator.md explains the choice.
    """
    order = jobs.sort_values(["submit_time", "seq"], kind="stable")
    users = order["user"].tolist() if "user" in order else [""] * len(order)
    gpus = order["gpu_num"].tolist()
    submits = order["submit_time"].tolist()
    durs = order["duration"].tolist()
    sums = defaultdict(lambda: [0.0, 0])
    ended = []  # heap of (end, position)
    out = [0.0] * len(order)

    def add(key, d):
        s = sums[key]
        s[0] += d
        s[1] += 1

    def mean(key):
        s = sums.get(key)
        return s[0] / s[1] if s and s[1] else None

    for pos in range(len(order)):
        t = submits[pos]
        while ended and ended[0][0] <= t:
            _, p = heapq.heappop(ended)
            d = float(durs[p])
            add(("ug", users[p], gpus[p]), d)
            add(("u", users[p]), d)
            add(("g", gpus[p]), d)
            add(("all",), d)
        u, g = users[pos], gpus[pos]
        est = None
        if u:
            est = mean(("ug", u, g))
            if est is None:
                est = mean(("u", u))
        if est is None:
            est = mean(("g", g))
        if est is None:
            est = mean(("all",))
        out[pos] = est if est is not None else COLD_START_ESTIMATE_S
        heapq.heappush(ended, (t + durs[pos], pos))
    return pd.Series(out, index=order.index).reindex(jobs.index)


def load_estimates(path) -> dict:
    """Read precomputed duration estimates keyed by job_id (as str)."""
    path = os.fspath(path)
    try:
        # ids as written ("NA" is a job id); only an empty cell is missing
        df = read_table(path, dtype={"job_id": str}, keep_default_na=False, na_values=[""])
    except FileNotFoundError:
        raise TraceError(path, "estimates file not found") from None
    except RowWidthError as exc:
        raise TraceError(path, f"{exc} (expected `job_id,estimate_s` on every row)", row=exc.line) from None
    except Exception as exc:
        raise TraceError(path, f"cannot read estimates ({exc})") from None
    if "job_id" not in df:
        raise TraceError(path, "estimates file needs a 'job_id' column", column="job_id")
    if "estimate_s" in df:
        col, artifact = "estimate_s", False
    elif "priority" in df:
        col, artifact = "priority", True
    else:
        raise TraceError(path, "estimates file needs an 'estimate_s' (or the artifact's 'priority') column")
    ids = df["job_id"].astype("string").str.strip()
    if ids.isna().any() or (ids == "").any():
        i = int((ids.isna() | (ids == "")).to_numpy().nonzero()[0][0])
        raise TraceError(path, "missing job_id (empty cell)", row=row_line(df, i), column="job_id")
    values = pd.to_numeric(df[col], errors="coerce")
    bad = values.isna() | ~values.abs().lt(float("inf"))
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise TraceError(path, f"estimate '{df[col].iloc[i]}' is not a finite number", row=row_line(df, i), column=col)
    if artifact:
        values = values.where(values >= 0, 1000.0)  # the artifact's CombinedEstimator rule
    elif (values < 0).any():
        i = int((values < 0).to_numpy().nonzero()[0][0])
        raise TraceError(path, "estimates must not be negative", row=row_line(df, i), column=col)
    values = values.astype(float)
    # A repeated line (files joined together) is harmless; two different estimates for one job
    # leave no way to know which was meant.
    first = values.groupby(ids).transform("first")
    clash = ids.duplicated(keep=False).to_numpy() & (values != first).to_numpy()
    if clash.any():
        i = int(clash.nonzero()[0][0])
        j = int((ids == ids.iloc[i]).to_numpy().nonzero()[0][0])
        raise TraceError(path, f"job {ids.iloc[i]} has two different estimates ({values.iloc[j]:g} on row "
                               f"{row_line(df, j)}, {values.iloc[i]:g} here)", row=row_line(df, i), column=col)
    keep = ~ids.duplicated(keep="first").to_numpy()
    return dict(zip(ids[keep].tolist(), values[keep].tolist()))
