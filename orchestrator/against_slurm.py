"""Why a Lucid-on-Slurm replay is behind `slurm` where it is: data for `lucidctl simulate`'s notes.

An admin who replays their history and finds lucidd's average JCT or p99.9 queue above Slurm's own
should see, beside the table, what the replay itself says about the cause, not only the figure.
The causes measured on the load sweep (docs/lucid.md, "The tails still above slurm's"):
- profiling runs that outlive Tprof restart from zero in their partition, so their first Tprof is
  done twice; past 100 % offered load the last jobs wait until the work ahead of them is done, so
  that work lengthens the tail (and the profiler is also where the average's gain comes from);
- every job waits in lucidd's inbox until its next cycle, so a gap under one reconcile interval
  is that wait.
Pure function of plain data (summary rows, the replay's profiler counters): no replay, no clock.
"""

from __future__ import annotations

# The variants that go through Slurm's engine as lucidd does (orchestrator/slurm_mode.py); the
# standalone engine is another scheduler, whose gaps these causes do not describe.
ON_SLURM = ("lucid", "lucid-noprofiler", "lucid-nopacking", "lucid-oracle")
SMALL_GAP = 0.02  # under this share, one replay's gap is not yet a difference


def _gap(a: float, b: float) -> str:
    """How far a is above b: a share, or seconds where the share rounds to nothing."""
    if b and abs(a - b) / b >= 0.0005:
        return f"{(a - b) / b * 100:+.1f} %"
    return f"{a - b:+,.0f} s"


def behind_slurm(rows: list[dict], profiler: dict, offered_load: float, total_gpus: int,
                 interval_s: float) -> list[dict]:
    """One entry per Lucid-on-Slurm policy whose average JCT or p99.9 queue is above `slurm`'s in
    `rows` (summary rows: policy, avg_jct_s, p999_queue_s); none without a `slurm` row.

    profiler: {policy: the replay's profiler counters (requeued, lost_gpu_s)}; offered_load: GPU
    demand over capacity (`lucidd.metrics.offered_load`); interval_s: lucidd's reconcile interval.
    Each entry: policy, behind ({measure: [lucid, slurm]}), causes (list of {cause, ...figures}):
    "inbox wait" (the gap is at most one interval; alone then), "profiling runs done twice",
    "overload" (p99.9 behind past 100 % load), or "order" when neither of the last two applies;
    small_gap: every gap under SMALL_GAP of `slurm`'s figure."""
    base = next((r for r in rows if r["policy"] == "slurm"), None)
    if base is None:
        return []
    out = []
    for r in rows:
        if r["policy"] not in ON_SLURM:
            continue
        behind = {m: [r[m], base[m]] for m in ("avg_jct_s", "p999_queue_s") if r[m] > base[m]}
        if not behind:
            continue
        causes = []
        st = profiler.get(r["policy"]) or {}
        if max(lu - sl for lu, sl in behind.values()) <= interval_s:
            # a few seconds: what every job pays before lucidd sees it, not profiling or the order
            causes.append({"cause": "inbox wait", "interval_s": interval_s})
        else:
            if st.get("requeued"):
                causes.append({"cause": "profiling runs done twice", "requeued": int(st["requeued"]),
                               "gpu_h": round(st["lost_gpu_s"] / 3600, 1),
                               "cluster_h": round(st["lost_gpu_s"] / total_gpus / 3600, 2) if total_gpus else 0.0})
            if offered_load > 1.0 and "p999_queue_s" in behind:
                causes.append({"cause": "overload", "offered_load": round(offered_load, 3)})
            if not causes:
                causes.append({"cause": "order", "offered_load": round(offered_load, 3)})
        # a replay without preemption is chaotic: a gap of a percent or two can move to either side
        # when submissions move by a minute (docs/lucid.md, "Jittered replays")
        small = all(sl > 0 and (lu - sl) / sl < SMALL_GAP for lu, sl in behind.values())
        out.append({"policy": r["policy"], "behind": behind, "causes": causes, "small_gap": small})
    return out


def describe(entry: dict) -> str:
    """One line of text for an entry of `behind_slurm` (the rendering, kept apart from the data)."""
    names = {"avg_jct_s": "avg JCT", "p999_queue_s": "p99.9 queue"}
    gaps = ", ".join(f"{names[m]} {lu:,.0f} s against {sl:,.0f} s ({_gap(lu, sl)})"
                     for m, (lu, sl) in entry["behind"].items())
    twice = any(c["cause"] == "profiling runs done twice" for c in entry["causes"])
    why = []
    for c in entry["causes"]:
        if c["cause"] == "profiling runs done twice":
            why.append(f"{c['requeued']:,} profiling runs outlived Tprof and restarted from zero in their "
                       f"partition, {c['gpu_h']:,.0f} GPU-h done twice ({c['cluster_h']:,.1f} h of the whole cluster)")
        elif c["cause"] == "overload":
            why.append(f"the offered load is {c['offered_load'] * 100:.0f} %: the last jobs wait until the work "
                       f"queued ahead of them is done, so {'work done twice and ' if twice else ''}GPUs left idle "
                       f"lengthen the tail")
        elif c["cause"] == "order":
            low = " and the offered load is below 100 %" if c["offered_load"] <= 1.0 else ""
            why.append(f"no profiling run was done twice{low}: the gap is the order's (estimate x GPUs until a "
                       f"job starves, then by age), which `lucidctl explain job ID --sim-out DIR` shows job by job")
        elif c["cause"] == "inbox wait":
            why.append(f"the gap is within one reconcile interval ({c['interval_s']:g} s), the wait of every "
                       f"new job in lucidd's inbox for its next cycle")
    text = f"{entry['policy']} is behind slurm: {gaps}."
    if why:
        causes = "; ".join(why)
        text += f" {causes[0].upper()}{causes[1:]}."
    if entry.get("small_gap"):
        text += (" A gap under 2 % can be one replay's luck: replays with submissions moved by a minute "
                 "land on either side (docs/lucid.md, \"Jittered replays\").")
    if twice and entry["policy"] != "lucid-noprofiler":
        text += " lucid-noprofiler replays the same order without profiling, to show what it gains and costs here."
    return text + ' See docs/lucid.md, "The tails still above slurm\'s".'
