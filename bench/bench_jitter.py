"""How much of a gap between two policies is the schedule's chaos: replay a sweep point again with
every submission time moved by a few seconds, and count how often each policy wins.

A replay of a non-preemptive cluster is chaotic: one job placed on another node a minute earlier
changes which GPUs are free when a 2-GPU job arrives hours later, and a job that could have
started at once waits half a day for two GPUs on one node. Gaps of a fraction of a percent in
average JCT, or of a few percent in a p99.9 that is the wait of three or four jobs, can come from
such an accident rather than from the order. This bench measures that: for each seed, every job's
submission time moves by a uniform whole number of seconds in [-J, +J] (J = `--jitter-s`, 60 s by
default; the jobs' order may change only among jobs submitted within 2J of each other), the
duration model is refitted on the moved trace, and every policy replays it.

It prints per point and policy: the unjittered figure, the mean and spread over the seeds of avg
JCT and p99.9 queue, and in how many seeds the first policy (`lucid`) is at or below each other
policy on each measure.

Run: .venv/bin/python bench/bench_jitter.py [--points vc:vcKrE:4,vc:vcHvQ:8] [--policies
     lucid,slurm,lucid-noprofiler] [--seeds 10] [--jitter-s 60]
Points are bench_sweep's (`venus:F`, `philly:F`, `vc:NAME:N`) and `sample` (the bundled sample trace).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sweep import experiment, parse_policy  # noqa: E402


def point_experiment(point: str):
    """bench_sweep's experiment for `point`, or the bundled sample on its own VCs (`sample`, as
    `lucidctl simulate` with no flags)."""
    if point != "sample":
        return experiment(point)
    from lucidd.experiment import make_experiment
    from lucidd.traces import load_trace, sample_trace_path, sample_vc_config_path

    return make_experiment(load_trace(sample_trace_path()), vc_config=sample_vc_config_path())


def replay(exp, policy: str) -> dict:
    """avg JCT, p99.9 queue... of one replay; `policy` may carry options (`lucid[tprof=600]`)."""
    from orchestrator.tuner import replay_metrics

    name, opts = parse_policy(policy)
    return replay_metrics(exp, name, opts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="vc:vcKrE:4,vc:vcWoR:4,vc:vcHvQ:8,vc:vcLTP:8")
    ap.add_argument("--policies", default="lucid,slurm,lucid-noprofiler",
                    help="the first is compared with each of the others")
    ap.add_argument("--seeds", type=int, default=10, help="jittered replays per point (plus the unmoved one)")
    ap.add_argument("--jitter-s", type=int, default=60)
    args = ap.parse_args(argv)
    policies = [p for p in args.policies.split(",") if p]
    first = policies[0]
    for point in [p for p in args.points.split(",") if p]:
        runs = {p: [] for p in policies}  # per seed: (avg JCT, p99.9 queue); index 0 = unmoved
        t0 = time.perf_counter()
        base = point_experiment(point)  # loaded once; each seed moves a copy of it
        for seed in range(args.seeds + 1):
            exp = base.jittered(seed, args.jitter_s) if seed else base
            for p in policies:
                s = replay(exp, p)
                runs[p].append((s["avg_jct_s"], s["p999_queue_s"]))
        print(f"\n== {point}: {args.seeds} replays with submissions moved by up to +-{args.jitter_s} s "
              f"({time.perf_counter() - t0:.0f} s)")
        print(f"   {'policy':24s} {'avg JCT: unmoved':>16s} {'mean':>9s} {'sd':>7s} {'min..max':>17s}   "
              f"{'p99.9 queue: unmoved':>20s} {'mean':>10s} {'sd':>8s}")
        for p in policies:
            j = [a for a, _ in runs[p][1:]]
            q = [b for _, b in runs[p][1:]]
            sd = statistics.stdev if len(j) > 1 else (lambda _: 0.0)
            print(f"   {p:24s} {runs[p][0][0]:16,.0f} {statistics.mean(j):9,.0f} {sd(j):7,.0f} "
                  f"{min(j):8,.0f}..{max(j):<8,.0f}   {runs[p][0][1]:20,.0f} {statistics.mean(q):10,.0f} {sd(q):8,.0f}")
        for p in policies[1:]:
            wj = sum(a[0] <= b[0] for a, b in zip(runs[first][1:], runs[p][1:]))
            wq = sum(a[1] <= b[1] for a, b in zip(runs[first][1:], runs[p][1:]))
            ratio = statistics.mean(a[0] / b[0] for a, b in zip(runs[first][1:], runs[p][1:]))
            print(f"   {first} <= {p}: avg JCT in {wj} of {args.seeds} (mean ratio {ratio:.4f}), "
                  f"p99.9 queue in {wq} of {args.seeds}")


if __name__ == "__main__":
    main()
