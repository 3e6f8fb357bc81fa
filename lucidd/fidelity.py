"""Compare a replay with reference per-job results (the Lucid artifact's, or a real cluster's).

The reference for the Venus trace comes from the original simulator, whose order for jobs
submitted in the same second came from an unstable sort over a file we do not have. Two tools
make the comparison fair, both documented in docs/fidelity.md:
- `match_rates` counts a job as matching when its start time equals the reference's, and also
  reports the rate when identical jobs (same VC, submit time, duration, GPUs) may swap places.
- `tie_order_from_reference` orders same-second submissions the way a strict-order reference
  run (FIFO) started them, recovering as much of the original order as its output reveals.
"""

from __future__ import annotations

import pandas as pd


def match_rates(results: pd.DataFrame, reference: pd.DataFrame) -> dict:
    """results: our jobs_<policy>.csv frame; reference: job_id,start_time[,jct] rows of one run."""
    ref = reference.assign(job_id=reference["job_id"].astype(str)).drop_duplicates("job_id").set_index("job_id")
    ours = results.assign(job_id=results["job_id"].astype(str)).set_index("job_id")
    both = ours.join(ref[["start_time"]].rename(columns={"start_time": "ref_start"}), how="inner")
    exact = (both["start_time"] == both["ref_start"])
    swapped = 0
    for _, grp in both.groupby(["vc", "submit_time", "duration", "gpu_num"], sort=False):
        if len(grp) == 1:
            swapped += int(exact.loc[grp.index].iloc[0])
            continue
        a = grp["start_time"].value_counts()
        b = grp["ref_start"].value_counts()
        swapped += int(sum(min(n, int(b.get(k, 0))) for k, n in a.items()))
    out = {
        "jobs_compared": int(len(both)),
        "start_match": float(exact.mean()) if len(both) else 0.0,
        "start_match_identical_swaps": swapped / len(both) if len(both) else 0.0,
    }
    if "jct" in ref:
        ref_jct = float(ref.loc[both.index, "jct"].mean())
        out["avg_jct_s"] = float(both["jct_s"].mean())
        out["ref_avg_jct_s"] = ref_jct
        out["avg_jct_rel_diff"] = abs(out["avg_jct_s"] - ref_jct) / ref_jct if ref_jct else 0.0
    return out


def tie_order_from_reference(trace: pd.DataFrame, strict_order_reference: pd.DataFrame) -> pd.DataFrame:
    """Reorder `trace` (and renumber `seq`) so jobs submitted in the same second follow the
    order in which a strict-order reference run started them; job_id order where it is silent."""
    starts = strict_order_reference.assign(job_id=strict_order_reference["job_id"].astype(str)) \
        .drop_duplicates("job_id").set_index("job_id")["start_time"]
    t = trace.assign(_ref_start=trace["job_id"].astype(str).map(starts))
    t = t.sort_values(["submit_time", "_ref_start", "seq"], kind="stable", na_position="last")
    return t.drop(columns="_ref_start").assign(seq=range(len(t))).reset_index(drop=True)
