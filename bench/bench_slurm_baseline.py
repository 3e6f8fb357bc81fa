"""The slurm baseline (age priority + sched/backfill) against the artifact's baselines, and its speed.

Prints avg JCT / avg queue / p99.9 queue on the full Venus September trace for fifo, qssf,
tiresias and slurm, then the replay time of fifo and slurm on the whole Philly trace (82,247 jobs,
VCs sized from the trace). Figures, never a timed test. Run: .venv/bin/python bench/bench_slurm_baseline.py
"""

import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
VENUS = SHARED / "traces" / "helios_venus_sept2020_lucid"
PHILLY = SHARED / "traces" / "philly_sia_completed" / "philly.csv"


def timed(exp, policy):
    wall, cpu = time.perf_counter(), time.process_time()
    res = exp.run(policy)
    return res, time.perf_counter() - wall, time.process_time() - cpu


def main():
    if not VENUS.is_dir() or not PHILLY.is_file():
        sys.exit(f"needs {VENUS} and {PHILLY} (the shared traces)")
    from lucidd.experiment import make_experiment
    from lucidd.metrics import summarize
    from lucidd.traces import load_trace

    exp = make_experiment(load_trace(VENUS / "jobs.csv"), vc_config=VENUS / "vc_config.csv")
    print(f"Venus, {len(exp.trace):,} jobs, {exp.spec.describe()}")
    print(f"{'policy':10s} {'avg_jct_s':>10s} {'avg_queue_s':>12s} {'p999_queue_s':>13s} {'wall_s':>7s} {'cpu_s':>6s}")
    for policy in ("fifo", "qssf", "tiresias", "slurm"):
        res, wall, cpu = timed(exp, policy)
        s = summarize(policy, res.jobs, res.series, res.total_gpus)
        print(f"{policy:10s} {s['avg_jct_s']:10,.0f} {s['avg_queue_s']:12,.0f} {s['p999_queue_s']:13,.0f} "
              f"{wall:7.2f} {cpu:6.2f}")

    exp = make_experiment(load_trace(PHILLY))
    print(f"\nPhilly, {len(exp.trace):,} jobs, {exp.spec.total_nodes} nodes in {len(exp.spec.vcs)} VCs (sized from the trace)")
    for policy in ("fifo", "slurm"):
        _, wall, cpu = timed(exp, policy)
        print(f"{policy:10s} replay {wall:6.2f} s wall, {cpu:6.2f} s CPU ({len(exp.trace) / wall:,.0f} jobs/s)")


if __name__ == "__main__":
    main()
